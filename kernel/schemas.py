"""Response parts every task shares."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from triserve.kernel.request_context import Timings

ModelChoice = Literal["auto", "primary", "fallback"]


def deployment_field() -> Any:
    """The `deployment: str | None` field of every family's request model."""
    return Field(None, min_length=1, max_length=63,
                 description="Deployment to run (GET /v1/models lists them); default: the family's default.")


class ModelInfo(BaseModel):
    name: str = Field(description="Registry model name that produced the result.")
    version: str = Field(description="Immutable registry version.")


class ServedBy(BaseModel):
    """Common envelope fields of every successful response."""

    request_id: str = Field(description="Echo of X-Request-ID, or a generated id (also in the response header).")
    deployment: str = Field(description="The deployment that answered.")
    model: ModelInfo
    degraded: bool = Field(description="True when a fallback model answered instead of the primary.")
    degraded_reason: str | None = Field(None, description="Why: 'requested', 'primary_failed', ...")
    timings: Timings
