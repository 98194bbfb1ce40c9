"""Request limits every image family shares (its `Limits` extends one of these; pydantic only, no project imports
beyond this package, so configs can validate them). The image caps are what families/vision/decode.decode_images
reads, the box limits what families/vision/nms.request_nms reads."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ImageLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_images: int = Field(8, ge=1, le=64, description="Images per request.")
    max_image_bytes: int = Field(10 * 2**20, ge=1024, description="Encoded bytes per image.")
    max_pixels: int = Field(40_000_000, ge=1, description="width*height cap, checked from the header before decoding.")


class BoxLimits(ImageLimits):
    """The limits of a family whose head goes through capped NMS (detection, pose, segmentation)."""

    conf_threshold: float = Field(0.25, ge=0, le=1, description="Default confidence threshold.")
    iou_threshold: float = Field(0.45, ge=0, le=1, description="Default NMS IoU threshold.")
    pre_nms_topk: int = Field(1000, ge=1, le=100_000, description="Candidates kept before NMS (bounds NMS cost).")
    max_detections: int = Field(100, ge=1, le=1000, description="Default and cap of detections (instances) per "
                                                                "image.")
