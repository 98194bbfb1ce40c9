"""Detection endpoints: JSON (base64) and multipart upload, letterbox -> runner -> capped NMS -> original pixels."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from fastapi import APIRouter, Depends, File, Form, UploadFile

from configs.settings import DetectionLimits
from services.common.errors import ApiError, ErrorResponse
from services.common.inference import run_task
from services.common.metrics import ITEMS, labelled
from services.common.request_context import StageClock
from services.common.rollout import ServedModel
from services.common.schemas import ModelChoice, ModelInfo
from services.detection.decode import decode_base64, decode_image
from services.detection.postprocess import NMSParams, check_head, nms
from services.detection.preprocess import boxes_to_original, letterbox
from services.detection.schemas import DetectOptions, DetectRequest, DetectResponse, Detection, ImageResult
from services.gateway_deps import CallContext, current_gateway, finish, inference_guard

router = APIRouter(prefix="/v1", tags=["detection"])
ERRORS = {code: {"model": ErrorResponse} for code in (400, 413, 415, 422, 503)}


@dataclass
class DetectionPipeline:
    """Request limits and NMS defaults; preprocessing facts come from the manifest of the version that serves."""

    limits: DetectionLimits

    def nms_params(self, opts: DetectOptions) -> NMSParams:
        cap = self.limits.max_detections
        return NMSParams(
            conf_threshold=self.limits.conf_threshold if opts.conf_threshold is None else opts.conf_threshold,
            iou_threshold=self.limits.iou_threshold if opts.iou_threshold is None else opts.iou_threshold,
            pre_nms_topk=self.limits.pre_nms_topk,
            max_detections=min(opts.max_detections or cap, cap),
            class_aware=opts.class_aware)

    def check_count(self, n: int) -> None:
        if n > self.limits.max_images:
            raise ApiError(422, "too_many_images", f"{n} images exceed the limit of {self.limits.max_images}",
                           {"limit": self.limits.max_images, "received": n})

    async def detect(self, gateway, images: list[np.ndarray], opts: DetectOptions, clock: StageClock,
                     call: CallContext) -> DetectResponse:
        labelled(ITEMS, "detection").observe(len(images))
        prepared: dict[ServedModel, tuple[list[np.ndarray], list]] = {}

        def items_for(model: ServedModel) -> list[np.ndarray]:
            pre = model.manifest.preprocess
            # uint8 across the hop; the runner applies this version's scale and colour order (network_input)
            tensors, metas = zip(*(letterbox(im, pre.imgsz, pre.pad_value) for im in images))
            prepared[model] = (list(tensors), list(metas))
            return prepared[model][0]

        def validate(model: ServedModel, outputs: list[np.ndarray]) -> None:
            for raw in outputs:
                check_head(raw, len(model.manifest.labels))

        result = await run_task(gateway, "detection", items_for, opts.model, clock, call.deadline, validate,
                                request_id=call.request_id, route_key=call.route_key, arrived=call.arrived)
        params = self.nms_params(opts)
        labels = result.served.manifest.labels
        metas = prepared[result.served][1]
        out = []
        observe = opts.conf_threshold is None and gateway.quality is not None  # reference uses default thresholds
        for raw, meta in zip(result.outputs, metas):
            det = nms(np.asarray(raw), params)
            if observe:
                gateway.quality.observe(result.model, "confidence", det.scores)
                gateway.quality.observe(result.model, "boxes_per_image", [len(det.scores)])
            boxes = boxes_to_original(det.boxes, meta)
            out.append(ImageResult(width=meta.orig_w, height=meta.orig_h, candidates=det.candidates, detections=[
                Detection(box=[round(float(v), 2) for v in b], score=round(float(s), 5), class_id=int(c),
                          label=labels[int(c)] if int(c) < len(labels) else str(int(c)))
                for b, s, c in zip(boxes, det.scores, det.classes)]))
        clock.stage("postprocess")
        return finish("detection", DetectResponse(
            request_id=call.request_id, model=ModelInfo(name=result.model, version=result.version),
            degraded=result.degraded, degraded_reason=result.degraded_reason,
            timings=clock.timings(result.infer_ms), results=out), call, result.batch)


@router.post("/detect", response_model=DetectResponse, responses=ERRORS,
             summary="Detect objects in base64-encoded images")
async def detect_json(body: DetectRequest, call: CallContext = Depends(inference_guard("detection"))) -> DetectResponse:
    clock = StageClock()
    gateway = current_gateway()
    pipeline: DetectionPipeline = gateway.pipeline("detection")
    pipeline.check_count(len(body.images))
    lim = pipeline.limits
    images = [decode_image(decode_base64(im.data, i, lim.max_image_bytes), i, lim.max_image_bytes, lim.max_pixels)
              for i, im in enumerate(body.images)]
    return await pipeline.detect(gateway, images, body, clock, call)


@router.post("/detect/upload", response_model=DetectResponse, responses=ERRORS,
             summary="Detect objects in uploaded image files (multipart/form-data, field 'images')")
async def detect_upload(images: list[UploadFile] = File(description="One or more image files."),
                        conf_threshold: float | None = Form(None, ge=0.0, le=1.0),
                        iou_threshold: float | None = Form(None, ge=0.0, le=1.0),
                        max_detections: int | None = Form(None, ge=1),
                        class_aware: bool = Form(True),
                        model: ModelChoice = Form("auto"),
                        call: CallContext = Depends(inference_guard("detection"))) -> DetectResponse:
    clock = StageClock()
    gateway = current_gateway()
    pipeline: DetectionPipeline = gateway.pipeline("detection")
    pipeline.check_count(len(images))
    lim = pipeline.limits
    decoded = []
    for i, upload in enumerate(images):
        raw = await upload.read(lim.max_image_bytes + 1)
        decoded.append(decode_image(raw, i, lim.max_image_bytes, lim.max_pixels))
    opts = DetectOptions(conf_threshold=conf_threshold, iou_threshold=iou_threshold, max_detections=max_detections,
                         class_aware=class_aware, model=model)
    return await pipeline.detect(gateway, decoded, opts, clock, call)
