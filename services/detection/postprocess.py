"""Capped-candidate NMS for YOLO heads: the one implementation used by evaluation and serving.

Why capped: the cost of plain NMS grows with the square of the candidates, and a degenerate input (noise, an
adversarial image, a broken model) can push every anchor above the threshold. Here the work is bounded whatever the
model emits: a confidence filter, then at most `pre_nms_topk` candidates (argpartition, linear time), then greedy NMS
that stops after `max_detections` keeps, each step one vectorised IoU row.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.common.errors import InvalidOutput


@dataclass(frozen=True)
class NMSParams:
    conf_threshold: float = 0.25
    iou_threshold: float = 0.45
    pre_nms_topk: int = 1000
    max_detections: int = 100
    class_aware: bool = True


@dataclass(frozen=True)
class Detections:
    """Boxes as x1, y1, x2, y2 in the network input's pixels (map back with preprocess.boxes_to_original)."""

    boxes: np.ndarray  # [k, 4] float32
    scores: np.ndarray  # [k] float32
    classes: np.ndarray  # [k] int64
    candidates: int  # how many passed the confidence filter (before the cap)


def _iou_one_to_many(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    x1 = np.maximum(box[0], boxes[:, 0])
    y1 = np.maximum(box[1], boxes[:, 1])
    x2 = np.minimum(box[2], boxes[:, 2])
    y2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


def nms(raw: np.ndarray, params: NMSParams) -> Detections:
    """One image's head output [4 + nc, anchors] (cx, cy, w, h, class scores) -> kept detections."""
    if raw.ndim != 2 or raw.shape[0] < 5:
        raise ValueError(f"expected [4+nc, anchors], got {raw.shape}")
    scores_all = raw[4:]
    classes = scores_all.argmax(axis=0)
    scores = scores_all[classes, np.arange(raw.shape[1])]
    keep = np.flatnonzero(scores > params.conf_threshold)
    candidates = int(keep.size)
    if candidates > params.pre_nms_topk:
        top = np.argpartition(-scores[keep], params.pre_nms_topk - 1)[: params.pre_nms_topk]
        keep = keep[top]
    order = keep[np.argsort(-scores[keep], kind="stable")]
    cx, cy, w, h = raw[0, order], raw[1, order], raw[2, order], raw[3, order]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1).astype(np.float32)
    sc, cl = scores[order].astype(np.float32), classes[order].astype(np.int64)
    # Class-aware NMS: shift each class into its own region so boxes of different classes never overlap.
    offset = (cl.astype(np.float32) * (float(np.abs(boxes).max(initial=0.0)) + 1.0))[:, None] if params.class_aware else 0.0
    shifted = boxes + offset
    kept: list[int] = []
    alive = np.arange(len(order))
    while alive.size and len(kept) < params.max_detections:
        i = alive[0]
        kept.append(int(i))
        rest = alive[1:]
        if rest.size == 0:
            break
        alive = rest[_iou_one_to_many(shifted[i], shifted[rest]) <= params.iou_threshold]
    idx = np.asarray(kept, dtype=np.int64)
    return Detections(boxes[idx], sc[idx], cl[idx], candidates)


def check_head(raw: np.ndarray, num_classes: int) -> None:
    """Output sanity: the expected [4 + nc, anchors] shape, finite values, class scores within [0, 1]."""
    if raw.ndim != 2 or raw.shape[0] != 4 + num_classes:
        raise InvalidOutput(f"head shape {raw.shape} does not match {num_classes} classes")
    if not np.isfinite(raw).all():
        raise InvalidOutput("non-finite values in the detection head")
    scores = raw[4:]
    if scores.size and (scores.min() < -1e-3 or scores.max() > 1 + 1e-3):
        raise InvalidOutput("class scores outside [0, 1]")
