"""Request limits of the pose family (serving.yaml `limits.pose`, overridable per deployment): the vision base's image
caps and NMS defaults (between instance boxes), and when a keypoint counts as visible."""
from __future__ import annotations

from pydantic import Field

from triserve.families.vision.limits import BoxLimits


class Limits(BoxLimits):
    keypoint_visibility: float = Field(
        0.5, ge=0, le=1, description="A keypoint is reported `visible` when its confidence reaches this (ultralytics "
                                     "draws keypoints from 0.5); every keypoint is returned with its confidence.")
