"""Request limits of the forecast family (serving.yaml `limits.forecast`, overridable per deployment)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_points: int = Field(10_000, ge=10, description="History points per series (regular steps it spans).")
    max_horizon: int = Field(1_000, ge=1, description="Steps ahead; the model's horizon per frequency caps it too "
                                                      "(beyond either: 422 horizon_too_long).")
    max_gap_fraction: float = Field(0.2, ge=0, le=1, description="Share of imputed points above which a series is "
                                                               "refused (422) rather than silently invented.")
    max_series: int = Field(1_000, ge=1, description="Series per panel request (POST /v1/forecast/panel).")
    max_panel_points: int = Field(1_000_000, ge=10, description="History points over all series of a panel request.")
    max_backtest_origins: int = Field(10, ge=1, description="Rolling origins per backtest request "
                                                            "(POST /v1/forecast/backtest); each is one forecast.")
