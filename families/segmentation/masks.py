"""Instance masks in original image pixels, each made only inside its own box (bounded work per kept instance).

The geometry is ultralytics' (ops.process_mask_native, what its predictor returns with retina_masks=True): mask
logits = coefficients @ prototypes at 1/4 of the network input, sampled bilinearly (half-pixel centres, edges
clamped) at each original pixel's centre through the letterbox, thresholded at 0 (sigmoid 0.5), and cropped to the
box (pixel columns c with x1 <= c < x2, rows likewise). Here the logits are computed only on the prototype window
under the box and sampled only for the box's pixels, one separable bilinear pass per axis: the cost of an instance
is its box area, never the image's.

A box larger than `max_samples` pixels is sampled on a coarser grid over the box (the same bilinear logits, at the
centres of equal spans of pixels; each sample then stands for its span): an instance never costs more than
`max_samples` samples however large its box, so max_detections instances are bounded like capped NMS. The grid is
coarse only where the box is large: a 640-pixel box at the default 16,384 samples has one sample per 5x5 pixels,
a boundary error of at most 2-3 pixels on a 640-pixel object (mask IoU ~0.99). The logits of instances whose window
is most of the prototypes come from one matrix product for all of them (one pass over the prototypes).
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import cv2
import numpy as np

from triserve.families.vision.letterbox import LetterboxMeta

_CHUNK = 8  # large windows' logits computed this many instances at a time (one pass over the prototypes)


@dataclass(frozen=True)
class InstanceMask:
    """A bool mask of the box crop, placed at (x0, y0) in an image of height x width pixels.

    `rows`/`cols` (None: one sample per pixel) are the crop's pixel index where each sample row/column starts, with
    the crop's size last: sample (i, j) stands for pixel rows rows[i]..rows[i+1]-1 and columns cols[j]..cols[j+1]-1."""

    crop: np.ndarray  # bool [sample rows, sample columns]
    x0: int
    y0: int
    height: int
    width: int
    rows: np.ndarray | None = None
    cols: np.ndarray | None = None

    @property
    def area(self) -> int:
        if self.rows is None or self.cols is None:
            return int(self.crop.sum())
        return int(np.diff(self.rows) @ self.crop.astype(np.int64) @ np.diff(self.cols))

    def pixels(self) -> np.ndarray:
        """The crop at one value per pixel (the samples repeated over their spans)."""
        if self.rows is None or self.cols is None:
            return self.crop
        return np.repeat(np.repeat(self.crop, np.diff(self.rows), axis=0), np.diff(self.cols), axis=1)

    def full(self) -> np.ndarray:
        """The whole-image bool mask (tests and the importers' mask IoU; the service encodes the crop)."""
        crop = self.pixels()
        out = np.zeros((self.height, self.width), bool)
        out[self.y0:self.y0 + crop.shape[0], self.x0:self.x0 + crop.shape[1]] = crop
        return out


def sample_spans(h: int, w: int, max_samples: int | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Where each sample row/column starts in an h x w crop: (None, None) when every pixel fits the budget, else
    equal spans with at most max_samples samples in all (the aspect ratio kept)."""
    if max_samples is None or h * w <= max_samples:
        return None, None
    f = math.sqrt(max_samples / (h * w))
    hc, wc = max(1, min(h, int(h * f))), max(1, min(w, int(w * f)))
    return (np.round(np.arange(hc + 1) * h / hc).astype(np.int64),
            np.round(np.arange(wc + 1) * w / wc).astype(np.int64))


def _window(n0: int, n1: int, scale: float, pad: int, proto: int, stride: float) -> tuple[int, int, float, float]:
    """One axis: original pixels n0..n1-1 -> (prototype window start, end, a, b) with window position = a * i + b for
    the crop's i-th pixel. A pixel centre maps to the network at (n + 0.5) * scale + pad, to the prototypes at that
    / stride - 0.5 (half-pixel centres, as bilinear resizing with align_corners=False); one cell of margin."""
    a = scale / stride
    first = (n0 + 0.5) * scale / stride + pad / stride - 0.5
    last = (n1 - 0.5) * scale / stride + pad / stride - 0.5
    start = min(max(int(math.floor(first)), 0), proto - 1)
    end = min(max(int(math.floor(last)) + 2, start + 1), proto)
    return start, end, a, first - start


def crop_of(box: np.ndarray, meta: LetterboxMeta) -> tuple[int, int, int, int]:
    """The pixels a box covers: columns c with x1 <= c < x2 (ultralytics' crop_mask), clipped to the image."""
    h, w = meta.orig_h, meta.orig_w
    x0, y0 = min(max(math.ceil(float(box[0])), 0), w), min(max(math.ceil(float(box[1])), 0), h)
    x1, y1 = min(max(math.ceil(float(box[2])), x0), w), min(max(math.ceil(float(box[3])), y0), h)
    return x0, y0, x1, y1


def iter_instance_masks(coefs: np.ndarray, protos: np.ndarray, boxes: np.ndarray, meta: LetterboxMeta, imgsz: int,
                        max_samples: int | None = None) -> Iterator[InstanceMask]:
    """Kept instances: coefficients [n, nm], prototypes [nm, p, p], boxes [n, 4] in ORIGINAL pixels, in score order.
    For each, the logits of the prototype window under its box are resampled onto the box's pixels (or its sample
    grid) with one affine warp (bilinear, edges replicated: OpenCV's SIMD kernel, 1/32-pixel weights), then
    thresholded at 0. Lazily, one instance at a time: a caller with a budget stops when it is spent."""
    h, w = meta.orig_h, meta.orig_w
    nm, p = protos.shape[0], protos.shape[1]
    stride = imgsz / p
    Window = tuple[int, int, float, float]
    plans: list[tuple[int, int, int, int, Window | None, Window | None]] = []
    for box in boxes:
        x0, y0, x1, y1 = crop_of(box, meta)
        if x1 == x0 or y1 == y0:
            plans.append((x0, y0, x1, y1, None, None))
            continue
        plans.append((x0, y0, x1, y1, _window(x0, x1, meta.scale_x, meta.pad_x, p, stride),
                      _window(y0, y1, meta.scale_y, meta.pad_y, p, stride)))
    # windows covering most of the prototypes: one product for all of them instead of a pass over them each
    big = [i for i, (*_, wx, wy) in enumerate(plans)
           if wx is not None and wy is not None and (wx[1] - wx[0]) * (wy[1] - wy[0]) * 4 > p * p]
    whole: dict[int, np.ndarray] = {}  # filled a chunk at a time: a caller that stops early pays for no more
    flat = protos.reshape(nm, -1)
    for i, (x0, y0, x1, y1, wx, wy) in enumerate(plans):
        if wx is None or wy is None:
            yield InstanceMask(np.zeros((y1 - y0, x1 - x0), bool), x0, y0, h, w)
            continue
        (sx, ex, ax, bx), (sy, ey, ay, by) = wx, wy
        if i in big and i not in whole:
            chunk = big[big.index(i):big.index(i) + _CHUNK]
            whole = dict(zip(chunk, (coefs[chunk] @ flat).reshape(len(chunk), p, p)))
        if i in whole:
            logits = whole[i][sy:ey, sx:ex]
        else:
            window = protos[:, sy:ey, sx:ex]
            logits = (coefs[i] @ window.reshape(nm, -1)).reshape(ey - sy, ex - sx)
        rows, cols = sample_spans(y1 - y0, x1 - x0, max_samples)
        if rows is None or cols is None:  # one sample per pixel: crop pixel i sits at window position a * i + b
            size, warp = (x1 - x0, y1 - y0), np.array([[ax, 0.0, bx], [0.0, ay, by]], np.float64)
        else:  # sample j sits at the centre of its span: crop pixel (j + 0.5) * n / m - 0.5
            (hc, wc), (hh, ww) = (len(rows) - 1, len(cols) - 1), (y1 - y0, x1 - x0)
            size = (wc, hc)
            warp = np.array([[ax * ww / wc, 0.0, ax * (0.5 * ww / wc - 0.5) + bx],
                             [0.0, ay * hh / hc, ay * (0.5 * hh / hc - 0.5) + by]], np.float64)
        grid = cv2.warpAffine(np.ascontiguousarray(logits, np.float32), warp, size,
                              flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_REPLICATE)
        yield InstanceMask(grid > 0, x0, y0, h, w, rows, cols)


def polygons(mask: InstanceMask, max_points: int) -> list[list[float]]:
    """Outer contours of the mask as flat [x1, y1, x2, y2, ...] lists in original pixels (pixel corners as
    OpenCV traces them), largest first; simplified (Douglas-Peucker, growing tolerance) until all fit `max_points`."""
    if mask.crop.size == 0 or not mask.crop.any():
        return []
    contours, _ = cv2.findContours(mask.crop.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    contours = sorted(contours, key=cv2.contourArea, reverse=True)
    eps = 0.0
    while sum(len(c) for c in contours) > max_points:
        eps = 0.5 if eps == 0 else eps * 2
        contours = [cv2.approxPolyDP(c, eps, True) for c in contours]
        if eps > max(mask.crop.shape):  # every contour is a few points now: keep the largest that fit
            kept, n = [], 0
            for c in contours:
                if n + len(c) <= max_points:
                    kept.append(c)
                    n += len(c)
            contours = kept
            break
    offset = np.array([mask.x0, mask.y0], np.float64)
    out = []
    for c in contours:
        if len(c) < 3:
            continue
        pts = c.reshape(-1, 2).astype(np.float64)
        if mask.rows is not None and mask.cols is not None:  # a sample's point -> the centre of its pixel span
            pts[:, 0] = (mask.cols[pts[:, 0].astype(int)] + mask.cols[pts[:, 0].astype(int) + 1] - 1) / 2
            pts[:, 1] = (mask.rows[pts[:, 1].astype(int)] + mask.rows[pts[:, 1].astype(int) + 1] - 1) / 2
        out.append([round(float(v), 2) for v in (pts + offset).reshape(-1)])
    return out
