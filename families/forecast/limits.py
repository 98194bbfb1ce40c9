"""Request limits of the forecast family (serving.yaml `limits.forecast`, overridable per deployment)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_points: int = Field(10_000, ge=10, description="History points per series.")
    max_horizon: int = Field(36, ge=1, description="Steps ahead (beyond the model's horizon: 422).")
    max_gap_fraction: float = Field(0.2, ge=0, le=1, description="Share of imputed points above which a series is "
                                                               "refused (422) rather than silently invented.")
