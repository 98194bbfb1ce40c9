"""Pose request/response schemas (they are the OpenAPI contract). Images come in as for detection."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from families.detection.schemas import ImageInput
from kernel.schemas import ModelChoice, ServedBy, deployment_field


class PoseOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    conf_threshold: float | None = Field(None, ge=0.0, le=1.0, description="Minimum instance score (default from "
                                                                           "config).")
    iou_threshold: float | None = Field(None, ge=0.0, le=1.0, description="NMS IoU threshold (default from config).")
    max_detections: int | None = Field(None, ge=1, description="Instances per image (capped by config).")
    model: ModelChoice = Field("auto", description="'auto' (primary, fallback if it fails), 'primary' or 'fallback'.")
    deployment: str | None = deployment_field()


class PoseRequest(PoseOptions):
    images: list[ImageInput] = Field(min_length=1, description="Images to run (count capped by config).")

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"images": [{"data": "<base64 JPEG>"}], "conf_threshold": 0.25, "max_detections": 20}]})


class PoseUpload(PoseOptions):
    """The same request with the images as encoded bytes: what uploads, typed gRPC and OIP build."""

    images: list[bytes] = Field(min_length=1, description="Encoded images (count and size capped by config).")


class Keypoint(BaseModel):
    name: str
    x: float = Field(description="Original image pixels (clipped to the image).")
    y: float = Field(description="Original image pixels (clipped to the image).")
    confidence: float | None = Field(description="The model's visibility/presence score in [0, 1] (None for "
                                                 "models whose keypoints carry no score).")
    visible: bool = Field(description="confidence >= limits.keypoint_visibility (always true without a score).")


class Person(BaseModel):
    """One instance: its box, score and class (ultralytics pose models are usually 'person') and its keypoints."""

    box: list[float] = Field(description="x1, y1, x2, y2 in original image pixels.", min_length=4, max_length=4)
    score: float
    class_id: int
    label: str
    keypoints: list[Keypoint]


class PoseImageResult(BaseModel):
    width: int
    height: int
    people: list[Person]
    candidates: int = Field(description="Anchors above the threshold before the pre-NMS cap.")


class Bone(BaseModel):
    """A skeleton edge: two keypoint indices a client joins with a line."""

    start: int
    end: int


class PoseResponse(ServedBy):
    keypoint_names: list[str] = Field(description="The model's keypoints, in the order of every person's list.")
    skeleton: list[Bone] = Field(description="Edges between keypoint indices (empty when the model's schema has "
                                             "none).")
    results: list[PoseImageResult]
