"""NMS-free end-to-end detection heads ([b, max_det, 6]: x1, y1, x2, y2, score, class): recognising and comparing them.

Why a comparison of its own: an end-to-end head ends in a top-k (ultralytics' Detect.postprocess: TopK over the best
class score per anchor, then TopK over the kept (anchor, class) pairs). Two faithful runtimes (torch and ONNX Runtime,
or one graph at batch 4 and at batch 1) compute the scores in different orders, so rows whose scores tie within float
noise may come out in another order, and rows at the k-th score may swap in or out of the set. An element-wise diff
of the two [max_det, 6] arrays would call that a failure; a diff after sorting by score would pair the wrong boxes.

compare_rows therefore measures two things, both order-insensitive:
  scores  the two score columns, each sorted in descending order, max abs diff (a top-k set that swaps a row at the
          boundary moves this by at most the boundary scores' own difference)
  boxes   every row of the reference whose score is clearly above the k-th score (by more than 4 x the measured
          score noise, at least 1e-6, at most 2 x the tolerance: it must be in both top-k sets) is paired with an
          unclaimed row of the other output of the same class and a score within the tolerance, the one with the
          nearest box; the max abs coordinate diff of those pairs (pixels). A row without such a partner (another
          class, a lost box) makes it NO_RESULT (1e30).
"""
from __future__ import annotations

import numpy as np

NO_RESULT = 1e30  # as batching.NO_RESULT: finite, so manifests stay strict JSON
COLUMNS = 6  # x1, y1, x2, y2, score, class


def is_end2end_shape(shape, nc: int) -> bool:
    """[b, k, 6] with k != 4 + nc: an end-to-end head (an anchors head is [b, 4 + nc, anchors]). With nc == 2 both
    read [b, 6, n]: only [b, k, 6] with k != 6 is taken as end-to-end here (metadata decides the rest)."""
    return len(shape) == 3 and shape[2] == COLUMNS and shape[1] != 4 + nc


def compare_rows(ref: np.ndarray, got: np.ndarray, score_tol: float) -> dict[str, float]:
    """One image's end-to-end output `got` [k, 6] against a reference [k, 6]: {'boxes': px, 'scores': abs,
    'paired': rows whose boxes were compared}."""
    ref = np.asarray(ref, np.float64)
    got = np.asarray(got, np.float64)
    if ref.shape != got.shape or ref.ndim != 2 or ref.shape[1] < COLUMNS:
        return {"boxes": NO_RESULT, "scores": NO_RESULT, "paired": 0}
    if not (np.isfinite(ref).all() and np.isfinite(got).all()):
        return {"boxes": NO_RESULT, "scores": NO_RESULT, "paired": 0}
    if ref.shape[0] == 0:
        return {"boxes": 0.0, "scores": 0.0, "paired": 0}
    sr = np.sort(ref[:, 4])[::-1]
    sg = np.sort(got[:, 4])[::-1]
    scores = float(np.abs(sr - sg).max())
    # rows at or near the k-th score may be in one top-k set and not the other: the margin is the score noise
    # actually measured (sorted columns), not the tolerance, so that near-flat score columns (an untrained head) still
    # leave rows to pair; at most 2 x the tolerance
    margin = min(2 * score_tol, max(4 * scores, 1e-6))
    floor = sr[-1] + margin
    claimed = np.zeros(len(got), bool)
    worst, paired = 0.0, 0
    for i in np.argsort(-ref[:, 4], kind="stable"):
        if ref[i, 4] <= floor:
            break
        ok = (~claimed) & (got[:, 5] == ref[i, 5]) & (np.abs(got[:, 4] - ref[i, 4]) <= score_tol)
        if not ok.any():
            return {"boxes": NO_RESULT, "scores": scores, "paired": paired}
        d = np.where(ok, np.abs(got[:, :4] - ref[i, :4]).max(axis=1), np.inf)
        j = int(d.argmin())
        claimed[j] = True
        paired += 1
        worst = max(worst, float(d[j]))
    return {"boxes": worst, "scores": scores, "paired": paired}


def compare_batch(ref: np.ndarray, got: np.ndarray, score_tol: float) -> dict[str, float]:
    """[b, k, 6] vs [b, k, 6], image by image: the worst of each part over the batch ('paired': rows compared)."""
    if np.shape(ref) != np.shape(got) or np.ndim(ref) != 3:
        return {"boxes": NO_RESULT, "scores": NO_RESULT, "paired": 0}
    out = {"boxes": 0.0, "scores": 0.0, "paired": 0}
    for r, g in zip(ref, got):
        for k, v in compare_rows(r, g, score_tol).items():
            out[k] = out[k] + v if k == "paired" else max(out[k], v)
    return out


def check_values(out: np.ndarray, nc: int) -> str:
    """'' when a [b, k, 6] output reads as ultralytics' end-to-end rows (finite, scores in [0, 1], integral class ids
    in [0, nc)); else what is wrong."""
    out = np.asarray(out)
    if not np.isfinite(out).all():
        return "non-finite values"
    scores, classes = out[..., 4], out[..., 5]
    if scores.size and (scores.min() < -1e-3 or scores.max() > 1 + 1e-3):
        return f"scores outside [0, 1] (range {scores.min():.3g}..{scores.max():.3g})"
    if classes.size and np.abs(classes - np.rint(classes)).max() > 1e-3:
        return "class column is not integral (not an ultralytics x1, y1, x2, y2, score, class row)"
    if classes.size and (classes.min() < 0 or classes.max() > nc - 1 + 1e-3):
        return f"class ids outside [0, {nc}) (range {classes.min():.0f}..{classes.max():.0f})"
    return ""
