"""Image classification request/response schemas (they are the OpenAPI contract)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from triserve.families.vision.schemas import Base64Images, EncodedImages, ImageOptions
from triserve.kernel.schemas import ServedBy


class ClassifyImageOptions(ImageOptions):
    top_k: int = Field(5, ge=1, description="Labels returned per image, best first (capped by config).")


class ClassifyImageRequest(ClassifyImageOptions, Base64Images):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"images": [{"data": "<base64 JPEG>"}], "top_k": 5}]})


class ClassifyImageUpload(ClassifyImageOptions, EncodedImages):
    """The same request with the images as encoded bytes: what uploads, typed gRPC and OIP build."""


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
