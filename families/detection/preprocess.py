"""Letterbox and its inverse: the one implementation used by export, evaluation and serving.

Why: a box shifted by a wrong pad or scale looks like a model bug for weeks (seed 001 §2.1). The geometry matches
ultralytics' training letterbox (centered padding, grey 114, bilinear resize) so served inputs look like trained ones.
The inverse uses the per-axis scale actually applied (after rounding), so a round trip is exact to float precision.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np


@dataclass(frozen=True)
class LetterboxMeta:
    """How one image was placed into the square network input."""

    orig_w: int
    orig_h: int
    scale_x: float  # resized_w / orig_w
    scale_y: float  # resized_h / orig_h
    pad_x: int  # left padding in network pixels
    pad_y: int  # top padding in network pixels


def letterbox(image: np.ndarray, imgsz: int, pad_value: int = 114) -> tuple[np.ndarray, LetterboxMeta]:
    """HxWx3 uint8 RGB -> (imgsz x imgsz x 3 uint8, meta). Aspect ratio kept, upscaling allowed."""
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"expected HxWx3 uint8, got {image.shape} {image.dtype}")
    h, w = image.shape[:2]
    r = min(imgsz / h, imgsz / w)
    new_w, new_h = max(1, int(round(w * r))), max(1, int(round(h * r)))
    if (new_w, new_h) != (w, h):
        image = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    dw, dh = (imgsz - new_w) / 2, (imgsz - new_h) / 2
    top, bottom = int(round(dh - 0.1)), int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)), int(round(dw + 0.1))
    out = cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(pad_value,) * 3)
    assert out.shape[:2] == (imgsz, imgsz), out.shape
    return out, LetterboxMeta(w, h, new_w / w, new_h / h, left, top)


def to_tensor(letterboxed: np.ndarray, scale: float = 1 / 255.0, color_order: str = "RGB") -> np.ndarray:
    """HxWx3 uint8 RGB -> 3xHxW float32 in the network's colour order."""
    img = letterboxed if color_order == "RGB" else letterboxed[..., ::-1]
    return np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32) * np.float32(scale)


def network_input(item: np.ndarray, scale: float = 1 / 255.0, color_order: str = "RGB") -> np.ndarray:
    """One detection item as the runner feeds it. The gateway sends the letterboxed SxSx3 uint8 image (a quarter of
    the bytes of its float32 tensor across the gateway->runner hop); it is tensorised here with the serving version's
    scale and colour order. A 3xSxS float tensor (Open Inference Protocol clients send those) passes unchanged."""
    if item.dtype == np.uint8 and item.ndim == 3 and item.shape[2] == 3:
        return to_tensor(item, scale, color_order)
    return np.asarray(item, dtype=np.float32)


def preprocess_image(image: np.ndarray, imgsz: int, pad_value: int = 114, scale: float = 1 / 255.0,
                     color_order: str = "RGB") -> tuple[np.ndarray, LetterboxMeta]:
    """Letterbox then tensorise: what the runner receives for one image."""
    boxed, meta = letterbox(image, imgsz, pad_value)
    return to_tensor(boxed, scale, color_order), meta


def boxes_to_network(boxes_xyxy: np.ndarray, meta: LetterboxMeta) -> np.ndarray:
    """Original-pixel boxes -> network-input pixels (used for labels and the round-trip check)."""
    b = np.asarray(boxes_xyxy, dtype=np.float64).reshape(-1, 4).copy()
    b[:, [0, 2]] = b[:, [0, 2]] * meta.scale_x + meta.pad_x
    b[:, [1, 3]] = b[:, [1, 3]] * meta.scale_y + meta.pad_y
    return b


def boxes_to_original(boxes_xyxy: np.ndarray, meta: LetterboxMeta) -> np.ndarray:
    """Network-input pixel boxes -> original image pixels, clipped to the image."""
    b = np.asarray(boxes_xyxy, dtype=np.float64).reshape(-1, 4).copy()
    b[:, [0, 2]] = (b[:, [0, 2]] - meta.pad_x) / meta.scale_x
    b[:, [1, 3]] = (b[:, [1, 3]] - meta.pad_y) / meta.scale_y
    b[:, [0, 2]] = b[:, [0, 2]].clip(0, meta.orig_w)
    b[:, [1, 3]] = b[:, [1, 3]].clip(0, meta.orig_h)
    return b
