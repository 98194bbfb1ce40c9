"""How an image becomes the compact uint8 item the runner gets: torchvision's Resize(int) + CenterCrop on PIL
(ultralytics' classify transform, ImageNet's evaluation transform), or a letterbox. runtime.py normalises it.

Why PIL and torchvision's size rules: a classifier's probabilities move with the resampling filter and with a one-pixel
shift of the crop; the importers verify the served path against ultralytics' own predictor to 1e-4, which holds only
when the resize is the same (PIL's antialiased filter, the long side truncated, the crop offset rounded as
torchvision rounds it).
"""
from __future__ import annotations

import numpy as np
from PIL import Image

from triserve.families.classification.manifest import ClassificationPreprocess
from triserve.families.vision.letterbox import fit
from triserve.kernel.errors import ApiError

FILTERS = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}


def resized_size(width: int, height: int, short: int) -> tuple[int, int]:
    """torchvision's Resize(short) output (w, h): the short side set, the long side scaled and truncated."""
    if width <= height:
        return short, int(short * height / width)
    return int(short * width / height), short


def center_crop(image: np.ndarray, size: int) -> np.ndarray:
    """The centre size x size square (torchvision's offsets: round((side - size) / 2)); the image covers it."""
    h, w = image.shape[:2]
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
    return image[top:top + size, left:left + size]


def crop(image: np.ndarray, pre: ClassificationPreprocess, index: int = 0, max_pixels: int = 40_000_000) -> np.ndarray:
    """HxWx3 uint8 RGB -> the item for the runner: the imgsz square crop (center_crop), or the image fitted into the
    square (letterbox; the runner pads it). A resize larger than `max_pixels` (a 1-pixel-high panorama) is a 422."""
    if pre.resize == "letterbox":
        return fit(image, pre.imgsz)[0]
    h, w = image.shape[:2]
    new_w, new_h = resized_size(w, h, pre.crop_from)
    if new_w * new_h > max_pixels:
        raise ApiError(422, "image_too_elongated", f"image {index} ({w}x{h}) would be resized to {new_w}x{new_h} "
                       f"pixels, above the cap of {max_pixels}", {"index": index, "width": w, "height": h})
    if (new_w, new_h) != (w, h):
        image = np.asarray(Image.fromarray(image).resize((new_w, new_h), FILTERS[pre.interpolation]))
    return np.ascontiguousarray(center_crop(image, pre.imgsz))
