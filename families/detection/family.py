"""The detection family: YOLO-style heads [4 + classes, anchors] behind letterbox, capped NMS and box mapping.

Its hooks: encoded images (base64 or bytes) -> decoded within the limits -> fitted per served version (the runner
pads and tensorises) -> capped NMS on what the runner kept of each head -> boxes in the original image's pixels."""
from __future__ import annotations

import numpy as np

from families.detection.decode import decode_images
from families.detection.manifest import DetectionPreprocess
from families.detection.postprocess import NMSParams, check_head, decode, request_nms, runner_keep
from families.detection.preprocess import boxes_to_original, fit
from families.detection.schemas import (
    Detection,
    DetectOptions,
    DetectRequest,
    DetectResponse,
    DetectUpload,
    ImageResult,
)
from kernel.family import Family, RestRoute
from kernel.tensors import TensorMeta, bad_request, check_batch, check_finite
from models.manifest import preprocess_as


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


def nms_params(limits, opts: DetectOptions) -> NMSParams:
    """A request's NMS settings within its deployment's limits."""
    return request_nms(limits, opts.conf_threshold, opts.iou_threshold, opts.max_detections, opts.class_aware)


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

    def validate(self, view, request):
        return decode_images(request.images, view.limits)

    def items(self, view, work, model):
        # fitted uint8 across the hop; the runner pads and applies this version's scale and colour order
        # (preprocess.network_batch)
        tensors, metas = zip(*(fit(im, preprocess_as(model.manifest, DetectionPreprocess).imgsz) for im in work))
        return list(tensors), list(metas)

    def keep(self, view, request):
        return runner_keep(nms_params(view.limits, request))

    def respond(self, view, request, work, answers):
        [answer] = answers
        result, metas = answer.result, answer.state
        params = nms_params(view.limits, request)
        labels = result.served.manifest.labels
        head = preprocess_as(result.served.manifest, DetectionPreprocess).head
        observe = request.conf_threshold is None  # the drift reference uses the default thresholds
        out = []
        for raw, meta, facts in zip(result.outputs, metas, result.facts or [{}] * len(metas)):
            det = decode(np.asarray(raw), head, params)
            if observe:
                view.observe(result.model, "confidence", det.scores)
                view.observe(result.model, "boxes_per_image", [len(det.scores)])
            out.append(ImageResult(width=meta.orig_w, height=meta.orig_h,
                                   candidates=facts.get("candidates", det.candidates), detections=[
                Detection(box=[round(float(v), 2) for v in b], score=round(float(s), 5), class_id=int(c),
                          label=labels[int(c)] if int(c) < len(labels) else str(int(c)))
                for b, s, c in zip(boxes_to_original(det.boxes, meta), det.scores, det.classes)]))
        return {"results": out}

    def check_outputs(self, manifest, outputs):
        for raw in outputs:
            check_head(raw, len(manifest.labels), manifest.preprocess.head)

    def agreement(self, manifest, served, shadow):
        return box_agreement(served, shadow, manifest.preprocess.head)

    def tensor_items(self, view, served, arrays, batch_cap):
        spec = served.manifest.inputs[0]
        arr = arrays[spec.name]
        size = served.manifest.preprocess.imgsz
        if arr.ndim != 4 or tuple(arr.shape[1:]) != (3, size, size):
            raise bad_request("shape_mismatch", f"input {spec.name!r} must be [n, 3, {size}, {size}] (letterboxed "
                              f"RGB scaled to [0, 1]), got {list(arr.shape)}", {"expected": list(spec.shape),
                                                                                "received": list(arr.shape)})
        check_batch(arr.shape[0], min(batch_cap, view.limits.max_images), spec.name)
        check_finite(arr, spec.name)
        return [np.ascontiguousarray(x, dtype=np.float32) for x in arr]


FAMILY = DetectionFamily()
