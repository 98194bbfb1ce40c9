"""Request and response pieces every image family shares (they are part of the OpenAPI contract): the options and
images of its requests (base64 in JSON, bytes from uploads, typed gRPC and OIP), the NMS options of the box families,
one detected box and how a kept box becomes one."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from triserve.kernel.schemas import ModelChoice, deployment_field


class ImageInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    data: str = Field(description="Base64-encoded JPEG/PNG/WebP/BMP/GIF/TIFF bytes (a data: URL prefix is accepted). "
                                  "URLs are not fetched.", min_length=1)


class ImageOptions(BaseModel):
    """The options of every image family's request: which model answers, which deployment."""

    model_config = ConfigDict(extra="forbid")
    model: ModelChoice = Field("auto", description="'auto' (primary, fallback if it fails), 'primary' or 'fallback'.")
    deployment: str | None = deployment_field()


class BoxOptions(ImageOptions):
    """The NMS options of a request to a box family (detection, pose, segmentation), each within its limits."""

    conf_threshold: float | None = Field(None, ge=0.0, le=1.0, description="Minimum score (default from config).")
    iou_threshold: float | None = Field(None, ge=0.0, le=1.0, description="NMS IoU threshold (default from config).")
    max_detections: int | None = Field(None, ge=1, description="Detections (instances) per image (capped by "
                                                               "config).")


class Base64Images(BaseModel):
    """The images of a JSON request (a family's `<Op>Request` = its options + these)."""

    images: list[ImageInput] = Field(min_length=1, description="Images to run (count capped by config).")


class EncodedImages(BaseModel):
    """The same images as encoded bytes: what uploads, typed gRPC and OIP build (a family's `request_model`)."""

    images: list[bytes] = Field(min_length=1, description="Encoded images (count and size capped by config).")


class DetectedBox(BaseModel):
    box: list[float] = Field(description="x1, y1, x2, y2 in original image pixels.", min_length=4, max_length=4)
    score: float
    class_id: int
    label: str


def label_of(labels: Sequence[str], class_id: Any) -> str:
    """The model's name of a class index (the index itself when the labels do not cover it)."""
    index = int(class_id)
    return labels[index] if index < len(labels) else str(index)


def box_fields(box: Sequence[float], score: Any, class_id: Any, labels: Sequence[str]) -> dict[str, Any]:
    """A kept box (original pixels) as the fields of a DetectedBox, rounded as every image family answers."""
    return {"box": [round(float(v), 2) for v in box], "score": round(float(score), 5), "class_id": int(class_id),
            "label": label_of(labels, class_id)}
