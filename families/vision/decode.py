"""Safe image decoding: size and pixel caps are checked from the header, before any pixel is decoded.

Why: a 50 KB PNG can declare 100k x 100k pixels (a decompression bomb); a truncated JPEG or a text file named .jpg
must be a 422 with a clear code, not a worker killed by memory or a 500. No URLs are ever fetched (SSRF).
"""
from __future__ import annotations

import base64
import binascii
import io
import warnings
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from PIL import Image, ImageOps

from triserve.kernel.errors import ApiError

ALLOWED_FORMATS = {"JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF"}
Image.MAX_IMAGE_PIXELS = None  # our own cap below applies first, per request config


def decode_base64(data: str, index: int, max_bytes: int) -> bytes:
    if data.startswith("data:"):
        data = data.split(",", 1)[-1]
    if len(data) > (max_bytes * 4) // 3 + 8:
        raise ApiError(413, "image_too_large", f"image {index} exceeds {max_bytes} bytes",
                       {"index": index, "limit_bytes": max_bytes})
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ApiError(422, "invalid_base64", f"image {index} is not valid base64", {"index": index}) from exc


def decode_image(raw: bytes, index: int, max_bytes: int, max_pixels: int) -> np.ndarray:
    """Encoded bytes -> HxWx3 uint8 RGB, EXIF orientation applied."""
    if len(raw) == 0:
        raise ApiError(422, "invalid_image", f"image {index} is empty", {"index": index})
    if len(raw) > max_bytes:
        raise ApiError(413, "image_too_large", f"image {index} exceeds {max_bytes} bytes",
                       {"index": index, "limit_bytes": max_bytes, "size_bytes": len(raw)})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(raw))
            fmt = img.format
            w, h = img.size
            if fmt not in ALLOWED_FORMATS:
                raise ApiError(415, "unsupported_image_format", f"image {index} format {fmt} is not supported",
                               {"index": index, "allowed": sorted(ALLOWED_FORMATS)})
            if w <= 0 or h <= 0 or w * h > max_pixels:
                raise ApiError(422, "image_too_many_pixels",
                               f"image {index} has {w}x{h} pixels, above the cap of {max_pixels}",
                               {"index": index, "width": w, "height": h, "max_pixels": max_pixels})
            img.load()
            # in place and only converted when not RGB already: each of these otherwise copies the whole image
            # (three full-size copies per request before the one into numpy)
            ImageOps.exif_transpose(img, in_place=True)
            rgb = img if img.mode == "RGB" else img.convert("RGB")
    except ApiError:
        raise
    except Exception as exc:
        # PIL's own failures (UnidentifiedImageError, OSError, DecompressionBomb*, ...) and a PIL plugin registered by
        # a library of the same process failing on the bytes (ultralytics' HEIF opener raises ModuleNotFoundError for
        # pi_heif while probing unknown bytes): a bad image, never a 500
        raise ApiError(422, "invalid_image", f"image {index} could not be decoded: {type(exc).__name__}",
                       {"index": index}) from exc
    return np.asarray(rgb, dtype=np.uint8)


class ImageLimits(Protocol):
    max_images: int
    max_image_bytes: int
    max_pixels: int


def decode_images(images: Sequence[Any], limits: ImageLimits) -> list[np.ndarray]:
    """A request's images -> RGB arrays, every cap checked before the runner: the count, then each image's bytes
    (base64 `ImageInput`s of the JSON routes, or encoded bytes of uploads, typed gRPC and OIP) and pixels. The one
    decoding step of every image family."""
    if len(images) > limits.max_images:
        raise ApiError(422, "too_many_images", f"{len(images)} images exceed the limit of {limits.max_images}",
                       {"limit": limits.max_images, "received": len(images)})
    return [decode_image(bytes(im) if isinstance(im, (bytes, bytearray, memoryview))
                         else decode_base64(im.data, i, limits.max_image_bytes), i, limits.max_image_bytes,
                         limits.max_pixels) for i, im in enumerate(images)]
