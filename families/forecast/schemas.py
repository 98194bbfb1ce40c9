"""Forecasting request/response schemas."""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.common.schemas import DEPLOYMENT_FIELD, ModelChoice, ServedBy

Frequency = Literal["MS", "W", "D", "h", "min"]


class ForecastRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"values": [315.4, 316.2, 316.9], "start": "1990-01-01T00:00:00", "frequency": "MS", "horizon": 12}]})
    values: list[float | None] = Field(min_length=1, description="Observations; null or NaN marks a missing point.")
    timestamps: list[datetime] | None = Field(None, description="One per value, any order (sorted server-side). "
                                                                "Offsets are converted to UTC; naive times are UTC. "
                                                                "Omit to use start + frequency.")
    start: datetime | None = Field(None, description="Timestamp of values[0] when timestamps are omitted.")
    frequency: Frequency = Field("MS", description="MS (month start), W, D, h or min.")
    horizon: int = Field(12, ge=1, description="Steps to forecast (capped by the model horizon and config).")
    model: ModelChoice = Field("auto", description="'auto' (primary, fallback if it fails), 'primary' or 'fallback'.")
    deployment: str | None = Field(**DEPLOYMENT_FIELD)

    @model_validator(mode="after")
    def _one_time_axis(self) -> "ForecastRequest":
        if (self.timestamps is None) == (self.start is None):
            raise ValueError("give exactly one of 'timestamps' or 'start'")
        return self


class ForecastPoint(BaseModel):
    timestamp: datetime = Field(description="UTC, RFC 3339.")
    mean: float
    lower_50: float
    upper_50: float
    lower_90: float
    upper_90: float


class InputReport(BaseModel):
    sorted: bool = Field(description="True if points arrived out of order and were sorted.")
    duplicates_merged: int = Field(description="Extra points in an already occupied bucket (averaged).")
    imputed: int = Field(description="Missing or null points filled by linear interpolation.")
    points: int = Field(description="Regular points after regularisation.")
    used: int = Field(description="Points the model read (its context window).")


class ForecastResponse(ServedBy):
    forecast: list[ForecastPoint]
    input: InputReport
