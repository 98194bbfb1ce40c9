"""The text classification family: tokenised (ragged) texts -> class probabilities -> top-k labels."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from triserve.families.text.limits import Limits
from triserve.families.text.manifest import TextPreprocess
from triserve.families.text.postprocess import check_probabilities, top_k
from triserve.families.text.preprocess import TextTokenizer, refusal
from triserve.families.text.schemas import ClassifyRequest, ClassifyResponse, LabelScore, TextResult
from triserve.kernel.errors import ApiError
from triserve.kernel.family import Family, FamilyApi, OipSurface, RestRoute
from triserve.kernel.served import ServedModel
from triserve.kernel.tensors import TOP_K_OUTPUTS, TensorMeta, bad_request, check_batch
from triserve.models.manifest import preprocess_as


@lru_cache(maxsize=64)
def tokenizer(model: ServedModel) -> TextTokenizer:
    """The tokenizer of a served version (identity: slot and version), read once."""
    pre = preprocess_as(model.manifest, TextPreprocess)
    return TextTokenizer(model.directory / pre.tokenizer_file, pre.max_length, pre.pad_token_id)


def validate_texts(limits: Limits, body: ClassifyRequest) -> list[str]:
    """Count, top_k, the hard length limit and blank texts; the texts come back as received (truncation is per
    served model: TextTokenizer.encode_received)."""
    if len(body.texts) > limits.max_texts:
        raise ApiError(422, "too_many_texts", f"{len(body.texts)} texts exceed the limit of {limits.max_texts}",
                       {"limit": limits.max_texts, "received": len(body.texts)})
    if body.top_k > limits.max_top_k:
        raise ApiError(422, "top_k_too_large", f"top_k {body.top_k} exceeds {limits.max_top_k}",
                       {"limit": limits.max_top_k})
    for i, t in enumerate(body.texts):
        refused = refusal(t, limits.max_chars, limits.hard_max_chars)
        if refused is not None:
            code, message, details = refused
            raise ApiError(422, code, f"text {i}: {message}", {"index": i, **details})
    return list(body.texts)


@dataclass(frozen=True)
class TextOip(OipSurface):
    """Text on OIP: TEXT in, top-k out; as a raw tensor model the graph's own input_ids + attention_mask, checked
    against the served version's length and vocabulary."""

    def tensor_items(self, view, served, arrays, batch_cap):
        ids, mask = arrays["input_ids"], arrays["attention_mask"]
        if ids.ndim != 2 or mask.shape != ids.shape:
            raise bad_request("shape_mismatch", "input_ids and attention_mask must both be [n, L]",
                              {"input_ids": list(ids.shape), "attention_mask": list(mask.shape)})
        check_batch(ids.shape[0], min(batch_cap, view.limits.max_texts), "input_ids")
        max_len = served.manifest.preprocess.max_length
        if ids.shape[1] > max_len:
            raise ApiError(422, "sequence_too_long", f"sequences of {ids.shape[1]} tokens exceed {max_len}",
                           {"limit": max_len, "length": int(ids.shape[1])})
        if not np.isin(mask, (0, 1)).all():
            raise bad_request("invalid_attention_mask", "attention_mask values must be 0 or 1")
        vocab = tokenizer(served).vocab_size
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



class TextFamily(Family):
    name = "text"
    api = FamilyApi(request_model=ClassifyRequest, response_model=ClassifyResponse,
                    routes=(RestRoute("/v1/classify", "application/json", ClassifyRequest, "Classify texts"),),
                    grpc_method="Classify",
                    oip=TextOip(alias="classify", inputs=(TensorMeta("TEXT", "BYTES", (-1,), field="texts"),),
                                outputs=TOP_K_OUTPUTS, parameters=("top_k", "model")))

    def validate(self, view, request):
        return validate_texts(view.limits, request)

    def items(self, view, work, model):
        ids, truncated = tokenizer(model).encode_received(work, view.limits.max_chars)
        return ids, (ids, truncated)

    def respond(self, view, request, work, answers):
        [answer] = answers
        result = answer.result
        labels = result.served.manifest.labels
        results = []
        for text, probs, ids, truncated in zip(work, result.outputs, *answer.state):
            top = top_k(probs, request.top_k)
            view.observe(result.model, "top1_prob", [float(probs[top[0]])])
            view.observe(result.model, "class_freq", [int(top[0])])
            results.append(TextResult(label=labels[top[0]], score=round(float(probs[top[0]]), 6),
                                      top_k=[LabelScore(label=labels[j], score=round(float(probs[j]), 6)) for j in top],
                                      tokens=len(ids), truncated=truncated, chars=len(text)))
        return {"results": results}

    def check_outputs(self, manifest, outputs):
        for probs in outputs:
            check_probabilities(probs, len(manifest.labels))

    def agreement(self, manifest, served, shadow):
        return float(int(np.argmax(served)) == int(np.argmax(shadow)))


FAMILY = TextFamily()
