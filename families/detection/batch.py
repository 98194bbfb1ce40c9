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

from families.detection.decode import decode_image
from families.detection.limits import Limits
from families.detection.manifest import DetectionPreprocess
from families.detection.postprocess import decode, request_nms
from families.detection.preprocess import boxes_to_original, letterbox
from kernel.batch import Option, Prepared, error_row
from kernel.errors import ApiError
from models.manifest import Manifest, preprocess_as


class Adapter:
    FAMILY = "detection"
    COMMAND = "detect"
    CHUNK_SIZE, SHARD_SIZE = 16, 256
    OPTIONS = (Option("conf_threshold", "score threshold (default: the deployment's)", float),
               Option("iou_threshold", "NMS IoU threshold (default: the deployment's)", float),
               Option("max_detections", "boxes kept per image (default: the deployment's)", int))
    SOURCE = "images"
    HEAVY_FINISH = False
    COLUMNS = {"width": "i64", "height": "i64", "candidates": "i64", "boxes": "list<list<f64>>",
               "scores": "list<f64>", "class_ids": "list<i64>", "labels": "list<str>"}

    def __init__(self, directory: Path, manifest: Manifest, limits: Limits, options: dict[str, Any]):
        self.pre = preprocess_as(manifest, DetectionPreprocess)
        self.labels = manifest.labels
        self.limits = limits
        conf, iou, most = (options.get(k) for k in ("conf_threshold", "iou_threshold", "max_detections"))
        self.params = request_nms(limits, None if conf is None else float(conf), None if iou is None else float(iou),
                                  int(most) if most else None)

    def prepare(self, records: Sequence[dict]) -> Prepared:
        out = Prepared(keys=[str(r["key"]) for r in records], states=[None] * len(records))
        lim = self.limits
        for i, record in enumerate(records):
            if record.get("read_error"):
                out.errors[i] = ("unreadable_input", str(record["read_error"]))
                continue
            try:
                image = decode_image(bytes(record["data"]), i, lim.max_image_bytes, lim.max_pixels)
            except ApiError as exc:
                out.errors[i] = (exc.code, exc.message)
                continue
            except Exception as exc:  # noqa: BLE001 - whatever else a decoder raises (a PIL plugin patched in by a
                # library of the same process) is this image's error row: one bad image never stops a job
                out.errors[i] = ("invalid_image", f"could not be decoded: {type(exc).__name__}: {exc}")
                continue
            boxed, meta = letterbox(image, self.pre.imgsz, self.pre.pad_value)
            out.items.append(boxed)
            out.owners.append(i)
            out.states[i] = meta
        return out

    def finish(self, prepared: Prepared, outputs: Sequence[np.ndarray]) -> list[dict[str, Any]]:
        rows = []
        for i, outs in enumerate(prepared.outputs_of(outputs)):
            if i in prepared.errors:
                rows.append(error_row(self.COLUMNS, *prepared.errors[i]))
                continue
            meta = prepared.states[i]
            det = decode(np.asarray(outs[0]), self.pre.head, self.params)
            boxes = boxes_to_original(det.boxes, meta)
            classes = [int(c) for c in det.classes]
            rows.append({"width": meta.orig_w, "height": meta.orig_h, "candidates": det.candidates,
                         "boxes": [[round(float(v), 2) for v in b] for b in boxes],
                         "scores": [round(float(s), 5) for s in det.scores], "class_ids": classes,
                         "labels": [self.labels[c] if c < len(self.labels) else str(c) for c in classes],
                         "error_code": None, "error": None})
        return rows
