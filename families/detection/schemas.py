"""Detection request/response schemas (they are the OpenAPI contract)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from families.vision.schemas import BoxOptions, DetectedBox, ImageInput
from kernel.schemas import ModelChoice, ServedBy, deployment_field


class DetectOptions(BoxOptions):
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


class Detection(DetectedBox):
    """One detected object."""


class ImageResult(BaseModel):
    width: int
    height: int
    detections: list[Detection]
    candidates: int = Field(description="Anchors above the threshold before the pre-NMS cap.")


class DetectResponse(ServedBy):
    results: list[ImageResult]
