"""COCO run-length encoding of binary masks, written in numpy (the format of pycocotools' `encode`).

Why here and not pycocotools: one small, vectorised module (the runs of a mask, then the counts as COCO's compressed
string) instead of a compiled dependency in the serving image; tests/families/segmentation/test_rle.py checks it
against a hand-computed example and, where pycocotools is installed, against pycocotools itself.

The format: pixels in column-major order (down each column, then the next column, as pycocotools reads a Fortran-order
array), runs alternating 0s and 1s starting with 0s (a mask whose first pixel is set starts with a 0-length run).
The compressed string stores each count, minus the count two places before it from the fourth on, as little-endian
groups of 5 bits with a continuation bit (0x20), offset by 48 into printable ASCII (pycocotools' rleToString).
Instances are encoded from their box crop (`crop_counts`): the work is the crop's, not the image's.
"""
from __future__ import annotations

import numpy as np

_MAX_GROUPS = 13  # 5-bit groups of an int64 (sign-extended): more than any count a capped image produces


def counts_from_runs(starts: np.ndarray, ends: np.ndarray, total: int) -> np.ndarray:
    """Runs of 1s [start, end) in column-major pixel order (sorted, non-overlapping) -> COCO counts (0s first)."""
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    if starts.size:  # runs that touch (a column's last pixel, the next column's first) are one run
        join = starts[1:] == ends[:-1]
        if join.any():
            starts = np.concatenate([starts[:1], starts[1:][~join]])
            ends = np.concatenate([ends[:-1][~join], ends[-1:]])
    edges = np.empty(2 * starts.size + 2, np.int64)
    edges[0], edges[-1] = 0, total
    edges[1:-1:2], edges[2:-1:2] = starts, ends
    counts = np.diff(edges)
    return counts[:-1] if counts.size > 1 and counts[-1] == 0 else counts  # no empty trailing run (pycocotools)


def crop_counts(crop: np.ndarray, x0: int, y0: int, height: int, width: int) -> np.ndarray:
    """COCO counts of a height x width mask that is zero outside `crop` (a bool [h, w] placed at column x0, row y0)."""
    ch, cw = crop.shape
    total = height * width
    if crop.size == 0 or not crop.any():
        return np.array([total], np.int64)
    cols = np.zeros((cw, ch + 2), np.int8)  # each crop column, padded with a 0 above and below
    cols[:, 1:-1] = crop.T
    d = np.diff(cols, axis=1)  # +1: a run starts at that row of the crop; -1: a run ended just before it
    sc, sr = np.nonzero(d == 1)
    ec, er = np.nonzero(d == -1)
    base_s = (x0 + sc) * height + y0
    base_e = (x0 + ec) * height + y0
    return counts_from_runs(base_s + sr, base_e + er, total)


def mask_counts(mask: np.ndarray) -> np.ndarray:
    """COCO counts of a whole bool [h, w] mask."""
    h, w = mask.shape
    return crop_counts(np.asarray(mask, bool), 0, 0, h, w)


def counts_to_string(counts: np.ndarray) -> str:
    """COCO's compressed counts string (pycocotools rleToString), vectorised over the counts."""
    x = np.asarray(counts, np.int64).copy()
    if x.size > 3:  # pycocotools: `if (i > 2) x -= cnts[i-2]` (the third count is stored whole)
        x[3:] -= np.asarray(counts, np.int64)[1:-2]
    chars = np.zeros((x.size, _MAX_GROUPS), np.uint8)
    active = np.ones(x.size, bool)
    for k in range(_MAX_GROUPS):
        c = x & 0x1F
        x = x >> 5  # arithmetic shift: negative deltas end at -1
        more = np.where(c & 0x10, x != -1, x != 0) & active
        chars[:, k] = np.where(active, (c | np.where(more, 0x20, 0)) + 48, 0)
        active = more
        if not active.any():
            break
    flat = chars.reshape(-1)
    return flat[flat != 0].tobytes().decode("ascii")


def string_to_counts(s: str) -> np.ndarray:
    """The inverse of counts_to_string (pycocotools rleFrString): for tests and clients' decoders."""
    out: list[int] = []
    p, data = 0, s.encode("ascii")
    while p < len(data):
        x, k, more = 0, 0, True
        while more:
            c = data[p] - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and (c & 0x10):
                x |= -1 << (5 * k)
        if len(out) > 2:
            x += out[-2]
        out.append(x)
    return np.asarray(out, np.int64)


def decode_counts(counts: np.ndarray, height: int, width: int) -> np.ndarray:
    """COCO counts -> bool [height, width] mask (column-major runs)."""
    counts = np.asarray(counts, np.int64)
    if int(counts.sum()) != height * width:
        raise ValueError(f"counts sum to {int(counts.sum())}, not {height}x{width}")
    values = np.zeros(counts.size, bool)
    values[1::2] = True
    flat = np.repeat(values, counts)
    return flat.reshape(width, height).T


def encode(mask: np.ndarray) -> dict:
    """bool [h, w] -> {'size': [h, w], 'counts': str}, as pycocotools.mask.encode gives (counts decoded to str)."""
    h, w = mask.shape
    return {"size": [int(h), int(w)], "counts": counts_to_string(mask_counts(mask))}
