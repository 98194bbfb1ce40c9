"""The detection pipeline: encoded images (base64 or bytes) -> letterbox -> runner -> capped NMS -> original pixels."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from configs.deployments import Deployment
from families.detection.decode import decode_images
from families.detection.limits import Limits
from families.detection.manifest import DetectionPreprocess
from families.detection.postprocess import NMSParams, decode, request_nms, runner_keep
from families.detection.preprocess import boxes_to_original, fit
from families.detection.schemas import (
    Detection,
    DetectOptions,
    DetectRequest,
    DetectResponse,
    DetectUpload,
    ImageResult,
)
from kernel.call import CallContext, bind, finish
from kernel.context import ServingContext
from kernel.request_context import StageClock
from kernel.routing.inference import run_task
from kernel.routing.rollout import ServedModel
from kernel.schemas import ModelInfo
from models.manifest import preprocess_as
from observability.metrics import ITEMS, labelled


@dataclass
class DetectionPipeline:
    """One detection deployment: its request limits and NMS defaults; preprocessing facts come from the manifest of
    the version that serves."""

    ctx: ServingContext
    deployment: Deployment
    limits: Limits

    def nms_params(self, opts: DetectOptions) -> NMSParams:
        return request_nms(self.limits, opts.conf_threshold, opts.iou_threshold, opts.max_detections, opts.class_aware)

    async def run(self, request: DetectRequest | DetectUpload, call: CallContext) -> DetectResponse:
        """Base64 images (the JSON route) or encoded bytes (uploads, typed gRPC, OIP) -> detections."""
        clock = StageClock()
        return await self.detect(decode_images(request.images, self.limits), request, clock, call)

    async def detect(self, images: list[np.ndarray], opts: DetectOptions, clock: StageClock,
                     call: CallContext) -> DetectResponse:
        ctx, dep = self.ctx, self.deployment
        ctx.protection.access.capacity(dep.name, dep.family)
        bind(call, dep.name)
        labelled(ITEMS, dep.name).observe(len(images))
        prepared: dict[ServedModel, tuple[list[np.ndarray], list]] = {}

        def items_for(model: ServedModel) -> list[np.ndarray]:
            pre = preprocess_as(model.manifest, DetectionPreprocess)
            # fitted uint8 across the hop; the runner pads and applies this version's scale and colour order
            # (preprocess.network_batch)
            tensors, metas = zip(*(fit(im, pre.imgsz) for im in images))
            prepared[model] = (list(tensors), list(metas))
            return prepared[model][0]

        params = self.nms_params(opts)
        result = await run_task(ctx, dep, items_for, opts.model, clock, call.deadline, request_id=call.request_id,
                                route_key=call.route_key, arrived=call.arrived, keep=runner_keep(params))
        labels = result.served.manifest.labels
        metas = prepared[result.served][1]
        head = preprocess_as(result.served.manifest, DetectionPreprocess).head
        out = []
        quality = ctx.quality if opts.conf_threshold is None else None  # the reference uses default thresholds
        for raw, meta, facts in zip(result.outputs, metas, result.facts or [{}] * len(metas)):
            det = decode(np.asarray(raw), head, params)
            if quality is not None:
                quality.observe(result.model, "confidence", det.scores)
                quality.observe(result.model, "boxes_per_image", [len(det.scores)])
            boxes = boxes_to_original(det.boxes, meta)
            out.append(ImageResult(width=meta.orig_w, height=meta.orig_h,
                                   candidates=facts.get("candidates", det.candidates), detections=[
                Detection(box=[round(float(v), 2) for v in b], score=round(float(s), 5), class_id=int(c),
                          label=labels[int(c)] if int(c) < len(labels) else str(int(c)))
                for b, s, c in zip(boxes, det.scores, det.classes)]))
        clock.stage("postprocess")
        return finish(dep.name, DetectResponse(
            request_id=call.request_id, deployment=dep.name, model=ModelInfo(name=result.model, version=result.version),
            degraded=result.degraded, degraded_reason=result.degraded_reason,
            timings=clock.timings(result.infer_ms), results=out), call, result.batch)

