"""The text classification family: tokenised (ragged) texts -> class probabilities -> top-k labels."""
from __future__ import annotations

from typing import Any

import numpy as np

from families.text.postprocess import check_probabilities
from families.text.schemas import ClassifyRequest
from kernel.family import Family, RestRoute, TensorMeta


class TextFamily(Family):
    name = "text"
    routes = (RestRoute("/v1/classify", "application/json"),)
    oip_alias = "classify"
    oip_pipeline_inputs = (TensorMeta("TEXT", "BYTES", (-1,)),)
    oip_pipeline_outputs = (TensorMeta("LABEL", "BYTES", (-1,)), TensorMeta("SCORE", "FP32", (-1,)),
                            TensorMeta("TOP_K_LABELS", "BYTES", (-1, -1)), TensorMeta("TOP_K_SCORES", "FP32", (-1, -1)))
    grpc_method = "Classify"
    importers = ("text-hf", "text-onnx", "text-sklearn")

    @property
    def router(self):
        from families.text.service import router

        return router

    def pipeline(self, ctx, deployment):
        from families.text.service import TextPipeline

        return TextPipeline(ctx, deployment, ctx.limits(deployment))

    def check_outputs(self, manifest, outputs):
        for probs in outputs:
            check_probabilities(probs, len(manifest.labels))

    def agreement(self, manifest, served, shadow):
        return float(int(np.argmax(served)) == int(np.argmax(shadow)))

    def oip_tensor_items(self, ctx, deployment, served, tensors, batch_cap):
        manifest = served.manifest
        from kernel.errors import ApiError
        from services.protocols.oip import bad_request, check_batch

        ids, mask = tensors["input_ids"].data, tensors["attention_mask"].data
        if ids.ndim != 2 or mask.shape != ids.shape:
            raise bad_request("shape_mismatch", "input_ids and attention_mask must both be [n, L]",
                              {"input_ids": list(ids.shape), "attention_mask": list(mask.shape)})
        check_batch(ids.shape[0], min(batch_cap, ctx.limits(deployment).max_texts), "input_ids")
        max_len = manifest.preprocess.max_length
        if ids.shape[1] > max_len:
            raise ApiError(422, "sequence_too_long", f"sequences of {ids.shape[1]} tokens exceed {max_len}",
                           {"limit": max_len, "length": int(ids.shape[1])})
        if not np.isin(mask, (0, 1)).all():
            raise bad_request("invalid_attention_mask", "attention_mask values must be 0 or 1")
        vocab = ctx.pipeline(deployment).tokenizer(served).vocab_size
        items = []
        for i in range(ids.shape[0]):
            row = np.ascontiguousarray(ids[i][mask[i] == 1], dtype=np.int64)
            if row.size == 0:
                raise ApiError(422, "empty_sequence", f"row {i} has no unmasked tokens", {"index": i})
            if row.min() < 0 or (vocab and row.max() >= vocab):
                raise ApiError(422, "token_id_out_of_range", f"row {i} has token ids outside [0, {vocab})",
                               {"index": i, "vocab_size": vocab})
            items.append(row)
        return items

    async def oip_infer(self, ctx, deployment, inputs, parameters, call):
        from services.protocols.oip import bytes_tensor, fp32_tensor, pick_params, utf8

        body = ClassifyRequest(texts=utf8(inputs["TEXT"].data, "TEXT"), deployment=deployment.name,
                               **pick_params(parameters, ("top_k", "model")))
        resp = await ctx.pipeline(deployment).classify(body, call)
        k, n = len(resp.results[0].top_k), len(resp.results)
        outputs = [bytes_tensor("LABEL", [r.label for r in resp.results]),
                   fp32_tensor("SCORE", [r.score for r in resp.results]),
                   bytes_tensor("TOP_K_LABELS", [x.label for r in resp.results for x in r.top_k], [n, k]),
                   fp32_tensor("TOP_K_SCORES", [[x.score for x in r.top_k] for r in resp.results])]
        return outputs, resp

    def grpc_request(self, message: Any) -> ClassifyRequest:
        from services.protocols.grpc_typed import model_choice, set_fields

        return ClassifyRequest(texts=list(message.texts), model=model_choice(message.model),
                               **set_fields(message, ("top_k", "deployment")))

    async def handle(self, ctx, request, call):
        return await ctx.pipeline(await ctx.resolve(self.name, request.deployment)).classify(request, call)


FAMILY = TextFamily()
