"""Request limits of the image classification family (serving.yaml `limits.classification`, overridable per
deployment): the vision base's image caps, more images per request (a crop is small), and the top-k cap."""
from __future__ import annotations

from pydantic import Field

from triserve.families.vision.limits import ImageLimits


class Limits(ImageLimits):
    max_images: int = Field(16, ge=1, le=256, description="Images per request.")
    max_top_k: int = Field(20, ge=1, description="Cap on top_k labels returned per image.")
