"""Peer for scripts/bench/compare_detect.py: the naive way to serve the detector - FastAPI, one ONNX Runtime call per
request, no batching, no runner hop. Same model file, same session options and the same pipeline functions as
triserve (families/detection: safe decode, letterbox, capped NMS, boxes mapped back to original pixels), the same
request body (DetectRequest: base64 images) and the same response shape as triserve's POST /v1/detect.

    uvicorn scripts.bench.peers.naive_fastapi_detect:app --host 127.0.0.1 --port 8100

Model: TRISERVE_BENCH_MODEL_DIR (an artifact directory with manifest.json and model.onnx), default
models/store/<the default detection deployment's model> at alias stable (yolov8n-coco today). ONNX Runtime
intra-op threads: TRISERVE_BENCH_INTRA_OP (default 0)
(scripts/bench/peers/common.py naive_model).
"""
from __future__ import annotations

import numpy as np
from fastapi.responses import JSONResponse

from scripts.bench.peers.common import naive_app, naive_model
from scripts.common import default_model
from triserve.families.detection.limits import Limits
from triserve.families.detection.schemas import DetectRequest
from triserve.families.vision.decode import decode_base64, decode_image
from triserve.families.vision.letterbox import boxes_to_original, preprocess_image
from triserve.families.vision.nms import NMSParams, nms
from triserve.kernel.errors import ApiError

MODEL_DIR, MANIFEST, SESSION = naive_model(default_model("detection"))
PRE = MANIFEST["preprocess"]
LABELS = MANIFEST["labels"]
LIMITS = Limits()  # the detection family's defaults (configs/serving.yaml sets the same)
INPUT = SESSION.get_inputs()[0].name

app = naive_app("naive detector")


@app.exception_handler(ApiError)
def _api_error(_request, exc: ApiError) -> JSONResponse:
    return JSONResponse({"error": {"code": exc.code, "message": exc.message}}, status_code=exc.status)


def nms_params(body: DetectRequest) -> NMSParams:
    cap = LIMITS.max_detections
    return NMSParams(conf_threshold=LIMITS.conf_threshold if body.conf_threshold is None else body.conf_threshold,
                     iou_threshold=LIMITS.iou_threshold if body.iou_threshold is None else body.iou_threshold,
                     pre_nms_topk=LIMITS.pre_nms_topk, max_detections=min(body.max_detections or cap, cap),
                     class_aware=body.class_aware)


@app.post("/v1/detect")
def detect(body: DetectRequest) -> dict:  # a plain def: FastAPI runs it on its thread pool, as most apps do
    images = [decode_image(decode_base64(im.data, i, LIMITS.max_image_bytes), i, LIMITS.max_image_bytes,
                           LIMITS.max_pixels) for i, im in enumerate(body.images)]
    tensors, metas = zip(*(preprocess_image(im, PRE["imgsz"], PRE["pad_value"], PRE["scale"], PRE["color_order"])
                           for im in images))
    heads = SESSION.run(None, {INPUT: np.stack(tensors)})[0]
    params = nms_params(body)
    results = []
    for raw, meta in zip(heads, metas):
        det = nms(raw, params)
        boxes = boxes_to_original(det.boxes, meta)
        results.append({"width": meta.orig_w, "height": meta.orig_h, "candidates": det.candidates, "detections": [
            {"box": [round(float(v), 2) for v in b], "score": round(float(s), 5), "class_id": int(c),
             "label": LABELS[int(c)] if int(c) < len(LABELS) else str(int(c))}
            for b, s, c in zip(boxes, det.scores, det.classes)]})
    return {"results": results}
