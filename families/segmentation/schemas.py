"""Segmentation request/response schemas (the OpenAPI contract): the vision base's images, NMS options and boxes, plus
masks per instance."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from triserve.families.segmentation.limits import MaskFormat
from triserve.families.vision.schemas import Base64Images, BoxOptions, DetectedBox, EncodedImages
from triserve.kernel.schemas import ServedBy


class SegmentOptions(BoxOptions):
    class_aware: bool = Field(True, description="Suppress overlaps only within the same class.")
    mask_format: MaskFormat | None = Field(None, description="'rle' (COCO RLE), 'polygons' or 'both' (default from "
                                                             "config: rle).")


class SegmentRequest(SegmentOptions, Base64Images):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"images": [{"data": "<base64 PNG>"}], "conf_threshold": 0.25, "mask_format": "rle"}]})


class SegmentUpload(SegmentOptions, EncodedImages):
    """The same request with the images as encoded bytes: what uploads, typed gRPC and OIP build."""


class RLE(BaseModel):
    """COCO run-length encoding, as pycocotools.mask.encode returns it (counts decoded to text): decode with
    pycocotools.mask.decode({'size': size, 'counts': counts}) or any COCO tool."""

    size: list[int] = Field(description="[height, width] of the original image.", min_length=2, max_length=2)
    counts: str = Field(description="Compressed column-major run lengths (pycocotools' string format).")


class Polygon(BaseModel):
    points: list[float] = Field(description="x1, y1, x2, y2, ... in original image pixels (COCO's polygon list).")


class Instance(DetectedBox):
    area: int = Field(description="Mask pixels (0 when the mask was skipped).")
    mask_skipped: bool = Field(False, description="No mask: the image's mask run budget (limits.max_mask_runs, "
                                                  "spent in score order) did not cover this instance's mask.")
    rle: RLE | None = Field(None, description="The mask (mask_format 'rle' or 'both').")
    polygons: list[Polygon] | None = Field(
        None, description="The mask's outer contours in original pixels, largest first (mask_format 'polygons' or "
                          "'both').")


class ImageResult(BaseModel):
    width: int
    height: int
    instances: list[Instance]
    candidates: int = Field(description="Anchors above the threshold before the pre-NMS cap.")
    masks_skipped: int = Field(0, description="Instances returned without a mask (see Instance.mask_skipped).")


class SegmentResponse(ServedBy):
    results: list[ImageResult]
