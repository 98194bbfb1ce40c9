"""Capped-candidate NMS for YOLO heads: the one implementation used by evaluation and serving.

Why capped: the cost of plain NMS grows with the square of the candidates, and a degenerate input (noise, an
adversarial image, a broken model) can push every anchor above the threshold. Here the work is bounded whatever the
model emits: a confidence filter, then at most `pre_nms_topk` candidates (argpartition, linear time), then greedy NMS
that stops after `max_detections` keeps, each step one vectorised IoU row.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from triserve.kernel.errors import InvalidOutput


@dataclass(frozen=True)
class NMSParams:
    conf_threshold: float = 0.25
    iou_threshold: float = 0.45
    pre_nms_topk: int = 1000
    max_detections: int = 100
    class_aware: bool = True


class NMSLimits(Protocol):
    """The limits NMS reads (triserve.families.vision.limits.BoxLimits: every box family's limits extend it)."""

    conf_threshold: float
    iou_threshold: float
    pre_nms_topk: int
    max_detections: int


def request_nms(limits: NMSLimits, conf_threshold: float | None = None, iou_threshold: float | None = None,
                max_detections: int | None = None, class_aware: bool = True) -> NMSParams:
    """A request's (or a batch job's) NMS settings within its deployment's limits: unset thresholds take the limits'
    defaults, the detections are capped by limits.max_detections."""
    cap = limits.max_detections
    return NMSParams(conf_threshold=limits.conf_threshold if conf_threshold is None else conf_threshold,
                     iou_threshold=limits.iou_threshold if iou_threshold is None else iou_threshold,
                     pre_nms_topk=limits.pre_nms_topk, max_detections=min(max_detections or cap, cap),
                     class_aware=class_aware)


@dataclass(frozen=True)
class Detections:
    """Boxes as x1, y1, x2, y2 in the network input's pixels (map back with preprocess.boxes_to_original)."""

    boxes: np.ndarray  # [k, 4] float32
    scores: np.ndarray  # [k] float32
    classes: np.ndarray  # [k] int64
    candidates: int  # how many passed the confidence filter (before the cap)
    # the anchor (column) of each kept box in the head output: where a head's extra channels for that box are
    # (keypoints of a pose head); empty for end-to-end heads
    anchors: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


_BLOCK = 64


def _iou(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of boxes a (rows) against boxes b (columns); c is [4, n] x1, y1, x2, y2."""
    w = np.minimum(c[2, a][:, None], c[2, b]) - np.maximum(c[0, a][:, None], c[0, b])
    h = np.minimum(c[3, a][:, None], c[3, b]) - np.maximum(c[1, a][:, None], c[1, b])
    inter = np.clip(w, 0, None) * np.clip(h, 0, None)
    area = (c[2] - c[0]) * (c[3] - c[1])
    return inter / np.maximum(area[a][:, None] + area[b] - inter, 1e-9)


def _greedy(coords: np.ndarray, iou_threshold: float, max_keep: int) -> list[int]:
    """Exact greedy NMS over score-sorted boxes, a block at a time: the next _BLOCK survivors are resolved against
    each other with one small IoU matrix, then the block's keeps suppress everything after it in one matrix op.
    A few numpy calls per block instead of per kept box, so the worst case (every box kept) stays cheap."""
    kept: list[int] = []
    alive = np.arange(coords.shape[1])
    while alive.size and len(kept) < max_keep:
        head, rest = alive[:_BLOCK], alive[_BLOCK:]
        overlaps = _iou(coords, head, head) > iou_threshold
        suppressed = np.zeros(head.size, dtype=bool)
        block: list[int] = []
        for j in range(head.size):
            if suppressed[j]:
                continue
            block.append(j)
            if len(kept) + len(block) == max_keep:
                break
            suppressed |= overlaps[j]
        keep = head[block]
        kept.extend(int(i) for i in keep)
        if rest.size and len(kept) < max_keep:
            rest = rest[~(_iou(coords, keep, rest) > iou_threshold).any(axis=0)]
        alive = rest
    return kept


def top_candidates(best: np.ndarray, conf_threshold: float, topk: int) -> np.ndarray:
    """Anchors whose best class score passes the threshold, at most `topk` of the highest (argpartition, linear
    time), in anchor order: equal scores then rank by anchor whichever array they are picked from (the head here or
    its columns prefiltered by the runner, `prefilter`)."""
    keep = np.flatnonzero(best > conf_threshold)
    if keep.size > topk:
        keep = np.sort(keep[np.argpartition(-best[keep], topk - 1)[:topk]])
    return keep


def prefilter(raw: np.ndarray, num_classes: int, conf_threshold: float, count_above: float,
              topk: int) -> tuple[np.ndarray, int] | None:
    """What the runner sends back of an anchor head instead of all of it (YOLOv8n at 640: 84 x 8400 floats, 2.8 MB
    per image): the columns of the anchors capped NMS can keep at `conf_threshold` (top_candidates, in anchor order,
    every row: boxes, class scores and any extra channels such as keypoints) and how many anchors pass
    `count_above` (the request's own threshold, >= conf_threshold: what a response reports as candidates). NMS of
    these columns at any threshold >= conf_threshold with the same topk keeps what NMS of the whole head keeps.
    None when the head is not fit to be cut (wrong shape, non-finite values or class scores outside [0, 1]): the
    whole head then goes back, for the gateway's output check to refuse."""
    if raw.ndim != 2 or raw.shape[0] < 4 + num_classes or num_classes < 1:
        return None
    scores = raw[4:4 + num_classes]
    best = scores.max(axis=0)
    if not np.isfinite(raw).all():
        return None
    if best.size and (scores.min() < -1e-3 or best.max() > 1 + 1e-3):
        return None
    keep = top_candidates(best, conf_threshold, topk)
    return np.ascontiguousarray(raw[:, keep]), int(np.count_nonzero(best > count_above))


def nms(raw: np.ndarray, params: NMSParams) -> Detections:
    """One image's head output [4 + nc, anchors] (cx, cy, w, h, class scores) -> kept detections.

    Cost is bounded by the caps, not by the anchors: one max pass over the scores, then every later step works on at
    most `pre_nms_topk` columns, and greedy suppression works in blocks (see _greedy)."""
    if raw.ndim != 2 or raw.shape[0] < 5:
        raise ValueError(f"expected [4+nc, anchors], got {raw.shape}")
    best = raw[4:].max(axis=0)
    keep = top_candidates(best, params.conf_threshold, params.pre_nms_topk)
    candidates = int(np.count_nonzero(best > params.conf_threshold))
    order = keep[np.argsort(-best[keep], kind="stable")]
    cols = raw[:, order]  # [4 + nc, k]: the only copy, at most pre_nms_topk wide
    cl = cols[4:].argmax(axis=0).astype(np.int64)
    sc = best[order].astype(np.float32)
    cx, cy, w, h = (cols[i].astype(np.float32) for i in range(4))
    x1, y1, x2, y2 = cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2
    boxes = np.stack([x1, y1, x2, y2], axis=1)
    if params.class_aware and cl.size:
        # Class-aware NMS: shift each class into its own region so boxes of different classes never overlap.
        shift = cl.astype(np.float32) * (float(np.abs(boxes).max()) + 1.0)
        x1, y1, x2, y2 = x1 + shift, y1 + shift, x2 + shift, y2 + shift
    kept = _greedy(np.stack([x1, y1, x2, y2]), params.iou_threshold, params.max_detections)
    idx = np.asarray(kept, dtype=np.int64)
    return Detections(boxes[idx], sc[idx], cl[idx], candidates, order[idx].astype(np.int64))


def end2end(raw: np.ndarray, params: NMSParams) -> Detections:
    """One image's NMS-free head output [max_det, 6] (x1, y1, x2, y2, score, class; YOLOv10/YOLO26): the model has
    already picked one box per object, so only the confidence filter and the detection cap apply."""
    if raw.ndim != 2 or raw.shape[1] != 6:
        raise ValueError(f"expected [max_det, 6], got {raw.shape}")
    keep = np.flatnonzero(raw[:, 4] > params.conf_threshold)
    candidates = int(keep.size)
    keep = keep[np.argsort(-raw[keep, 4], kind="stable")][: params.max_detections]
    rows = raw[keep]
    return Detections(rows[:, :4].astype(np.float32), rows[:, 4].astype(np.float32),
                      np.rint(rows[:, 5]).astype(np.int64), candidates)


def runner_keep(params: NMSParams) -> dict:
    """How a request's NMS will read an anchor head, for the runner to send back only that (runtime.compact): the
    columns NMS can keep at the lower of the request's threshold and the default one (a shadow version's agreement
    is judged at the default: box_agreement), at least the default's candidate cap, and the count above the
    request's own threshold."""
    default = NMSParams()
    return {"conf": min(params.conf_threshold, default.conf_threshold), "count_above": params.conf_threshold,
            "topk": max(params.pre_nms_topk, default.pre_nms_topk)}


def decode(raw: np.ndarray, head: str, params: NMSParams) -> Detections:
    """The head's output -> kept detections: capped NMS for anchor heads, a filter for end-to-end heads."""
    return end2end(raw, params) if head == "end2end" else nms(raw, params)


def check_head(raw: np.ndarray, num_classes: int, head: str = "anchors") -> None:
    """Output sanity: the expected shape for the head format, finite values, scores within [0, 1] (and, end to end,
    class ids of the label set)."""
    if head == "end2end":
        if raw.ndim != 2 or raw.shape[1] != 6:
            raise InvalidOutput(f"end-to-end head shape {raw.shape} is not [max_det, 6]")
        if not np.isfinite(raw).all():
            raise InvalidOutput("non-finite values in the detection head")
        scores, classes = raw[:, 4], raw[:, 5]
        if scores.size and (scores.min() < -1e-3 or scores.max() > 1 + 1e-3):
            raise InvalidOutput("scores outside [0, 1]")
        if classes.size and (classes.min() < 0 or classes.max() > num_classes - 1 + 1e-3):
            raise InvalidOutput(f"class ids outside [0, {num_classes})")
        return
    if raw.ndim != 2 or raw.shape[0] != 4 + num_classes:
        raise InvalidOutput(f"head shape {raw.shape} does not match {num_classes} classes")
    if not np.isfinite(raw).all():
        raise InvalidOutput("non-finite values in the detection head")
    scores = raw[4:]
    if scores.size and (scores.min() < -1e-3 or scores.max() > 1 + 1e-3):
        raise InvalidOutput("class scores outside [0, 1]")


def _pair_iou(a: np.ndarray, b: np.ndarray) -> float:
    x1, y1, x2, y2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def box_agreement(a: Detections, b: Detections, iou: float = 0.5) -> float:
    """How far a shadow version's boxes agree with the served one's (both kept at the default NMS settings): the share
    of boxes matched by class with IoU >= `iou`, over the larger of the two counts (1 when both found nothing)."""
    if len(a.scores) == 0 and len(b.scores) == 0:
        return 1.0
    matched, used = 0, set()
    for box, cls in zip(a.boxes, a.classes):
        for j, (other, ocls) in enumerate(zip(b.boxes, b.classes)):
            if j not in used and ocls == cls and _pair_iou(box, other) >= iou:
                matched += 1
                used.add(j)
                break
    return matched / max(len(a.scores), len(b.scores))
