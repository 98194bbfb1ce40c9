"""What the detection family records in a model's manifest: its preprocessing parameters (models/manifest.py
assembles every family's into the manifest schema)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class DetectionPreprocess(BaseModel):
    """Letterbox parameters (families/detection/preprocess.py is the implementation)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["detection"] = "detection"
    imgsz: int = Field(gt=0, description="Square network input side in pixels.")
    letterbox: bool = Field(True, description="Keep aspect ratio and pad (centered) instead of stretching.")
    pad_value: int = Field(114, ge=0, le=255, description="Grey level of the padding.")
    color_order: Literal["RGB", "BGR"] = Field("RGB", description="Channel order the network expects.")
    scale: float = Field(1 / 255.0, description="Multiplier applied to uint8 pixels (no mean/std).")
    layout: Literal["NCHW"] = "NCHW"
    head: Literal["anchors", "end2end"] = Field(
        "anchors", description="Output format per image: 'anchors' = [4 + classes, anchors] (cx, cy, w, h, class "
                               "scores; YOLOv5u/v8/v9/v11/v12, capped NMS in the service), 'end2end' = [max_det, 6] "
                               "(x1, y1, x2, y2, score, class; NMS-free YOLOv10/YOLO26 heads, no NMS needed).")


Preprocess = DetectionPreprocess
