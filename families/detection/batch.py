"""Offline adapter of the detection family (kernel/batch.py's contract): encoded image -> letterbox -> capped NMS ->
boxes in the image's pixels, as a row.

The same steps as /v1/detect (the family hooks in families/detection/family.py), per image: safe decoding with the
deployment's byte and pixel caps (a corrupt, empty or oversized image is an error row with the service's code), the
letterboxed uint8 image as the runner item (runtime.feeds tensorises it with the model's scale and colour order), the
deployment's default thresholds (or the job's) for NMS, boxes mapped back to original pixels.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from families.detection.limits import Limits
from families.detection.manifest import DetectionPreprocess
from families.vision.batch import ImageAdapter
from families.vision.letterbox import LetterboxMeta, boxes_to_original, letterbox
from families.vision.nms import decode, request_nms
from families.vision.schemas import box_fields
from kernel.batch import Option, Prepared
from models.manifest import Manifest, preprocess_as


class Adapter(ImageAdapter):
    FAMILY = "detection"
    COMMAND = "detect"
    CHUNK_SIZE, SHARD_SIZE = 16, 256
    OPTIONS = (Option("conf_threshold", "score threshold (default: the deployment's)", float),
               Option("iou_threshold", "NMS IoU threshold (default: the deployment's)", float),
               Option("max_detections", "boxes kept per image (default: the deployment's)", int))
    COLUMNS = {"width": "i64", "height": "i64", "candidates": "i64", "boxes": "list<list<f64>>",
               "scores": "list<f64>", "class_ids": "list<i64>", "labels": "list<str>"}

    def __init__(self, directory: Path, manifest: Manifest, limits: Limits, options: dict[str, Any]):
        self.pre = preprocess_as(manifest, DetectionPreprocess)
        self.labels = manifest.labels
        self.limits = limits
        conf, iou, most = (options.get(k) for k in ("conf_threshold", "iou_threshold", "max_detections"))
        self.params = request_nms(limits, None if conf is None else float(conf), None if iou is None else float(iou),
                                  int(most) if most else None)

    def item(self, image, index):
        return letterbox(image, self.pre.imgsz, self.pre.pad_value)

    def finish(self, prepared: Prepared, outputs: Sequence[np.ndarray]) -> list[dict[str, Any]]:
        return prepared.rows(outputs, self.COLUMNS, self._row)

    def _row(self, outs: list[np.ndarray], meta: LetterboxMeta) -> dict[str, Any]:
        det = decode(np.asarray(outs[0]), self.pre.head, self.params)
        boxes = [box_fields(b, s, c, self.labels) for b, s, c in
                 zip(boxes_to_original(det.boxes, meta), det.scores, det.classes)]
        return {"width": meta.orig_w, "height": meta.orig_h, "candidates": det.candidates,
                "boxes": [b["box"] for b in boxes], "scores": [b["score"] for b in boxes],
                "class_ids": [b["class_id"] for b in boxes], "labels": [b["label"] for b in boxes]}
