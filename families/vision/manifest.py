"""What every image family records in a model's manifest about its input: the fields its family's `Preprocess` record
extends (each adds `kind` = the family name and its own fields; models/manifest.py discriminates on `kind`)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ImagePreprocess(BaseModel):
    """The square network input: its side, padding grey, pixel scale, colour order and layout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    imgsz: int = Field(gt=0, description="Square network input side in pixels.")
    pad_value: int = Field(114, ge=0, le=255, description="Grey level of the padding.")
    scale: float = Field(1 / 255.0, gt=0, description="Multiplier applied to uint8 pixels.")
    color_order: Literal["RGB", "BGR"] = Field("RGB", description="Channel order the network expects.")
    layout: Literal["NCHW"] = "NCHW"


class LetterboxPreprocess(ImagePreprocess):
    """Letterbox parameters (families/vision/letterbox.py is the implementation): YOLO detection, pose and
    segmentation heads see the image this way."""

    letterbox: bool = Field(True, description="Keep aspect ratio and pad (centered) instead of stretching.")
