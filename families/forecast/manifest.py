"""What the forecast family records in a model's manifest: its preprocessing parameters (models/manifest.py
assembles every family's into the manifest schema)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ForecastPreprocess(BaseModel):
    """Windowing and scaling parameters (families/forecast/preprocess.py is the implementation)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["forecast"] = "forecast"
    context: int = Field(gt=0, description="Points in the model's input window, ending at the last observation.")
    horizon: int = Field(gt=0, description="Points the model predicts after the window.")
    frequency: str = Field(description="Pandas-style frequency of the training series, e.g. 'MS'.")
    season_length: int = Field(gt=0, description="Seasonal period in points (12 for monthly data).")
    scale: float = Field(gt=0, description="Global scale: window values are (x - window_mean) / scale.")
    train_mean: float = Field(description="Mean of the training series (reference level for drift checks).")
    interval_quantiles: dict[str, list[float]] = Field(
        default_factory=dict,
        description="Validation residual quantiles per horizon step in original units, keyed by quantile ('0.05').",
    )


Preprocess = ForecastPreprocess
