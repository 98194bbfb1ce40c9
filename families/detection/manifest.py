"""What the detection family records in a model's manifest: its preprocessing parameters (models/manifest.py
assembles every family's into the manifest schema)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from triserve.families.vision.manifest import LetterboxPreprocess


class DetectionPreprocess(LetterboxPreprocess):
    """The vision base's letterbox and the head's output format."""

    kind: Literal["detection"] = "detection"
    head: Literal["anchors", "end2end"] = Field(
        "anchors", description="Output format per image: 'anchors' = [4 + classes, anchors] (cx, cy, w, h, class "
                               "scores; YOLOv5u/v8/v9/v11/v12, capped NMS in the service), 'end2end' = [max_det, 6] "
                               "(x1, y1, x2, y2, score, class; NMS-free YOLOv10/YOLO26 heads, no NMS needed).")


Preprocess = DetectionPreprocess
