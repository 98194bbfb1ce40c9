"""The batched work behind the KServe and MLServer peers, written once so both servers (each in its own venv) do
exactly what the naive FastAPI peer does per request, only on a list of items:

- text: the project's tokenizer (families/text/preprocess.TextTokenizer: truncation at the manifest's max_length,
  padding to the longest text of the call), one ONNX Runtime call, top-k labels with scores;
- detection: safe base64 + image decode, letterbox, one ONNX Runtime call for the whole batch, capped NMS with the
  detection family's default limits, boxes mapped back to original pixels (families/detection).

Imported from the peer venvs with the checkout on sys.path: numpy, tokenizers, OpenCV, Pillow, pydantic and fastapi
(kernel/errors.py) are all it needs; the session comes from scripts/bench/peers/common.py (the runner's options).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

Detection = tuple[int, list[float], float]  # (class id, [x1, y1, x2, y2] in original pixels, score)


@dataclass(frozen=True)
class TopK:
    """One text's answer: the best label and score, and the top-k (label, score) pairs."""

    label: str
    score: float
    top_k: list[tuple[str, float]]

    def as_dict(self) -> dict[str, Any]:
        """The naive peer's (and triserve's /v1/classify) result shape."""
        return {"label": self.label, "score": round(self.score, 6),
                "top_k": [{"label": lb, "score": round(s, 6)} for lb, s in self.top_k]}


class TextClassifier:
    """texts -> TopK per text, with one ONNX Runtime call for the whole list."""

    def __init__(self, model_dir: Path, manifest: dict, session: Any, top_k: int = 3):
        from triserve.families.text.preprocess import TextTokenizer

        pre = manifest["preprocess"]
        self.tokenizer = TextTokenizer(Path(model_dir) / pre["tokenizer_file"], pre["max_length"])
        self.labels: list[str] = list(manifest["labels"])
        self.session, self.k = session, top_k

    def __call__(self, texts: Sequence[str]) -> list[TopK]:
        ids, mask = self.tokenizer.encode_padded(list(texts))
        probs = self.session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        out = []
        for row in probs:
            top = np.argsort(-row, kind="stable")[: self.k]
            out.append(TopK(self.labels[top[0]], float(row[top[0]]),
                            [(self.labels[j], float(row[j])) for j in top]))
        return out


class Detector:
    """base64 images -> detections per image, with one ONNX Runtime call for the whole list."""

    def __init__(self, manifest: dict, session: Any):
        from triserve.families.detection.limits import Limits
        from triserve.families.vision.nms import NMSParams

        self.limits = Limits()  # the family's defaults (configs/serving.yaml sets the same)
        lim = self.limits
        self.params = NMSParams(lim.conf_threshold, lim.iou_threshold, lim.pre_nms_topk, lim.max_detections, True)
        self.pre = manifest["preprocess"]
        self.labels: list[str] = list(manifest["labels"])
        self.session = session
        self.input = session.get_inputs()[0].name

    def __call__(self, b64s: Sequence[str]) -> list[list[Detection]]:
        from triserve.families.vision.decode import decode_base64, decode_image
        from triserve.families.vision.letterbox import boxes_to_original, preprocess_image
        from triserve.families.vision.nms import nms

        lim, pre = self.limits, self.pre
        images = [decode_image(decode_base64(s, i, lim.max_image_bytes), i, lim.max_image_bytes, lim.max_pixels)
                  for i, s in enumerate(b64s)]
        tensors, metas = zip(*(preprocess_image(im, pre["imgsz"], pre["pad_value"], pre["scale"], pre["color_order"])
                               for im in images))
        heads = self.session.run(None, {self.input: np.stack(tensors)})[0]
        out = []
        for raw, meta in zip(heads, metas):
            det = nms(raw, self.params)
            boxes = boxes_to_original(det.boxes, meta)
            out.append([(int(c), [round(float(v), 2) for v in b], round(float(s), 5))
                        for b, s, c in zip(boxes, det.scores, det.classes)])
        return out

    def label(self, class_id: int) -> str:
        return self.labels[class_id] if 0 <= class_id < len(self.labels) else str(class_id)


def padded_detections(dets: Sequence[Sequence[Detection]]) -> dict[str, np.ndarray]:
    """Detections of n images as the fixed-shape tensors of a V2 answer (as the PyTriton peer's): "count" [n, 1]
    int32, "boxes" [n, k, 4] float32, "scores" [n, k] float32, "classes" [n, k] int32, k the largest count (at
    least 1); rows past an image's count are padding (class -1). A batching server splits these along axis 0."""
    n = len(dets)
    k = max(1, max((len(d) for d in dets), default=0))
    count = np.zeros((n, 1), np.int32)
    boxes = np.zeros((n, k, 4), np.float32)
    scores = np.zeros((n, k), np.float32)
    classes = np.full((n, k), -1, np.int32)
    for i, d in enumerate(dets):
        count[i, 0] = len(d)
        for j, (c, b, s) in enumerate(d):
            boxes[i, j], scores[i, j], classes[i, j] = b, s, c
    return {"count": count, "boxes": boxes, "scores": scores, "classes": classes}
