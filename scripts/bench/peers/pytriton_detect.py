"""Peer for scripts/bench/compare_detect.py: the detector behind NVIDIA PyTriton (Triton Inference Server + its
DynamicBatcher). The batched infer function does what triserve does for each image: base64 decode, safe image
decode, letterbox, one ONNX Runtime call for the whole batch, capped NMS, boxes mapped back to original pixels -
with the project's own functions (families/detection), the same session options and NMS defaults.

Runs in its own venv (nvidia-pytriton pins numpy<2; the project venv keeps numpy 2). On top of the text peer's recipe
(scripts/bench/peers/pytriton_text.py) it needs the image and project imports:

    .cache/bench/pytriton-venv/bin/pip install "opencv-python-headless<4.12" "numpy==1.26.4" pillow fastapi
    LD_LIBRARY_PATH=$(.cache/bench/pytriton-venv/bin/python \
                      -c "import sysconfig;print(sysconfig.get_config_var('LIBDIR'))") \
        .cache/bench/pytriton-venv/bin/python scripts/bench/peers/pytriton_detect.py --http-port 8200 --model-dir DIR

(opencv-python-headless 4.12+ requires numpy>=2.)

HTTP (KServe v2): POST /v2/models/detector/infer {"inputs": [{"name": "image", "shape": [1, 1], "datatype": "BYTES",
"data": ["<base64 JPEG>"]}]} -> outputs "count" [1, 1] int32, "boxes" [1, k, 4] float32 (x1, y1, x2, y2, original
pixels), "scores" [1, k] float32, "classes" [1, k] int32; k is the largest count in the batch, rows past "count" are
padding.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import Tensor

# run as a script from its own venv: the project's detection functions (numpy, OpenCV, Pillow; errors.py needs
# fastapi) and the peers' shared helpers are imported from the checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from scripts.bench.peers.common import serve_triton, triton_model, triton_parser
from triserve.families.vision.decode import decode_base64, decode_image
from triserve.families.vision.letterbox import boxes_to_original, preprocess_image
from triserve.families.vision.nms import NMSParams, nms

# the detection family's default limits (families/detection/limits.py), spelt out
MAX_IMAGE_BYTES, MAX_PIXELS = 10 * 2**20, 40_000_000
NMS = NMSParams(conf_threshold=0.25, iou_threshold=0.45, pre_nms_topk=1000, max_detections=100, class_aware=True)


def main() -> None:
    args = triton_parser(max_batch_size=16, max_batch_help="as triserve's detection slot").parse_args()
    manifest, session = triton_model(args)
    pre = manifest["preprocess"]
    input_name = session.get_inputs()[0].name

    @batch
    def infer(image: np.ndarray) -> dict[str, np.ndarray]:
        items = [v.decode("ascii") if isinstance(v, bytes) else str(v) for v in image.reshape(-1)]
        decoded = [decode_image(decode_base64(s, i, MAX_IMAGE_BYTES), i, MAX_IMAGE_BYTES, MAX_PIXELS)
                   for i, s in enumerate(items)]
        tensors, metas = zip(*(preprocess_image(im, pre["imgsz"], pre["pad_value"], pre["scale"], pre["color_order"])
                               for im in decoded))
        heads = session.run(None, {input_name: np.stack(tensors)})[0]
        dets = [nms(raw, NMS) for raw in heads]
        k = max(1, max(len(d.scores) for d in dets))
        n = len(dets)
        boxes = np.zeros((n, k, 4), np.float32)
        scores = np.zeros((n, k), np.float32)
        classes = np.full((n, k), -1, np.int32)
        count = np.zeros((n, 1), np.int32)
        for i, (d, meta) in enumerate(zip(dets, metas)):
            m = len(d.scores)
            count[i, 0] = m
            if m:
                boxes[i, :m] = boxes_to_original(d.boxes, meta)
                scores[i, :m] = d.scores
                classes[i, :m] = d.classes
        return {"count": count, "boxes": boxes, "scores": scores, "classes": classes}

    serve_triton(args, "detector", infer, inputs=[Tensor(name="image", dtype=bytes, shape=(1,))],
                 outputs=[Tensor(name="count", dtype=np.int32, shape=(1,)),
                          Tensor(name="boxes", dtype=np.float32, shape=(-1, 4)),
                          Tensor(name="scores", dtype=np.float32, shape=(-1,)),
                          Tensor(name="classes", dtype=np.int32, shape=(-1,))])


if __name__ == "__main__":
    main()
