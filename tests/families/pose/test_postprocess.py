"""Pose decoding with exact expectations: hand-built heads through the family's NMS and the letterbox inverse."""
from __future__ import annotations

import numpy as np
import pytest

from triserve.families.pose.postprocess import (
    check_pose_head,
    decode_pose,
    keypoints_to_network,
    keypoints_to_original,
    split_head,
)
from triserve.families.vision.letterbox import LetterboxMeta, letterbox
from triserve.families.vision.nms import NMSParams
from triserve.kernel.errors import InvalidOutput

K, DIMS, NC = 3, 3, 1


def head(anchors: int = 8) -> np.ndarray:
    """[4 + 1 + 3 * 3, anchors], every score 0: nobody."""
    return np.zeros((4 + NC + K * DIMS, anchors), np.float32)


def put(raw: np.ndarray, anchor: int, box, score: float, kpts) -> None:
    raw[:4, anchor] = box
    raw[4, anchor] = score
    raw[5:, anchor] = np.asarray(kpts, np.float32).reshape(-1)


def test_an_empty_image_has_nobody():
    poses = decode_pose(head(), NC, (K, DIMS), NMSParams())
    assert len(poses.det.scores) == 0 and poses.keypoints.shape == (0, K, DIMS) and poses.det.candidates == 0


def test_each_kept_box_carries_the_keypoints_of_its_own_anchor():
    raw = head()
    put(raw, 2, [20, 20, 10, 10], 0.9, [[15, 16, 0.9], [25, 26, 0.2], [20, 20, 0.6]])
    put(raw, 5, [40, 40, 10, 10], 0.8, [[35, 36, 0.7], [45, 46, 0.8], [40, 41, 0.1]])
    put(raw, 6, [40.5, 40, 10, 10], 0.7, [[0, 0, 1], [0, 0, 1], [0, 0, 1]])  # suppressed by anchor 5 (IoU 0.9)
    poses = decode_pose(raw, NC, (K, DIMS), NMSParams())
    assert poses.det.anchors.tolist() == [2, 5] and poses.det.candidates == 3
    np.testing.assert_allclose(poses.keypoints[0], [[15, 16, 0.9], [25, 26, 0.2], [20, 20, 0.6]], rtol=0, atol=1e-6)
    np.testing.assert_allclose(poses.keypoints[1], [[35, 36, 0.7], [45, 46, 0.8], [40, 41, 0.1]], rtol=0, atol=1e-6)


def test_the_cap_applies_as_for_detection():
    raw = head(40)
    for a in range(40):  # 40 disjoint people
        put(raw, a, [a * 20 + 5, 5, 8, 8], 0.5 + a / 100, [[a, a, 1]] * K)
    poses = decode_pose(raw, NC, (K, DIMS), NMSParams(max_detections=7, pre_nms_topk=10))
    assert poses.det.candidates == 40 and len(poses.det.scores) == 7
    assert poses.det.anchors.tolist() == list(range(39, 32, -1))  # the best scores first
    assert poses.keypoints[:, 0, 0].tolist() == list(range(39, 32, -1))


def test_keypoints_map_back_through_a_known_letterbox_exactly():
    image = np.zeros((100, 200, 3), np.uint8)  # 200 wide, 100 high -> 64x32 in a 64 square, 16 px bands
    _, meta = letterbox(image, 64)
    assert meta == LetterboxMeta(200, 100, 0.32, 0.32, 0, 16)
    net = np.array([[[0.0, 16.0, 0.9], [32.0, 32.0, 0.4], [64.0, 48.0, 0.1]]])
    orig = keypoints_to_original(net, meta)
    np.testing.assert_array_equal(orig[0, :, :2], [[0.0, 0.0], [100.0, 50.0], [200.0, 100.0]])
    np.testing.assert_array_equal(orig[0, :, 2], net[0, :, 2])  # confidences unchanged
    np.testing.assert_allclose(keypoints_to_network(orig, meta), net, rtol=0, atol=1e-9)


def test_keypoints_in_the_padding_are_clipped_to_the_image_like_ultralytics():
    meta = LetterboxMeta(200, 100, 0.32, 0.32, 0, 16)
    orig = keypoints_to_original(np.array([[[-5.0, 2.0, 0.5], [70.0, 60.0, 0.5]]]), meta)
    np.testing.assert_array_equal(orig[0, :, :2], [[0.0, 0.0], [200.0, 100.0]])


def test_split_head_refuses_a_head_of_another_schema():
    with pytest.raises(ValueError, match=r"4 \+ 1 \+ 17\*3"):
        split_head(head(), NC, (17, 3))


def test_output_sanity():
    check_pose_head(head(), NC, (K, DIMS))
    with pytest.raises(InvalidOutput, match="does not match"):
        check_pose_head(head()[:-1], NC, (K, DIMS))
    bad = head()
    bad[4 + NC + 2, 0] = 1.5  # the first keypoint's confidence
    with pytest.raises(InvalidOutput, match="keypoint confidences"):
        check_pose_head(bad, NC, (K, DIMS))
    bad = head()
    bad[4 + NC, 0] = np.nan
    with pytest.raises(InvalidOutput, match="non-finite"):
        check_pose_head(bad, NC, (K, DIMS))
    xy_only = np.zeros((4 + NC + K * 2, 4), np.float32)
    xy_only[4 + NC] = 300.0  # pixels, not confidences: fine for a 2-dim schema
    check_pose_head(xy_only, NC, (K, 2))


def test_pose_of_the_prefiltered_columns_equals_pose_of_the_whole_head():
    """The runner cuts a pose head like a detection head (families/pose/runtime.compact): the keypoint rows ride
    along with their anchors' columns, so people and keypoints are the same."""
    from triserve.families.pose.postprocess import decode_pose
    from triserve.families.vision.nms import NMSParams, prefilter, runner_keep

    rng = np.random.default_rng(3)
    anchors, k = 3000, 17
    boxes = np.concatenate([rng.uniform(0, 640, (2, anchors)), rng.uniform(10, 200, (2, anchors))])
    person = 1 / (1 + np.exp(-rng.normal(-5, 2.5, (1, anchors))))
    kpts = np.concatenate([rng.uniform(0, 640, (2 * k, anchors)), rng.uniform(0, 1, (k, anchors))])
    raw = np.concatenate([boxes, person, kpts]).astype(np.float32)
    for conf in (0.25, 0.05, 0.6):
        params = NMSParams(conf_threshold=conf)
        keep = runner_keep(params)
        columns, candidates = prefilter(raw, 1, keep["conf"], keep["count_above"], keep["topk"])
        whole, cut = decode_pose(raw, 1, (k, 3), params), decode_pose(columns, 1, (k, 3), params)
        assert candidates == whole.det.candidates and len(whole.det.scores) > 0
        np.testing.assert_array_equal(cut.det.boxes, whole.det.boxes)
        np.testing.assert_array_equal(cut.keypoints, whole.keypoints)
