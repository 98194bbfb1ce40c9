"""Compare two detectors' boxes photo by photo: which boxes they share, how well they overlap, what got lost.

Agreement between a reference detector (FP32, or ultralytics itself) and a candidate (INT8, or triserve): boxes are
matched greedily in the reference's score order, same class only, to the unclaimed candidate box of highest IoU, if
that IoU reaches `min_iou`. Reported: matched boxes, share = 2 x matched / (reference boxes + candidate boxes)
(1.0 when both found nothing; it falls for a box lost AND for a box invented), recall and precision, mean IoU of the
matches, and the recall of the reference's confident boxes (score >= 0.5), which must survive any cheaper variant.

numpy only: the boxes come from anywhere (the detection family's serving path, ultralytics' predictor, a drill).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Dets:
    """One image's detections in original-image pixels."""

    boxes: np.ndarray  # [k, 4] float64 x1 y1 x2 y2
    scores: np.ndarray  # [k] float32
    classes: np.ndarray  # [k] int64

    def __len__(self) -> int:
        return int(len(self.scores))

    def summary(self, labels: Sequence[str] | None = None) -> list[str]:
        return [f"{labels[c] if labels and c < len(labels) else c} {s:.2f}" for c, s in zip(self.classes, self.scores)]


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[M, 4] x [N, 4] xyxy -> [M, N] IoU. Two boxes without area (a box clipped to a line on the image border, as
    both ultralytics and triserve clip) have no IoU: they count as the same box (1.0) when their corners agree
    within 1e-3 px, else 0."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    tl = np.maximum(a[:, None, :2], b[None, :, :2])
    br = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(br - tl, 0, None).prod(-1)
    area_a = (a[:, 2:] - a[:, :2]).clip(0).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).clip(0).prod(-1)
    union = area_a[:, None] + area_b[None, :] - inter
    iou = inter / np.maximum(union, 1e-9)
    flat = union <= 1e-9
    if flat.any():
        same = np.abs(a[:, None, :] - b[None, :, :]).max(-1) <= 1e-3
        iou = np.where(flat, same.astype(np.float64), iou)
    return iou


def match(ref: Dets, cand: Dets, min_iou: float) -> list[tuple[int, int, float]]:
    """(reference index, candidate index, IoU) pairs; see the module docstring."""
    if not len(ref) or not len(cand):
        return []
    iou = box_iou(ref.boxes, cand.boxes) * (ref.classes[:, None] == cand.classes[None, :])
    claimed = np.zeros(len(cand), bool)
    pairs = []
    for i in np.argsort(-ref.scores, kind="stable"):
        row = np.where(claimed, -1.0, iou[i])
        j = int(row.argmax())
        if row[j] >= min_iou:
            claimed[j] = True
            pairs.append((int(i), j, float(row[j])))
    return pairs


@dataclass
class Agreement:
    reference_boxes: int = 0
    candidate_boxes: int = 0
    matched: int = 0
    iou_sum: float = 0.0
    confident_reference: int = 0
    confident_matched: int = 0
    max_score_diff: float = 0.0
    per_image: list[dict] = field(default_factory=list)

    @property
    def share(self) -> float:
        total = self.reference_boxes + self.candidate_boxes
        return 1.0 if total == 0 else 2.0 * self.matched / total

    @property
    def recall(self) -> float:
        return 1.0 if self.reference_boxes == 0 else self.matched / self.reference_boxes

    @property
    def precision(self) -> float:
        return 1.0 if self.candidate_boxes == 0 else self.matched / self.candidate_boxes

    @property
    def mean_iou(self) -> float:
        return 1.0 if self.matched == 0 else self.iou_sum / self.matched

    @property
    def confident_recall(self) -> float:
        return 1.0 if self.confident_reference == 0 else self.confident_matched / self.confident_reference

    @property
    def complete(self) -> bool:
        """Every box on both sides found its partner."""
        return self.matched == self.reference_boxes == self.candidate_boxes

    def metrics(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_share": self.share, f"{prefix}_mean_iou": self.mean_iou, f"{prefix}_recall": self.recall,
                f"{prefix}_precision": self.precision, f"{prefix}_confident_recall": self.confident_recall,
                f"{prefix}_reference_boxes": float(self.reference_boxes),
                f"{prefix}_candidate_boxes": float(self.candidate_boxes), f"{prefix}_matched": float(self.matched)}


def agreement(reference: Sequence[Dets], candidate: Sequence[Dets], names: Sequence[str] | None = None,
              min_iou: float = 0.5, confident: float = 0.5) -> Agreement:
    """Compare two detectors' outputs on the same photos (same order)."""
    out = Agreement()
    for k, (ref, cand) in enumerate(zip(reference, candidate, strict=True)):
        pairs = match(ref, cand, min_iou)
        conf_idx = {i for i in range(len(ref)) if ref.scores[i] >= confident}
        score_diffs = [abs(float(ref.scores[i]) - float(cand.scores[j])) for i, j, _ in pairs]
        out.reference_boxes += len(ref)
        out.candidate_boxes += len(cand)
        out.matched += len(pairs)
        out.iou_sum += sum(p[2] for p in pairs)
        out.confident_reference += len(conf_idx)
        out.confident_matched += sum(1 for i, _, _ in pairs if i in conf_idx)
        out.max_score_diff = max([out.max_score_diff, *score_diffs])
        out.per_image.append({
            "image": names[k] if names else str(k), "reference": len(ref), "candidate": len(cand),
            "matched": len(pairs), "min_iou": min((p[2] for p in pairs), default=1.0),
            "max_score_diff": max(score_diffs, default=0.0)})
    return out
