"""The text classification pipeline: tokenise (ragged) -> runner pads per batch -> top-k labels."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from configs.deployments import Deployment
from families.text.limits import Limits
from families.text.manifest import TextPreprocess
from families.text.postprocess import top_k
from families.text.preprocess import TextTokenizer, refusal
from families.text.schemas import ClassifyRequest, ClassifyResponse, LabelScore, TextResult
from kernel.call import CallContext, bind, finish
from kernel.context import ServingContext
from kernel.errors import ApiError
from kernel.request_context import StageClock
from kernel.routing.inference import run_task
from kernel.routing.rollout import ServedModel
from kernel.schemas import ModelInfo
from models.manifest import preprocess_as
from observability.metrics import ITEMS, labelled


@dataclass
class TextPipeline:
    """One text deployment: its limits and a tokenizer per served version."""

    ctx: ServingContext
    deployment: Deployment
    limits: Limits
    tokenizers: dict[ServedModel, TextTokenizer] = field(default_factory=dict)  # per served version

    def tokenizer(self, model: ServedModel) -> TextTokenizer:
        if model not in self.tokenizers:
            pre = preprocess_as(model.manifest, TextPreprocess)
            self.tokenizers[model] = TextTokenizer(model.directory / pre.tokenizer_file, pre.max_length,
                                                   pre.pad_token_id)
        return self.tokenizers[model]

    def validate(self, body: ClassifyRequest) -> list[str]:
        """Count, top_k, the hard length limit and blank texts; the texts come back as received (truncation is per
        served model: TextTokenizer.encode_received)."""
        lim = self.limits
        if len(body.texts) > lim.max_texts:
            raise ApiError(422, "too_many_texts", f"{len(body.texts)} texts exceed the limit of {lim.max_texts}",
                           {"limit": lim.max_texts, "received": len(body.texts)})
        if body.top_k > lim.max_top_k:
            raise ApiError(422, "top_k_too_large", f"top_k {body.top_k} exceeds {lim.max_top_k}",
                           {"limit": lim.max_top_k})
        for i, t in enumerate(body.texts):
            refused = refusal(t, lim.max_chars, lim.hard_max_chars)
            if refused is not None:
                code, message, details = refused
                raise ApiError(422, code, f"text {i}: {message}", {"index": i, **details})
        return list(body.texts)

    async def run(self, body: ClassifyRequest, call: CallContext) -> ClassifyResponse:
        clock = StageClock()
        ctx, dep = self.ctx, self.deployment
        texts = self.validate(body)
        ctx.protection.access.capacity(dep.name, dep.family)
        bind(call, dep.name)
        labelled(ITEMS, dep.name).observe(len(texts))
        encoded: dict[ServedModel, tuple[list[np.ndarray], list[bool]]] = {}

        def items_for(model: ServedModel) -> list[np.ndarray]:
            encoded[model] = self.tokenizer(model).encode_received(texts, self.limits.max_chars)
            return encoded[model][0]

        result = await run_task(ctx, dep, items_for, body.model, clock, call.deadline, request_id=call.request_id,
                                route_key=call.route_key, arrived=call.arrived)
        labels = result.served.manifest.labels
        results = []
        for text, probs, ids, truncated in zip(texts, result.outputs, *encoded[result.served]):
            top = top_k(probs, body.top_k)
            if ctx.quality is not None:
                ctx.quality.observe(result.model, "top1_prob", [float(probs[top[0]])])
                ctx.quality.observe(result.model, "class_freq", [int(top[0])])
            results.append(TextResult(label=labels[top[0]], score=round(float(probs[top[0]]), 6),
                                      top_k=[LabelScore(label=labels[j], score=round(float(probs[j]), 6)) for j in top],
                                      tokens=len(ids), truncated=truncated, chars=len(text)))
        clock.stage("postprocess")
        return finish(dep.name, ClassifyResponse(
            request_id=call.request_id, deployment=dep.name, model=ModelInfo(name=result.model, version=result.version),
            degraded=result.degraded, degraded_reason=result.degraded_reason,
            timings=clock.timings(result.infer_ms), results=results), call, result.batch)

