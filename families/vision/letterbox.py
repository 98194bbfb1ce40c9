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


def pad_offsets(new_w: int, new_h: int, imgsz: int) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) padding that centres a new_w x new_h image in the imgsz square (ultralytics' rule:
    the odd pixel goes right and bottom). One function for the gateway's metadata and the runner's padding."""
    dw, dh = (imgsz - new_w) / 2, (imgsz - new_h) / 2
    return int(round(dw - 0.1)), int(round(dh - 0.1)), int(round(dw + 0.1)), int(round(dh + 0.1))


def fit(image: np.ndarray, imgsz: int) -> tuple[np.ndarray, LetterboxMeta]:
    """HxWx3 uint8 RGB -> (the image resized to fit the imgsz square, aspect ratio kept, upscaling allowed; meta of
    the letterbox it goes into). What the gateway sends the runner: the padding is the runner's (network_batch), so a
    4:3 photo crosses the hop in 3/4 of the letterbox's bytes, a 16:9 one in 9/16."""
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"expected HxWx3 uint8, got {image.shape} {image.dtype}")
    h, w = image.shape[:2]
    r = min(imgsz / h, imgsz / w)
    new_w, new_h = max(1, int(round(w * r))), max(1, int(round(h * r)))
    if (new_w, new_h) != (w, h):
        image = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    left, top, _, _ = pad_offsets(new_w, new_h, imgsz)
    return image, LetterboxMeta(w, h, new_w / w, new_h / h, left, top)


def letterbox(image: np.ndarray, imgsz: int, pad_value: int = 114) -> tuple[np.ndarray, LetterboxMeta]:
    """HxWx3 uint8 RGB -> (imgsz x imgsz x 3 uint8, meta). Aspect ratio kept, upscaling allowed."""
    fitted, meta = fit(image, imgsz)
    left, top, right, bottom = pad_offsets(fitted.shape[1], fitted.shape[0], imgsz)
    out = cv2.copyMakeBorder(fitted, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(pad_value,) * 3)
    assert out.shape[:2] == (imgsz, imgsz), out.shape
    return out, meta


def to_tensor(letterboxed: np.ndarray, scale: float = 1 / 255.0, color_order: str = "RGB") -> np.ndarray:
    """HxWx3 uint8 RGB -> 3xHxW float32 in the network's colour order."""
    img = letterboxed if color_order == "RGB" else letterboxed[..., ::-1]
    return np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32) * np.float32(scale)


def network_batch(items: list[np.ndarray], imgsz: int, pad_value: int = 114, scale: float = 1 / 255.0,
                  color_order: str = "RGB") -> np.ndarray:
    """The items of one model call as the runner feeds them, [n, 3, imgsz, imgsz] float32, written in place: a
    fitted image (HxWx3 uint8, fit(): at most imgsz on each side) is padded here and tensorised with the serving
    version's scale and colour order, exactly as to_tensor(letterbox(...)) (float32(value) * float32(scale) for
    every pixel, the padding's included); a 3xSxS float tensor (Open Inference Protocol clients send those) is
    copied as it is. One array, no per-item tensor and no stack copy."""
    out = np.empty((len(items), 3, imgsz, imgsz), dtype=np.float32)
    factor = np.float32(scale)
    for row, item in zip(out, items):
        if item.dtype == np.uint8 and item.ndim == 3 and item.shape[2] == 3:
            h, w = item.shape[:2]
            if h > imgsz or w > imgsz:
                raise ValueError(f"image item {w}x{h} is larger than the {imgsz} input")
            left, top, _, _ = pad_offsets(w, h, imgsz)
            if (h, w) != (imgsz, imgsz):
                row.fill(np.float32(pad_value) * factor)
            img = item if color_order == "RGB" else item[..., ::-1]
            np.multiply(img.transpose(2, 0, 1), factor, out=row[:, top:top + h, left:left + w], dtype=np.float32)
        else:
            row[...] = np.asarray(item, dtype=np.float32)
    return out


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
