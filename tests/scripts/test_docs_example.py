"""scripts/docs_example.py: the drawing, on answers made here (the real run needs the default models and a server):
boxes, keypoints and the skeleton land where the answers put them, masks are decoded from their RLE and laid over
translucent, and the file stays under its size cap."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from scripts import docs_example as de
from triserve.families.segmentation import rle as server_rle
from triserve_client.models import DetectResponse, PoseResponse, SegmentResponse


@pytest.fixture(autouse=True)
def panel_height(monkeypatch):
    monkeypatch.setattr(de, "PANEL_HEIGHT", 540)  # the arithmetic below; the script's own is smaller


ENVELOPE = {"request_id": "r", "deployment": "d", "model": {"name": "m", "version": "1"}, "degraded": False}


def photo(tmp_path, w=400, h=300):
    path = tmp_path / "grey.png"
    Image.new("RGB", (w, h), (128, 128, 128)).save(path)
    return path


def test_detection_and_pose_are_drawn_where_the_answer_says(tmp_path):
    path = photo(tmp_path)  # scaled to the panel height 540: factor 1.8
    det = DetectResponse(**ENVELOPE, results=[{"width": 400, "height": 300, "candidates": 1, "detections": [
        {"box": [100, 100, 200, 250], "score": 0.9, "class_id": 5, "label": "bus"}]}])
    panel = np.asarray(de.detection_panel(path, det))
    assert panel.shape == (540, 720, 3)
    assert tuple(panel[300, 180]) == de.colour(5) and tuple(panel[300, 300]) == (128, 128, 128)  # edge, inside
    kp = [{"name": n, "x": x, "y": y, "confidence": 0.9, "visible": v}
          for n, x, y, v in (("a", 50, 50, True), ("b", 150, 50, True), ("c", 300, 250, False))]
    pose = PoseResponse(**ENVELOPE, keypoint_names=["a", "b", "c"], skeleton=[{"start": 0, "end": 1},
                                                                              {"start": 1, "end": 2}],
                        results=[{"width": 400, "height": 300, "candidates": 1, "people": [
                            {"box": [10, 10, 390, 290], "score": 0.8, "class_id": 0, "label": "person",
                             "keypoints": kp}]}])
    panel = np.asarray(de.pose_panel(path, pose))
    assert tuple(panel[90, 180]) == de.colour(3)  # on the a-b bone, between the two keypoints
    assert tuple(panel[90, 90]) == (255, 255, 255)  # keypoint a
    assert tuple(panel[int(250 * 1.8), int(300 * 1.8)]) == (128, 128, 128)  # c is not visible: neither it nor b-c


def test_masks_are_decoded_and_laid_over_translucent(tmp_path):
    path = photo(tmp_path, 800, 600)  # scaled 0.9
    mask = np.zeros((600, 800), bool)
    mask[400:430, 500:580] = True
    counts = server_rle.counts_to_strings([server_rle.mask_counts(mask)])[0]
    seg = SegmentResponse(**ENVELOPE, results=[{"width": 800, "height": 600, "candidates": 1, "instances": [
        {"box": [500, 400, 580, 430], "score": 0.7, "class_id": 0, "label": "plate", "area": int(mask.sum()),
         "rle": {"size": [600, 800], "counts": counts}}]}])
    panel = de.segmentation_panel(Image.open(path), seg)
    assert panel.size == (720, 540)
    px = np.asarray(panel)[int(415 * 0.9), int(540 * 0.9)]  # the mask's centre: half grey, half its colour
    expected = 0.5 * 128 + 0.5 * np.array(de.colour(7))
    assert np.abs(px - expected).max() <= 2, (px, expected)
    assert tuple(np.asarray(panel)[int(300 * 0.9), int(540 * 0.9)]) == (128, 128, 128)  # outside: untouched


def test_the_composed_image_is_saved_under_the_cap(tmp_path):
    rng = np.random.default_rng(0)
    noisy = Image.fromarray(rng.integers(0, 255, (540, 900, 3), dtype=np.uint8))  # incompressible in full colour
    out = de.compose([("one", noisy), ("two", noisy)])
    assert out.size == (1808, 570)
    size = de.save(out, tmp_path / "x.png")
    assert size == (tmp_path / "x.png").stat().st_size and Image.open(tmp_path / "x.png").size == (1808, 570)
    assert size < 2 * 540 * 900 * 3 / 2  # quantised: well below the full-colour bytes
