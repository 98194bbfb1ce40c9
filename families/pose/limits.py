"""Request limits of the pose family (serving.yaml `limits.pose`, overridable per deployment)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_images: int = Field(8, ge=1, le=64, description="Images per request.")
    max_image_bytes: int = Field(10 * 2**20, ge=1024, description="Encoded bytes per image.")
    max_pixels: int = Field(40_000_000, ge=1, description="width*height cap, checked from the header before decoding.")
    conf_threshold: float = Field(0.25, ge=0, le=1, description="Default confidence threshold of an instance.")
    iou_threshold: float = Field(0.45, ge=0, le=1, description="Default NMS IoU threshold (between instance boxes).")
    pre_nms_topk: int = Field(1000, ge=1, le=100_000, description="Candidates kept before NMS (bounds NMS cost).")
    max_detections: int = Field(100, ge=1, le=1000, description="Default and cap of instances (people) per image.")
    keypoint_visibility: float = Field(
        0.5, ge=0, le=1, description="A keypoint is reported `visible` when its confidence reaches this (ultralytics "
                                     "draws keypoints from 0.5); every keypoint is returned with its confidence.")
