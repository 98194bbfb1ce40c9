import numpy as np
import pytest

from triserve.families.vision.letterbox import (
    boxes_to_network,
    boxes_to_original,
    fit,
    letterbox,
    network_batch,
    preprocess_image,
)


@pytest.mark.parametrize("h,w", [(480, 640), (640, 480), (333, 1000), (17, 23), (256, 256), (1, 999)])
@pytest.mark.parametrize("imgsz", [64, 160, 256])
def test_letterbox_round_trip_within_half_pixel(h, w, imgsz):
    rng = np.random.default_rng(h * w + imgsz)
    img = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
    boxed, meta = letterbox(img, imgsz)
    assert boxed.shape == (imgsz, imgsz, 3)
    x1, y1 = rng.uniform(0, w / 2), rng.uniform(0, h / 2)
    boxes = np.array([[x1, y1, rng.uniform(x1, w), rng.uniform(y1, h)], [0, 0, w, h]])
    back = boxes_to_original(boxes_to_network(boxes, meta), meta)
    assert np.max(np.abs(back - boxes)) <= 0.5


def test_letterbox_geometry_is_centered_with_grey_padding():
    img = np.full((100, 200, 3), 7, dtype=np.uint8)
    boxed, meta = letterbox(img, 64)
    assert (meta.pad_x, meta.pad_y) == (0, 16) and (meta.scale_x, meta.scale_y) == (0.32, 0.32)
    assert (boxed[:16] == 114).all() and (boxed[48:] == 114).all() and (boxed[16:48] == 7).all()


def test_tensor_layout_and_scale():
    img = np.zeros((10, 10, 3), dtype=np.uint8)
    img[..., 0] = 255  # red
    t, _ = preprocess_image(img, 10)
    assert t.shape == (3, 10, 10) and t.dtype == np.float32
    assert np.allclose(t[0], 1.0) and np.allclose(t[1:], 0.0)
    t_bgr, _ = preprocess_image(img, 10, color_order="BGR")
    assert np.allclose(t_bgr[2], 1.0)


@pytest.mark.parametrize("color_order", ["RGB", "BGR"])
@pytest.mark.parametrize(("h", "w", "side", "pad"), [
    (90, 160, 64, 114), (160, 90, 64, 114), (64, 64, 64, 114), (1, 1, 64, 0), (7, 300, 65, 255), (301, 5, 63, 114),
    (480, 640, 640, 114)])
def test_runner_pads_the_fitted_image_exactly_as_the_letterbox(color_order, h, w, side, pad):
    """The gateway ships the fitted image (no padding); the runner's tensor must be the one the letterbox would have
    made, bit for bit, and the metadata the same."""
    img = np.random.default_rng(h * w).integers(0, 256, (h, w, 3), dtype=np.uint8)
    expected, meta = preprocess_image(img, side, pad_value=pad, scale=1 / 255.0, color_order=color_order)
    fitted, fitted_meta = fit(img, side)
    assert fitted_meta == meta and max(fitted.shape[:2]) == side
    got = network_batch([fitted, fitted], side, pad, 1 / 255.0, color_order)
    assert got.dtype == np.float32 and got.shape == (2, 3, side, side)
    assert np.array_equal(got[0], expected) and np.array_equal(got[1], expected)
    boxed, _ = letterbox(img, side, pad)
    assert fitted.nbytes <= boxed.nbytes  # what the hop saves: the padding
    assert np.array_equal(network_batch([boxed], side, pad, 1 / 255.0, color_order)[0], expected)  # batch jobs


def test_float_tensors_and_oversized_items_at_the_runner():
    tensor = np.random.default_rng(1).random((3, 32, 32), dtype=np.float32)
    assert np.array_equal(network_batch([tensor], 32)[0], tensor)  # float tensors (OIP clients) as they are
    with pytest.raises(ValueError, match="larger than"):
        network_batch([np.zeros((33, 10, 3), np.uint8)], 32)


def test_boxes_are_clipped_to_the_image():
    _, meta = letterbox(np.zeros((100, 200, 3), dtype=np.uint8), 64)
    out = boxes_to_original(np.array([[-10, -10, 80, 80]]), meta)
    assert out.min() >= 0 and out[0, 2] <= 200 and out[0, 3] <= 100
