"""The keypoint half of the ultralytics cross-check, on hand-made answers: a visible keypoint 3 px away refuses the
import, an invisible one is not held to the bar, and a box mismatch refuses as for detection."""
from __future__ import annotations

import numpy as np

from triserve.families.pose.importers.run import PoseDets
from triserve.families.pose.importers.verify import compare_poses
from triserve.models.importing.agreement import Dets


def person(dx: float = 0.0, kp_dx: float = 0.0, conf=(0.9, 0.2)) -> PoseDets:
    box = np.array([[10.0 + dx, 10.0, 50.0 + dx, 90.0]])
    kpts = np.array([[[20.0 + kp_dx, 20.0, conf[0]], [30.0 + kp_dx, 40.0, conf[1]]]])
    return PoseDets(Dets(box, np.array([0.8], np.float32), np.array([0])), kpts)


def test_identical_answers_pass():
    check = compare_poses([person()], [person()], ["a"], nc=1)
    assert check.passed and check.keypoints_checked == 1 and check.max_keypoint_px == 0.0
    assert check.per_image[0]["keypoints_checked"] == check.per_image[0]["keypoints_within"] == 1


def test_a_visible_keypoint_off_by_3px_refuses():
    check = compare_poses([person()], [person(kp_dx=3.0)], ["a"], nc=1)
    assert not check.passed and check.max_keypoint_px == 3.0
    assert (check.per_image[0]["keypoints_checked"], check.per_image[0]["keypoints_within"]) == (1, 0)
    assert "3.00 px" in check.describe()


def test_an_invisible_keypoint_is_not_held_to_the_distance_bar():
    ref = person(conf=(0.9, 0.2))
    got = PoseDets(ref.dets, ref.keypoints.copy())
    got.keypoints[0, 1, 0] += 10  # the second keypoint (confidence 0.2) moves 10 px
    check = compare_poses([ref], [got], ["a"], nc=1)
    assert check.passed and check.keypoints_checked == 1


def test_a_box_mismatch_refuses():
    check = compare_poses([person()], [person(dx=8.0)], ["a"], nc=1)  # IoU 0.67 < 0.9
    assert not check.passed and check.agreement.matched == 0
