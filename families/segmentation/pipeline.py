"""The segmentation pipeline: encoded images -> letterbox -> runner -> capped NMS -> masks of the kept instances in
original pixels (COCO RLE and/or polygons). Decoding, letterbox and NMS are detection's own functions."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from configs.deployments import Deployment
from families.detection.decode import decode_images
from families.detection.postprocess import NMSParams, request_nms
from families.detection.preprocess import fit
from families.segmentation.limits import Limits
from families.segmentation.manifest import SegmentationPreprocess
from families.segmentation.postprocess import image_result
from families.segmentation.schemas import SegmentOptions, SegmentRequest, SegmentResponse, SegmentUpload
from kernel.call import CallContext, bind, finish
from kernel.context import ServingContext
from kernel.request_context import StageClock
from kernel.routing.inference import run_task
from kernel.routing.rollout import ServedModel
from kernel.schemas import ModelInfo
from models.manifest import preprocess_as
from observability.metrics import ITEMS, labelled


def request_params(limits: Limits, opts: SegmentOptions) -> NMSParams:
    """A request's NMS settings within its deployment's limits (detection's rule, with this family's limits)."""
    return request_nms(limits, opts.conf_threshold, opts.iou_threshold, opts.max_detections, opts.class_aware)


@dataclass
class SegmentationPipeline:
    """One segmentation deployment: its request limits; letterbox and layout facts come from the served manifest."""

    ctx: ServingContext
    deployment: Deployment
    limits: Limits

    async def run(self, request: SegmentRequest | SegmentUpload, call: CallContext) -> SegmentResponse:
        clock = StageClock()
        images = decode_images(request.images, self.limits)  # every cap, before the runner
        ctx, dep = self.ctx, self.deployment
        ctx.protection.access.capacity(dep.name, dep.family)
        bind(call, dep.name)
        labelled(ITEMS, dep.name).observe(len(images))
        prepared: dict[ServedModel, list] = {}

        def items_for(model: ServedModel) -> list[np.ndarray]:
            pre = preprocess_as(model.manifest, SegmentationPreprocess)
            boxed, metas = zip(*(fit(im, pre.imgsz) for im in images))
            prepared[model] = list(metas)
            return list(boxed)

        result = await run_task(ctx, dep, items_for, request.model, clock, call.deadline, request_id=call.request_id,
                                route_key=call.route_key, arrived=call.arrived)
        params = request_params(self.limits, request)
        fmt = request.mask_format or self.limits.mask_format
        manifest = result.served.manifest
        pre = preprocess_as(manifest, SegmentationPreprocess)
        out = [image_result(np.asarray(raw), meta, pre, manifest.labels, params, fmt, self.limits.max_polygon_points,
                            self.limits.max_mask_runs, self.limits.max_mask_samples)
               for raw, meta in zip(result.outputs, prepared[result.served])]
        clock.stage("postprocess")
        return finish(dep.name, SegmentResponse(
            request_id=call.request_id, deployment=dep.name, model=ModelInfo(name=result.model, version=result.version),
            degraded=result.degraded, degraded_reason=result.degraded_reason,
            timings=clock.timings(result.infer_ms), results=out), call, result.batch)
