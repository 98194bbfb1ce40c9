"""Detection request/response schemas (they are the OpenAPI contract)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from triserve.families.vision.schemas import Base64Images, BoxOptions, DetectedBox, EncodedImages
from triserve.kernel.schemas import ServedBy


class DetectOptions(BoxOptions):
    class_aware: bool = Field(True, description="Suppress overlaps only within the same class.")


class DetectRequest(DetectOptions, Base64Images):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"images": [{"data": "<base64 PNG>"}], "conf_threshold": 0.25, "max_detections": 50}]})


class DetectUpload(DetectOptions, EncodedImages):
    """The same request with the images as encoded bytes: what uploads, typed gRPC and OIP build."""


class Detection(DetectedBox):
    """One detected object."""


class ImageResult(BaseModel):
    width: int
    height: int
    detections: list[Detection]
    candidates: int = Field(description="Anchors above the threshold before the pre-NMS cap.")


class DetectResponse(ServedBy):
    results: list[ImageResult]
