"""Text classification request/response schemas."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from triserve.kernel.schemas import ModelChoice, ServedBy, deployment_field


class ClassifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"texts": ["what is my account balance", "book me a flight to Paris"], "top_k": 3}]})
    texts: list[str] = Field(min_length=1, description="Texts to classify (count capped by config; blank texts are "
                                                        "refused; over-long texts are truncated and flagged, up to a "
                                                        "hard length limit).")
    top_k: int = Field(3, ge=1, description="Labels returned per text, best first (capped by config).")
    model: ModelChoice = Field("auto", description="'auto' (primary, fallback if it fails), 'primary' or 'fallback'.")
    deployment: str | None = deployment_field()


class LabelScore(BaseModel):
    label: str
    score: float = Field(description="Softmax probability.")


class TextResult(BaseModel):
    label: str = Field(description="Top-1 intent.")
    score: float
    top_k: list[LabelScore]
    tokens: int = Field(description="Tokens used (after truncation to the model's max length).")
    truncated: bool = Field(description="True when the text was cut before classification: beyond limits.text."
                                        "max_chars characters, or beyond the model's max length in tokens.")
    chars: int = Field(description="Characters of the text as received (before cleaning and truncation).")


class ClassifyResponse(ServedBy):
    results: list[TextResult]
