"""Detection request/response schemas (they are the OpenAPI contract)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kernel.schemas import ModelChoice, ServedBy, deployment_field


class ImageInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    data: str = Field(description="Base64-encoded JPEG/PNG/WebP/BMP/GIF/TIFF bytes (a data: URL prefix is accepted). "
                                  "URLs are not fetched.", min_length=1)


class DetectOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    conf_threshold: float | None = Field(None, ge=0.0, le=1.0, description="Minimum score (default from config).")
    iou_threshold: float | None = Field(None, ge=0.0, le=1.0, description="NMS IoU threshold (default from config).")
    max_detections: int | None = Field(None, ge=1, description="Detections per image (capped by config).")
    class_aware: bool = Field(True, description="Suppress overlaps only within the same class.")
    model: ModelChoice = Field("auto", description="'auto' (primary, fallback if it fails), 'primary' or 'fallback'.")
    deployment: str | None = deployment_field()


class DetectRequest(DetectOptions):
    images: list[ImageInput] = Field(min_length=1, description="Images to run (count capped by config).")

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"images": [{"data": "<base64 PNG>"}], "conf_threshold": 0.25, "max_detections": 50}]})


class DetectUpload(DetectOptions):
    """The same request with the images as encoded bytes: what uploads, typed gRPC and OIP build."""

    images: list[bytes] = Field(min_length=1, description="Encoded images (count and size capped by config).")


class Detection(BaseModel):
    box: list[float] = Field(description="x1, y1, x2, y2 in original image pixels.", min_length=4, max_length=4)
    score: float
    class_id: int
    label: str


class ImageResult(BaseModel):
    width: int
    height: int
    detections: list[Detection]
    candidates: int = Field(description="Anchors above the threshold before the pre-NMS cap.")


class DetectResponse(ServedBy):
    results: list[ImageResult]
