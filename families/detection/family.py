"""The detection family: YOLO-style heads [4 + classes, anchors] behind letterbox, capped NMS and box mapping."""
from __future__ import annotations

import numpy as np

from families.detection.postprocess import NMSParams, check_head, decode
from families.detection.schemas import DetectOptions, DetectRequest, DetectResponse, DetectUpload
from kernel.family import Family, RestRoute
from kernel.tensors import TensorMeta, bad_request, check_batch, check_finite


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
    request_model = DetectUpload
    response_model = DetectResponse
    routes = (RestRoute("/v1/detect", "application/json", DetectRequest, "Detect objects in base64-encoded images"),
              RestRoute("/v1/detect/upload", "multipart/form-data", DetectOptions,
                        "Detect objects in uploaded image files (multipart/form-data, field 'images')",
                        files="images", files_description="One or more image files."))
    oip_alias = "detect"
    oip_pipeline_inputs = (TensorMeta("IMAGE", "BYTES", (-1,), field="images", binary=True),)
    oip_pipeline_outputs = (TensorMeta("DETECTIONS", "BYTES", (-1,),
                                       value=lambda r: [x.model_dump_json() for x in r.results]),)
    oip_parameters = ("conf_threshold", "iou_threshold", "max_detections", "class_aware", "model")
    grpc_method = "Detect"

    def pipeline(self, ctx, deployment):
        from families.detection.pipeline import DetectionPipeline

        return DetectionPipeline(ctx, deployment, ctx.limits(deployment))

    def check_outputs(self, manifest, outputs):
        for raw in outputs:
            check_head(raw, len(manifest.labels), manifest.preprocess.head)

    def agreement(self, manifest, served, shadow):
        return box_agreement(served, shadow, manifest.preprocess.head)

    def tensor_items(self, pipeline, served, arrays, batch_cap):
        spec = served.manifest.inputs[0]
        arr = arrays[spec.name]
        size = served.manifest.preprocess.imgsz
        if arr.ndim != 4 or tuple(arr.shape[1:]) != (3, size, size):
            raise bad_request("shape_mismatch", f"input {spec.name!r} must be [n, 3, {size}, {size}] (letterboxed "
                              f"RGB scaled to [0, 1]), got {list(arr.shape)}", {"expected": list(spec.shape),
                                                                                "received": list(arr.shape)})
        check_batch(arr.shape[0], min(batch_cap, pipeline.limits.max_images), spec.name)
        check_finite(arr, spec.name)
        return [np.ascontiguousarray(x, dtype=np.float32) for x in arr]


FAMILY = DetectionFamily()
