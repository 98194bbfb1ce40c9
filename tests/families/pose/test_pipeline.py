"""Bad input is refused with a machine-readable 4xx before anything reaches a runner: the kernel's lifecycle runs the
family's hooks with no serving context at all, so a request that got past validation would fail with an
AttributeError instead."""
from __future__ import annotations

import base64
from functools import partial

import pytest
from pydantic import ValidationError

from tests.families.hooks import refusal
from triserve import families
from triserve.families.pose.limits import Limits
from triserve.families.pose.schemas import PoseRequest, PoseUpload


def test_limits_and_bad_images_are_4xx_before_the_runner(tiny_png_b64):
    _run = partial(refusal, families.family("pose"), Limits(max_images=1, max_image_bytes=1024, max_pixels=100))
    err = _run(PoseRequest(images=[{"data": tiny_png_b64}] * 2))
    assert (err.status, err.code, err.details) == (422, "too_many_images", {"limit": 1, "received": 2})
    err = _run(PoseRequest(images=[{"data": "not base64!"}]))
    assert (err.status, err.code) == (422, "invalid_base64")
    err = _run(PoseUpload(images=[b"x" * 2048]))
    assert (err.status, err.code) == (413, "image_too_large")
    err = _run(PoseUpload(images=[base64.b64decode(tiny_png_b64)]))  # 96x64 > 100 pixels, read from the header
    assert (err.status, err.code) == (422, "image_too_many_pixels")
    err = _run(PoseUpload(images=[b"GIF89a-but-not-really"]))
    assert (err.status, err.code) == (422, "invalid_image")


def test_the_request_schema_refuses_out_of_range_options():
    with pytest.raises(ValidationError):
        PoseRequest(images=[{"data": "eA=="}], conf_threshold=1.5)
    with pytest.raises(ValidationError):
        PoseRequest(images=[])
    with pytest.raises(ValidationError):
        PoseRequest(images=[{"data": "eA=="}], class_aware=False)  # not a pose option (extra fields are refused)
    with pytest.raises(ValidationError):
        Limits(keypoint_visibility=2)


def test_invisible_keypoints_are_reported_with_their_confidence():
    import numpy as np

    from triserve.families.pose.postprocess import to_keypoints

    kps = to_keypoints(np.array([[10.0, 20.0, 0.9], [11.5, 21.25, 0.1], [0.0, 0.0, 0.5]]), ["a", "b", "c"], 0.5)
    assert [(k.name, k.x, k.y, k.confidence, k.visible) for k in kps] == [
        ("a", 10.0, 20.0, 0.9, True), ("b", 11.5, 21.25, 0.1, False), ("c", 0.0, 0.0, 0.5, True)]
    xy = to_keypoints(np.array([[1.0, 2.0]]), ["a"], 0.5)  # a model without keypoint scores
    assert (xy[0].confidence, xy[0].visible) == (None, True)
