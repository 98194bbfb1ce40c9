"""The answer of POST /v1/forecast/backtest (TriserveClient.forecast_backtest): the service's forecaster judged on
the caller's own series over rolling origins (docs/families/forecast.md, "Backtest")."""
from __future__ import annotations

from datetime import datetime

from pydantic import Field

from triserve_client.models import Answer, ForecastPoint, ServedBy


class BacktestOrigin(Answer):
    origin: datetime = Field(description="The first forecast step of this origin (UTC).")
    method: str = Field(description="The method the service chose at this origin.")
    mase: float | None = Field(None, description="Mean absolute error / the history's naive (lag 1) mean absolute "
                                                 "error.")
    rmsse: float | None = Field(None, description="Root mean squared error / the naive step's root mean square.")
    actual: list[float] = Field(description="What happened at each step.")
    forecast: list[ForecastPoint] = Field(description="What the service forecast from this origin.")


class BacktestResponse(ServedBy):
    frequency: str
    horizon: int
    runner_calls: int = Field(description="Runner calls the backtest took.")
    mase: float | None = Field(None, description="Mean scaled absolute error over origins and steps (below 1 beats "
                                                 "naive).")
    rmsse: float | None = Field(None, description="Root mean scaled squared error over origins and steps.")
    mase_by_step: list[float | None] = Field(description="MASE per step ahead, over the origins.")
    rmsse_by_step: list[float | None] = Field(description="RMSSE per step ahead, over the origins.")
    coverage_50: float | None = Field(None, description="Share of actual points inside the 50 % interval (ideal "
                                                        "0.5).")
    coverage_90: float | None = Field(None, description="Share inside the 90 % interval (ideal 0.9).")
    origins: list[BacktestOrigin] = Field(description="Each origin, oldest first.")

