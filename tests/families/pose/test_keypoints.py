"""Which names a model's keypoints get: metadata, COCO-17 only for COCO's own shape and class, else indices."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from triserve.families.pose.keypoints import COCO_KEYPOINTS, COCO_SKELETON, keypoint_schema
from triserve.families.pose.manifest import PosePreprocess


def test_coco_names_only_for_17x3_keypoints_of_the_coco_person_class():
    s = keypoint_schema([17, 3], ["person"])
    assert s["names_from"] == "coco-17" and s["keypoint_names"] == list(COCO_KEYPOINTS)
    assert s["skeleton"] == [list(e) for e in COCO_SKELETON] and len(s["skeleton"]) == 19
    assert s["flip_idx"][1:3] == [2, 1]  # left eye <-> right eye
    for shape, labels in (([17, 2], ["person"]), ([17, 3], ["hand"]), ([17, 3], ["person", "dog"]),
                          ([21, 3], ["person"])):
        other = keypoint_schema(shape, labels)
        assert other["names_from"] == "index" and other["skeleton"] == [] and other["flip_idx"] is None
        assert other["keypoint_names"] == [f"kp{i}" for i in range(shape[0])]


def test_metadata_names_win_and_are_checked():
    names = ["tip", "knuckle", "wrist"]
    s = keypoint_schema([3, 3], ["hand"], {0: names})
    assert s["names_from"] == "metadata" and s["keypoint_names"] == names and s["skeleton"] == []
    assert keypoint_schema([3, 2], ["hand"], names)["keypoint_names"] == names
    with pytest.raises(ValueError, match="2 names for 3"):
        keypoint_schema([3, 3], ["hand"], {0: names[:2]})
    with pytest.raises(ValueError, match="differ between classes"):
        keypoint_schema([3, 3], ["a", "b"], {0: names, 1: names[::-1]})
    with pytest.raises(ValueError, match="kpt_shape"):
        keypoint_schema([3, 4], ["hand"])


def test_the_manifest_record_is_consistent():
    pre = PosePreprocess(imgsz=64, **keypoint_schema([17, 3], ["person"]))
    assert pre.channels == 51 and pre.keypoint_schema()["keypoint_names"][0] == "nose"
    with pytest.raises(ValidationError, match="keypoint names"):
        PosePreprocess(imgsz=64, kpt_shape=(3, 3), keypoint_names=["a"], names_from="index")
    with pytest.raises(ValidationError, match="skeleton"):
        PosePreprocess(imgsz=64, kpt_shape=(2, 3), keypoint_names=["a", "b"], skeleton=[(0, 2)], names_from="index")
