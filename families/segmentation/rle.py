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


def counts_from_boundaries(bounds: np.ndarray, total: int) -> np.ndarray:
    """Sorted column-major pixel indices where the value flips (0 -> 1 at even places, 1 -> 0 at odd ones) -> COCO
    counts. A flip that appears twice (a run ending at a column's last row and going on at the next column's first)
    is no flip: such pairs cancel."""
    bounds = np.asarray(bounds, np.int64)
    if bounds.size > 1:
        dup = np.flatnonzero(bounds[1:] == bounds[:-1])
        if dup.size:
            keep = np.ones(bounds.size, bool)
            keep[dup] = keep[dup + 1] = False
            bounds = bounds[keep]
    edges = np.empty(bounds.size + 2, np.int64)
    edges[0], edges[-1] = 0, total
    edges[1:-1] = bounds
    counts = np.diff(edges)
    return counts[:-1] if counts.size > 1 and counts[-1] == 0 else counts  # no empty trailing run (pycocotools)


def crop_counts(crop: np.ndarray, x0: int, y0: int, height: int, width: int, rows: np.ndarray | None = None,
                cols: np.ndarray | None = None) -> np.ndarray:
    """COCO counts of a height x width mask that is zero outside `crop` (a bool [h, w] placed at column x0, row y0).
    Three passes over the crop (transpose with a zero row per column, compare neighbours, find the flips).

    With `rows`/`cols` (a sampled crop, masks.InstanceMask), each sample stands for a span of pixels: a flip at
    sample row i is a flip at pixel row rows[i], and a sample column's flips repeat in each pixel column of its span,
    so the work is the samples' plus one bound per flip per pixel column, never the box's pixels."""
    ch, cw = crop.shape
    total = height * width
    if crop.size == 0:
        return np.array([total], np.int64)
    cols_ = np.zeros((cw, ch + 1), np.uint8)  # each crop column, then a 0: runs end at the crop's bottom
    cols_[:, :ch] = crop.T
    flat = cols_.reshape(-1)
    flips = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    if flat[0]:
        flips = np.concatenate([[0], flips])
    if flips.size == 0:
        return np.array([total], np.int64)
    col, row = np.divmod(flips, ch + 1)
    if rows is None or cols is None:
        return counts_from_boundaries((x0 + col) * height + y0 + row, total)
    pixel_row = np.asarray(rows, np.int64)[row]  # rows[ch] is the crop's pixel height: the bottom
    per_col = np.bincount(col, minlength=cw)  # flips of each sample column
    span = np.asarray(cols, np.int64)[1:] - np.asarray(cols, np.int64)[:-1]  # pixel columns per sample column
    block = per_col * span  # bounds each sample column contributes: its flips in each of its pixel columns
    n = int(block.sum())
    j = np.repeat(np.arange(cw), block)
    within = np.arange(n) - np.repeat(np.cumsum(block) - block, block)
    k = per_col[j]
    pixel_col = np.asarray(cols, np.int64)[j] + within // k
    flip = (np.cumsum(per_col) - per_col)[j] + within % k
    return counts_from_boundaries((x0 + pixel_col) * height + y0 + pixel_row[flip], total)


def mask_counts(mask: np.ndarray) -> np.ndarray:
    """COCO counts of a whole bool [h, w] mask."""
    h, w = mask.shape
    return crop_counts(np.asarray(mask, bool), 0, 0, h, w)


def counts_to_strings(all_counts: list[np.ndarray]) -> list[str]:
    """COCO's compressed counts strings (pycocotools rleToString) of several masks in one vectorised pass: the
    per-call cost of numpy is paid once per image, not once per instance. Each pass writes one 5-bit group of the
    counts that still need one (most need one or two), so the work is the output's length."""
    if not all_counts:
        return []
    sizes = np.array([len(c) for c in all_counts], np.int64)
    counts = np.concatenate([np.asarray(c, np.int64) for c in all_counts])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    index = np.arange(counts.size) - np.repeat(starts, sizes)  # position within its own mask's counts
    x = counts.copy()
    later = np.flatnonzero(index > 2)  # pycocotools: `if (i > 2) x -= cnts[i-2]` (the third count is stored whole)
    x[later] -= counts[later - 2]
    groups = np.zeros(x.size, np.int64)
    passes = []  # (which counts, their k-th char)
    todo = np.arange(x.size)
    for _ in range(_MAX_GROUPS):
        if todo.size == 0:
            break
        c = x & 0x1F
        x = x >> 5  # arithmetic shift: negative deltas end at -1
        more = np.where(c & 0x10, x != -1, x != 0)
        passes.append((todo, (c | (more.astype(np.int64) << 5)) + 48))
        groups[todo] += 1
        todo, x = todo[more], x[more]
    first = np.cumsum(groups) - groups  # where each count's chars start
    buf = np.empty(int(groups.sum()), np.uint8)
    for k, (which, chars) in enumerate(passes):
        buf[first[which] + k] = chars
    text = buf.tobytes().decode("ascii")
    ends = np.cumsum(np.add.reduceat(groups, starts)) if counts.size else np.zeros(0, np.int64)
    bounds = np.concatenate([[0], ends])
    return [text[bounds[i]:bounds[i + 1]] for i in range(len(all_counts))]


def counts_to_string(counts: np.ndarray) -> str:
    """COCO's compressed counts string of one mask (pycocotools rleToString)."""
    return counts_to_strings([counts])[0]


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
