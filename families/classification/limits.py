"""Request limits of the image classification family (serving.yaml `limits.classification`, overridable per
deployment). The image caps are the fields families/detection/decode.decode_images reads."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_images: int = Field(16, ge=1, le=256, description="Images per request.")
    max_image_bytes: int = Field(10 * 2**20, ge=1024, description="Encoded bytes per image.")
    max_pixels: int = Field(40_000_000, ge=1, description="width*height cap, checked from the header before decoding.")
    max_top_k: int = Field(20, ge=1, description="Cap on top_k labels returned per image.")
