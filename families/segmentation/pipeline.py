"""The segmentation pipeline: encoded images -> letterbox -> runner -> capped NMS -> masks of the kept instances in
original pixels (COCO RLE and/or polygons). Decoding, letterbox and NMS are detection's own functions."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from configs.deployments import Deployment
from families.detection.decode import decode_base64, decode_image
from families.detection.postprocess import NMSParams
from families.detection.preprocess import letterbox
from families.segmentation.limits import Limits
from families.segmentation.manifest import SegmentationPreprocess
from families.segmentation.postprocess import image_result
from families.segmentation.schemas import SegmentOptions, SegmentRequest, SegmentResponse, SegmentUpload
from kernel.call import CallContext, bind, finish
from kernel.context import ServingContext
from kernel.errors import ApiError
from kernel.request_context import StageClock
from kernel.routing.inference import run_task
from kernel.routing.rollout import ServedModel
from kernel.schemas import ModelInfo
from models.manifest import preprocess_as
from observability.metrics import ITEMS, labelled


def request_params(limits: Limits, opts: SegmentOptions) -> NMSParams:
    """A request's NMS settings within its deployment's limits (detection's rule, with this family's limits)."""
    cap = limits.max_detections
    return NMSParams(conf_threshold=limits.conf_threshold if opts.conf_threshold is None else opts.conf_threshold,
                     iou_threshold=limits.iou_threshold if opts.iou_threshold is None else opts.iou_threshold,
                     pre_nms_topk=limits.pre_nms_topk, max_detections=min(opts.max_detections or cap, cap),
                     class_aware=opts.class_aware)


@dataclass
class SegmentationPipeline:
    """One segmentation deployment: its request limits; letterbox and layout facts come from the served manifest."""

    ctx: ServingContext
    deployment: Deployment
    limits: Limits

    def check_count(self, n: int) -> None:
        if n > self.limits.max_images:
            raise ApiError(422, "too_many_images", f"{n} images exceed the limit of {self.limits.max_images}",
                           {"limit": self.limits.max_images, "received": n})

    def decode_all(self, request: SegmentRequest | SegmentUpload) -> list[np.ndarray]:
        """Count cap, then safe decoding with the byte and pixel caps checked from the header (before the runner)."""
        self.check_count(len(request.images))
        lim = self.limits
        raws = ([decode_base64(im.data, i, lim.max_image_bytes) for i, im in enumerate(request.images)]
                if isinstance(request, SegmentRequest) else [bytes(raw) for raw in request.images])
        return [decode_image(raw, i, lim.max_image_bytes, lim.max_pixels) for i, raw in enumerate(raws)]

    async def run(self, request: SegmentRequest | SegmentUpload, call: CallContext) -> SegmentResponse:
        clock = StageClock()
        images = self.decode_all(request)
        ctx, dep = self.ctx, self.deployment
        ctx.protection.access.capacity(dep.name, dep.family)
        bind(call, dep.name)
        labelled(ITEMS, dep.name).observe(len(images))
        prepared: dict[ServedModel, list] = {}

        def items_for(model: ServedModel) -> list[np.ndarray]:
            pre = preprocess_as(model.manifest, SegmentationPreprocess)
            boxed, metas = zip(*(letterbox(im, pre.imgsz, pre.pad_value) for im in images))
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
