"""Instance masks in original image pixels, each made only inside its own box (bounded work per kept instance).

The geometry is ultralytics' (ops.process_mask_native, what its predictor returns with retina_masks=True): mask
logits = coefficients @ prototypes at 1/4 of the network input, sampled bilinearly (half-pixel centres, edges
clamped) at each original pixel's centre through the letterbox, thresholded at 0 (sigmoid 0.5), and cropped to the
box (pixel columns c with x1 <= c < x2, rows likewise). Here the logits are computed only on the prototype window
under the box and sampled only for the box's pixels, one separable bilinear pass per axis: the cost of an instance
is its box area, never the image's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from families.detection.preprocess import LetterboxMeta


@dataclass(frozen=True)
class InstanceMask:
    """A bool mask of the box crop, placed at (x0, y0) in an image of height x width pixels."""

    crop: np.ndarray  # bool [y1 - y0, x1 - x0]
    x0: int
    y0: int
    height: int
    width: int

    @property
    def area(self) -> int:
        return int(self.crop.sum())

    def full(self) -> np.ndarray:
        """The whole-image bool mask (tests and the importers' mask IoU; the service encodes the crop)."""
        out = np.zeros((self.height, self.width), bool)
        out[self.y0:self.y0 + self.crop.shape[0], self.x0:self.x0 + self.crop.shape[1]] = self.crop
        return out


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


def instance_mask(coef: np.ndarray, protos: np.ndarray, box: np.ndarray, meta: LetterboxMeta,
                  imgsz: int) -> InstanceMask:
    """One instance: coefficients [nm], prototypes [nm, p, p], its box x1, y1, x2, y2 in ORIGINAL pixels. The logits
    of the prototype window under the box are resampled onto the box's pixels with one affine warp (bilinear, edges
    replicated: OpenCV's SIMD kernel, 1/32-pixel weights), then thresholded at 0."""
    h, w = meta.orig_h, meta.orig_w
    x0, y0, x1, y1 = crop_of(box, meta)
    if x1 == x0 or y1 == y0:
        return InstanceMask(np.zeros((y1 - y0, x1 - x0), bool), x0, y0, h, w)
    p = protos.shape[1]
    stride = imgsz / p
    sx, ex, ax, bx = _window(x0, x1, meta.scale_x, meta.pad_x, p, stride)
    sy, ey, ay, by = _window(y0, y1, meta.scale_y, meta.pad_y, p, stride)
    window = protos[:, sy:ey, sx:ex]
    logits = (coef @ window.reshape(window.shape[0], -1)).reshape(ey - sy, ex - sx).astype(np.float32)
    warp = np.array([[ax, 0.0, bx], [0.0, ay, by]], np.float64)  # crop pixel -> window position
    grid = cv2.warpAffine(logits, warp, (x1 - x0, y1 - y0), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                          borderMode=cv2.BORDER_REPLICATE)
    return InstanceMask(grid > 0, x0, y0, h, w)


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
    return [[round(float(v), 2) for v in (c.reshape(-1, 2) + offset).reshape(-1)] for c in contours if len(c) >= 3]
