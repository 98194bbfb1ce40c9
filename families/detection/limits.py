"""Request limits of the detection family (serving.yaml `limits.detection`, overridable per deployment): the vision
base's image caps and NMS defaults."""
from __future__ import annotations

from triserve.families.vision.limits import BoxLimits


class Limits(BoxLimits):
    pass
