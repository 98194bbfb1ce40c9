"""Request limits of the text family (serving.yaml `limits.text`, overridable per deployment)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_texts: int = Field(64, ge=1, le=1024, description="Texts per request.")
    max_chars: int = Field(2000, ge=1, le=100_000, description="Characters per text (longer: 422, not truncated).")
    max_top_k: int = Field(10, ge=1, description="Cap on top_k labels returned.")
