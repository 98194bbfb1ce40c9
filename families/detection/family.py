"""The detection family: YOLO-style heads [4 + classes, anchors] behind letterbox, capped NMS and box mapping."""
from __future__ import annotations

from typing import Any

import numpy as np

from families.detection.postprocess import NMSParams, check_head, decode
from families.detection.schemas import DetectOptions
from kernel.family import Family, RestRoute, TensorMeta


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    x1, y1, x2, y2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def box_agreement(served: np.ndarray, shadow: np.ndarray, head: str = "anchors", iou: float = 0.5) -> float:
    """Share of boxes (after default NMS) matched by class with IoU >= `iou`, over the larger of the two counts."""
    a, b = decode(served, head, NMSParams()), decode(shadow, head, NMSParams())
    if len(a.scores) == 0 and len(b.scores) == 0:
        return 1.0
    matched, used = 0, set()
    for box, cls in zip(a.boxes, a.classes):
        for j, (other, ocls) in enumerate(zip(b.boxes, b.classes)):
            if j not in used and ocls == cls and _iou(box, other) >= iou:
                matched += 1
                used.add(j)
                break
    return matched / max(len(a.scores), len(b.scores))


class DetectionFamily(Family):
    name = "detection"
    routes = (RestRoute("/v1/detect", "application/json"), RestRoute("/v1/detect/upload", "multipart/form-data"))
    oip_alias = "detect"
    oip_pipeline_inputs = (TensorMeta("IMAGE", "BYTES", (-1,)),)
    oip_pipeline_outputs = (TensorMeta("DETECTIONS", "BYTES", (-1,)),)
    grpc_method = "Detect"
    importers = ("detection-pt", "detection-onnx", "coco-default")

    @property
    def router(self):
        from families.detection.service import router

        return router

    def pipeline(self, ctx, deployment):
        from families.detection.service import DetectionPipeline

        return DetectionPipeline(ctx, deployment, ctx.limits(deployment))

    def check_outputs(self, manifest, outputs):
        for raw in outputs:
            check_head(raw, len(manifest.labels), manifest.preprocess.head)

    def agreement(self, manifest, served, shadow):
        return box_agreement(served, shadow, manifest.preprocess.head)

    def oip_tensor_items(self, ctx, deployment, served, tensors, batch_cap):
        manifest = served.manifest
        from services.protocols.oip import bad_request, check_batch, check_finite

        spec = manifest.inputs[0]
        arr = tensors[spec.name].data
        size = manifest.preprocess.imgsz
        if arr.ndim != 4 or tuple(arr.shape[1:]) != (3, size, size):
            raise bad_request("shape_mismatch", f"input {spec.name!r} must be [n, 3, {size}, {size}] (letterboxed "
                              f"RGB scaled to [0, 1]), got {list(arr.shape)}", {"expected": list(spec.shape),
                                                                                "received": list(arr.shape)})
        check_batch(arr.shape[0], min(batch_cap, ctx.limits(deployment).max_images), spec.name)
        check_finite(arr, spec.name)
        return [np.ascontiguousarray(x, dtype=np.float32) for x in arr]

    async def oip_infer(self, ctx, deployment, inputs, parameters, call):
        from kernel.request_context import StageClock
        from services.protocols.oip import bytes_tensor, pick_params

        opts = DetectOptions(deployment=deployment.name,
                             **pick_params(parameters, ("conf_threshold", "iou_threshold", "max_detections",
                                                        "class_aware", "model")))
        resp = await self.detect_encoded(ctx, deployment, list(inputs["IMAGE"].data.reshape(-1)), opts, call,
                                         StageClock())
        return [bytes_tensor("DETECTIONS", [r.model_dump_json() for r in resp.results])], resp

    async def detect_encoded(self, ctx, deployment, raws: list[bytes], opts: DetectOptions, call, clock):
        """Encoded images -> the deployment's pipeline, exactly as /v1/detect/upload does it."""
        from kernel.errors import ApiError

        if not raws:
            raise ApiError(422, "validation_error", "request does not match the schema",
                           [{"loc": ["images"], "msg": "at least one image is required", "type": "too_short"}])
        pipeline = ctx.pipeline(deployment)
        return await pipeline.detect(pipeline.decode_all(raws), opts, clock, call)

    def grpc_request(self, message: Any) -> tuple[list[bytes], DetectOptions]:
        from services.protocols.grpc_typed import model_choice, set_fields

        opts = DetectOptions(model=model_choice(message.model),
                             **set_fields(message, ("conf_threshold", "iou_threshold", "max_detections",
                                                    "class_aware", "deployment")))
        return list(message.images), opts

    async def handle(self, ctx, request, call):
        from kernel.request_context import StageClock

        raws, opts = request
        deployment = await ctx.resolve(self.name, opts.deployment)
        return await self.detect_encoded(ctx, deployment, raws, opts, call, StageClock())


FAMILY = DetectionFamily()
