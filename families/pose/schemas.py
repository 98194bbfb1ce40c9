"""Pose request/response schemas (they are the OpenAPI contract): the vision base's images, NMS options and boxes, plus
keypoints per person."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from triserve.families.vision.schemas import Base64Images, BoxOptions, DetectedBox, EncodedImages
from triserve.kernel.schemas import ServedBy


class PoseOptions(BoxOptions):
    """The model and deployment, and the NMS options of the instance boxes (class-aware, as ultralytics runs it)."""


class PoseRequest(PoseOptions, Base64Images):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"images": [{"data": "<base64 JPEG>"}], "conf_threshold": 0.25, "max_detections": 20}]})


class PoseUpload(PoseOptions, EncodedImages):
    """The same request with the images as encoded bytes: what uploads, typed gRPC and OIP build."""


class Keypoint(BaseModel):
    name: str
    x: float = Field(description="Original image pixels (clipped to the image).")
    y: float = Field(description="Original image pixels (clipped to the image).")
    confidence: float | None = Field(description="The model's visibility/presence score in [0, 1] (None for "
                                                 "models whose keypoints carry no score).")
    visible: bool = Field(description="confidence >= limits.keypoint_visibility (always true without a score).")


class Person(DetectedBox):
    """One instance: its box, score and class (ultralytics pose models are usually 'person') and its keypoints."""

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
