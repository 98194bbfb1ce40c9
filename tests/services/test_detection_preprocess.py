import numpy as np
import pytest

from families.detection.preprocess import (
    boxes_to_network,
    boxes_to_original,
    letterbox,
    network_input,
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
def test_runner_input_from_uint8_letterbox_equals_the_gateway_side_tensor(color_order):
    """The gateway ships uint8 letterboxes; the runner's tensor must be the one preprocess_image would have made."""
    img = np.random.default_rng(0).integers(0, 256, (90, 160, 3), dtype=np.uint8)
    expected, _ = preprocess_image(img, 64, scale=1 / 255.0, color_order=color_order)
    boxed, _ = letterbox(img, 64)
    got = network_input(boxed, 1 / 255.0, color_order)
    assert got.dtype == np.float32 and got.shape == (3, 64, 64)
    assert np.array_equal(got, expected)
    assert boxed.nbytes * 4 == expected.nbytes  # what the hop saves
    assert np.array_equal(network_input(expected), expected)  # float tensors (OIP clients) pass unchanged


def test_boxes_are_clipped_to_the_image():
    _, meta = letterbox(np.zeros((100, 200, 3), dtype=np.uint8), 64)
    out = boxes_to_original(np.array([[-10, -10, 80, 80]]), meta)
    assert out.min() >= 0 and out[0, 2] <= 200 and out[0, 3] <= 100
