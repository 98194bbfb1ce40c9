"""Read the masks of POST /v1/segment: COCO run-length encoding (pycocotools' compressed string) -> runs -> pixels.

Why two functions: `decode_counts` is plain Python (the client needs only httpx, pydantic and tenacity), enough to
get a mask's run lengths, its area or to hand it to another tool; `decode_rle` gives the bool [height, width] array
that drawing and numpy code want, and so needs numpy: it is imported when called, and its absence is a clear
ImportError (`pip install 'triserve-client[masks]'`), not a failure when importing the client. pycocotools reads the
same answers (`pycocotools.mask.decode({'size': rle.size, 'counts': rle.counts})`) where it is installed.

The format (pycocotools rleFrString): each count is stored as little-endian groups of 5 bits, a continuation bit
(0x20) on every group but the last, offset by 48 into printable ASCII; the last group's 0x10 bit is the sign. From
the fourth count on, a count is stored as its difference to the count two places before it. Counts alternate runs
of 0s and 1s, 0s first, over the pixels in column-major order (down each column, then the next).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from triserve_client.models import RLE

__all__ = ["decode_counts", "mask_area", "decode_rle"]


def decode_counts(counts: str) -> list[int]:
    """COCO's compressed counts string -> the run lengths (0s, 1s, 0s, ...), pure Python."""
    runs: list[int] = []
    p, n = 0, len(counts)
    while p < n:
        x, k, more = 0, 0, True
        while more:
            if p >= n:
                raise ValueError(f"RLE counts end inside a number at character {p}")
            c = ord(counts[p]) - 48
            if not 0 <= c < 64:
                raise ValueError(f"RLE counts: character {counts[p]!r} at {p} is outside the format's range")
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)  # the sign bit of the last group: a negative difference
        if len(runs) > 2:
            x += runs[-2]
        if x < 0:
            raise ValueError(f"RLE counts: run {len(runs)} decodes to {x} (< 0)")
        runs.append(x)
    return runs


def _size_and_counts(rle: RLE | Mapping[str, Any]) -> tuple[int, int, list[int]]:
    size, counts = (rle["size"], rle["counts"]) if isinstance(rle, Mapping) else (rle.size, rle.counts)
    height, width = (int(v) for v in size)
    runs = decode_counts(counts)
    if sum(runs) != height * width:
        raise ValueError(f"RLE runs cover {sum(runs)} pixels, its size {height}x{width} has {height * width}")
    return height, width, runs


def mask_area(rle: RLE | Mapping[str, Any]) -> int:
    """Pixels set in the mask (the runs of 1s), pure Python; checks the runs against the mask's size."""
    _, _, runs = _size_and_counts(rle)
    return sum(runs[1::2])


def decode_rle(rle: RLE | Mapping[str, Any]) -> np.ndarray:
    """An instance's `rle` (the client's RLE model, or a dict with 'size' and 'counts') -> numpy bool [height, width],
    True on the instance. Needs numpy (ImportError naming the extra without it)."""
    try:
        import numpy as np
    except ImportError as exc:
        raise ImportError("triserve_client.masks.decode_rle needs numpy: pip install 'triserve-client[masks]' (or "
                          "use decode_counts / mask_area, which need nothing)") from exc
    height, width, runs = _size_and_counts(rle)
    values = np.arange(len(runs)) % 2 == 1  # 0s first, then alternating
    flat = np.repeat(values, runs)
    return flat.reshape(width, height).T  # column-major: row y of column x is flat[x * height + y]
