"""Image decoding: orientation, colour modes and refusals, with exact expectations (families/vision/decode.py)."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from triserve.families.vision.decode import decode_image
from triserve.kernel.errors import ApiError

MAX_BYTES, MAX_PIXELS = 10 * 2**20, 40_000_000


def encoded(img: Image.Image, fmt: str = "PNG", **save) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **save)
    return buf.getvalue()


def gradient(w: int = 6, h: int = 4) -> np.ndarray:
    """Every pixel distinct, so a rotation or a channel swap cannot go unnoticed."""
    ys, xs = np.mgrid[0:h, 0:w]
    return np.stack([xs * 40, ys * 60, xs + ys * w], axis=-1).astype(np.uint8)


def test_rgb_png_decodes_to_the_same_pixels():
    pixels = gradient()
    out = decode_image(encoded(Image.fromarray(pixels)), 0, MAX_BYTES, MAX_PIXELS)
    assert out.dtype == np.uint8 and out.shape == (4, 6, 3)
    np.testing.assert_array_equal(out, pixels)


@pytest.mark.parametrize(("orientation", "expected"), [
    (1, lambda a: a),
    (3, lambda a: a[::-1, ::-1]),  # rotated 180
    (6, lambda a: np.rot90(a, k=-1)),  # the camera was turned right: shown rotated 90 clockwise
    (8, lambda a: np.rot90(a, k=1)),
])
def test_exif_orientation_is_applied(orientation, expected):
    pixels = gradient()
    exif = Image.Exif()
    exif[0x0112] = orientation
    raw = encoded(Image.fromarray(pixels), "PNG", exif=exif.tobytes())
    out = decode_image(raw, 0, MAX_BYTES, MAX_PIXELS)
    np.testing.assert_array_equal(out, expected(pixels))


@pytest.mark.parametrize("mode", ["L", "RGBA", "P", "I;16"])
def test_other_colour_modes_become_rgb(mode):
    img = Image.fromarray(gradient()).convert(mode if mode != "I;16" else "L")
    if mode == "I;16":
        img = img.convert("I").point(lambda v: v * 256).convert("I;16")
    out = decode_image(encoded(img), 0, MAX_BYTES, MAX_PIXELS)
    assert out.shape == (4, 6, 3) and out.dtype == np.uint8
    if mode == "L":  # grey: the three channels equal the grey value
        grey = np.asarray(img)
        for c in range(3):
            np.testing.assert_array_equal(out[..., c], grey)


def test_refusals_are_coded():
    with pytest.raises(ApiError) as empty:
        decode_image(b"", 0, MAX_BYTES, MAX_PIXELS)
    assert (empty.value.status, empty.value.code) == (422, "invalid_image")
    with pytest.raises(ApiError) as text:
        decode_image(b"not an image at all", 1, MAX_BYTES, MAX_PIXELS)
    assert (text.value.status, text.value.code) == (422, "invalid_image")
    with pytest.raises(ApiError) as big:
        decode_image(encoded(Image.fromarray(gradient(60, 40))), 2, MAX_BYTES, 60 * 40 - 1)
    assert (big.value.status, big.value.code) == (422, "image_too_many_pixels")
    assert big.value.details["index"] == 2
