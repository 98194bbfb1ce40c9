"""Image classification request/response schemas (they are the OpenAPI contract)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from families.vision.schemas import ImageInput
from kernel.schemas import ModelChoice, ServedBy, deployment_field


class ClassifyImageOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    top_k: int = Field(5, ge=1, description="Labels returned per image, best first (capped by config).")
    model: ModelChoice = Field("auto", description="'auto' (primary, fallback if it fails), 'primary' or 'fallback'.")
    deployment: str | None = deployment_field()


class ClassifyImageRequest(ClassifyImageOptions):
    images: list[ImageInput] = Field(min_length=1, description="Images to classify (count capped by config).")

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"images": [{"data": "<base64 JPEG>"}], "top_k": 5}]})


class ClassifyImageUpload(ClassifyImageOptions):
    """The same request with the images as encoded bytes: what uploads, typed gRPC and OIP build."""

    images: list[bytes] = Field(min_length=1, description="Encoded images (count and size capped by config).")


class ClassScore(BaseModel):
    class_id: int = Field(description="Index of the class in the model's labels.")
    label: str
    score: float = Field(description="Probability (softmax over the model's classes).")


class ClassifiedImage(BaseModel):
    width: int = Field(description="Original image width in pixels.")
    height: int = Field(description="Original image height in pixels.")
    label: str = Field(description="Top-1 class.")
    score: float
    top_k: list[ClassScore]


class ClassifyImageResponse(ServedBy):
    results: list[ClassifiedImage]
