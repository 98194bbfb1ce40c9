"""The text classification family: tokenised (ragged) texts -> class probabilities -> top-k labels."""
from __future__ import annotations

import numpy as np

from families.text.postprocess import check_probabilities
from families.text.schemas import ClassifyRequest, ClassifyResponse
from kernel.errors import ApiError
from kernel.family import Family, RestRoute
from kernel.tensors import TensorMeta, bad_request, check_batch


class TextFamily(Family):
    name = "text"
    request_model = ClassifyRequest
    response_model = ClassifyResponse
    routes = (RestRoute("/v1/classify", "application/json", ClassifyRequest, "Classify texts"),)
    oip_alias = "classify"
    oip_pipeline_inputs = (TensorMeta("TEXT", "BYTES", (-1,), field="texts"),)
    oip_pipeline_outputs = (
        TensorMeta("LABEL", "BYTES", (-1,), value=lambda r: [x.label for x in r.results]),
        TensorMeta("SCORE", "FP32", (-1,), value=lambda r: [x.score for x in r.results]),
        TensorMeta("TOP_K_LABELS", "BYTES", (-1, -1), value=lambda r: [[t.label for t in x.top_k] for x in r.results]),
        TensorMeta("TOP_K_SCORES", "FP32", (-1, -1), value=lambda r: [[t.score for t in x.top_k] for x in r.results]))
    oip_parameters = ("top_k", "model")
    grpc_method = "Classify"

    def pipeline(self, ctx, deployment):
        from families.text.pipeline import TextPipeline

        return TextPipeline(ctx, deployment, ctx.limits(deployment))

    def check_outputs(self, manifest, outputs):
        for probs in outputs:
            check_probabilities(probs, len(manifest.labels))

    def agreement(self, manifest, served, shadow):
        return float(int(np.argmax(served)) == int(np.argmax(shadow)))

    def tensor_items(self, pipeline, served, arrays, batch_cap):
        ids, mask = arrays["input_ids"], arrays["attention_mask"]
        if ids.ndim != 2 or mask.shape != ids.shape:
            raise bad_request("shape_mismatch", "input_ids and attention_mask must both be [n, L]",
                              {"input_ids": list(ids.shape), "attention_mask": list(mask.shape)})
        check_batch(ids.shape[0], min(batch_cap, pipeline.limits.max_texts), "input_ids")
        max_len = served.manifest.preprocess.max_length
        if ids.shape[1] > max_len:
            raise ApiError(422, "sequence_too_long", f"sequences of {ids.shape[1]} tokens exceed {max_len}",
                           {"limit": max_len, "length": int(ids.shape[1])})
        if not np.isin(mask, (0, 1)).all():
            raise bad_request("invalid_attention_mask", "attention_mask values must be 0 or 1")
        vocab = pipeline.tokenizer(served).vocab_size
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


FAMILY = TextFamily()
