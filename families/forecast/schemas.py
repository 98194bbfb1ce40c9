"""Forecasting request/response schemas."""
from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from triserve.kernel.schemas import ModelChoice, ModelInfo, ServedBy, deployment_field

Frequency = Literal["YS", "QS", "MS", "W", "D", "h", "30min", "15min", "min"]
CalendarFeature = str  # 'weekday', 'month', 'holidays:<CC>[-<SUB>]' (checked by calendar_features)
CALENDAR_FEATURE = re.compile(r"^(weekday|month|holidays:[A-Za-z]{2,3}(-[A-Za-z0-9]{1,10})?)$")
CALENDAR_HELP = ("Calendar regressors made from the timestamps: 'weekday' (6 dummies), 'month' (11 dummies), "
                 "'holidays:<CC>' or 'holidays:<CC>-<SUBDIVISION>' (ISO 3166 codes, e.g. 'holidays:US', "
                 "'holidays:DE-BY': the public holidays in each step, from the `holidays` package).")
Covariates = dict[str, list[float | None]]


def calendar_features(features: list[str] | None) -> list[str] | None:
    """A request's calendar: each feature one of the three forms (which country codes exist: public_holidays.py)."""
    bad = [f for f in features or () if not CALENDAR_FEATURE.match(f)]
    if bad:
        raise ValueError(f"unknown calendar feature(s) {bad}: use 'weekday', 'month' or 'holidays:<CC>[-<SUB>]'")
    return features


def covariates_field() -> Any:
    return Field(None, description="Known-future numeric regressors over the history: name -> one value per point of "
                                   "'values' (same order). Each needs the same name in 'future_covariates'.")


def future_covariates_field() -> Any:
    return Field(None, description="The same regressors over the forecast: name -> one value per step ahead (at "
                                   "least the horizon).")


class ForecastRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"values": [315.4, 316.2, 316.9, 317.8, 318.1, 317.5], "start": "1990-01-01T00:00:00", "frequency": "MS",
         "horizon": 12},
        {"values": [51230.5, 50871.0, 49990.2],
         "timestamps": ["2026-11-30T00:00:00Z", "2026-11-30T01:00:00Z", "2026-11-30T02:00:00Z"]}]})
    values: list[float | None] = Field(min_length=1, description="Observations at any finite scale; null or NaN "
                                                                 "marks a missing point.")
    timestamps: list[datetime] | None = Field(None, description="One per value, any order (sorted server-side). "
                                                                "Offsets are converted to UTC; naive times are UTC. "
                                                                "Omit to use start + frequency.")
    start: datetime | None = Field(None, description="Timestamp of values[0] when timestamps are omitted.")
    frequency: Frequency | None = Field(
        None, description="YS (year start), QS (quarter start), MS (month start), W, D, h, 30min, 15min or min. "
                          "Omitted: inferred from the timestamps (median spacing).")
    horizon: int | None = Field(None, ge=1, description="Steps to forecast; default and maximum: the model's "
                                                         "horizon for the frequency (e.g. 24 months, 48 hours).")
    model: ModelChoice = Field("auto", description="'auto' (primary, fallback if it fails), 'primary' or 'fallback'.")
    deployment: str | None = deployment_field()
    covariates: Covariates | None = covariates_field()
    future_covariates: Covariates | None = future_covariates_field()
    calendar: list[CalendarFeature] | None = Field(None, description=CALENDAR_HELP)
    _calendar = field_validator("calendar")(calendar_features)

    @model_validator(mode="after")
    def _one_time_axis(self) -> ForecastRequest:
        if (self.timestamps is None) == (self.start is None):
            raise ValueError("give exactly one of 'timestamps' or 'start'")
        if self.start is not None and self.frequency is None:
            raise ValueError("'start' needs a 'frequency' (it can only be inferred from timestamps)")
        return self


MAX_STATICS = 16


def static_categoricals(given: dict[str, str] | None) -> dict[str, str] | None:
    """Names of 1-64 characters, categories of 1-256."""
    bad = [k for k, v in (given or {}).items() if not (0 < len(k) <= 64 and 0 < len(v) <= 256)]
    if bad:
        raise ValueError(f"static categorical(s) {bad}: names need 1-64 characters, categories 1-256")
    return given


class SeriesInput(BaseModel):
    """One series of a panel: its id and its points (the panel's frequency and horizon apply)."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=256, description="The series' id, echoed in its answer (unique).")
    values: list[float | None] = Field(min_length=1, description="Observations; null or NaN marks a missing point.")
    timestamps: list[datetime] | None = Field(None, description="One per value, any order; omit to use start.")
    start: datetime | None = Field(None, description="Timestamp of values[0] when timestamps are omitted.")
    covariates: Covariates | None = covariates_field()
    future_covariates: Covariates | None = future_covariates_field()
    static: dict[str, str] | None = Field(
        None, max_length=MAX_STATICS,
        description="Static categoricals of this series (name -> category, e.g. {'store_type': 'A'}); when one "
                    "series has them, every series of the panel must give the same names. Series sharing a "
                    "category pool their methods' backtest scores where the panel's backtest says it helps "
                    "(input.static reports it).")
    _static = field_validator("static")(static_categoricals)

    @model_validator(mode="after")
    def _one_time_axis(self) -> SeriesInput:
        if (self.timestamps is None) == (self.start is None):
            raise ValueError("give exactly one of 'timestamps' or 'start'")
        return self


class PanelForecastRequest(BaseModel):
    """Many series in one request (POST /v1/forecast/panel): one call for a client with 1,000 series."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"series": [{"id": "sku-1", "values": [10, 20, 30, 40], "start": "2026-01-01T00:00:00"},
                    {"id": "sku-2", "values": [5, 5, 6, 5], "start": "2026-01-01T00:00:00"}],
         "frequency": "D", "horizon": 7}]})
    series: list[SeriesInput] = Field(min_length=1, description="The series (count and total points capped by "
                                                                "limits.forecast.max_series / max_panel_points).")
    frequency: Frequency | None = Field(None, description="Shared by every series; omitted: inferred per series "
                                                          "from its timestamps.")
    horizon: int | None = Field(None, ge=1, description="Steps to forecast for every series (default and maximum: "
                                                         "the model's horizon for the frequency).")
    model: ModelChoice = Field("auto", description="'auto' (primary, fallback if it fails), 'primary' or 'fallback'.")
    deployment: str | None = deployment_field()
    calendar: list[CalendarFeature] | None = Field(None, description="For every series: " + CALENDAR_HELP)
    _calendar = field_validator("calendar")(calendar_features)

    @model_validator(mode="after")
    def _ids_and_time_axis(self) -> PanelForecastRequest:
        seen: set[str] = set()
        for i, s in enumerate(self.series):
            if s.id in seen:
                raise ValueError(f"series {i}: id {s.id!r} is given twice")
            seen.add(s.id)
            if s.start is not None and self.frequency is None:
                raise ValueError(f"series {i} ({s.id!r}): 'start' needs a 'frequency' (it can only be inferred "
                                 f"from timestamps)")
        return self


class BacktestRequest(BaseModel):
    """POST /v1/forecast/backtest: the served forecaster judged on the user's own series (rolling origins)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"values": [float(10 + i % 7) for i in range(60)], "start": "2026-01-01T00:00:00", "frequency": "D",
         "horizon": 7, "origins": 3}]})
    values: list[float | None] = Field(min_length=1, description="The whole history; null or NaN marks a missing "
                                                                 "point.")
    timestamps: list[datetime] | None = Field(None, description="One per value, any order; omit to use start.")
    start: datetime | None = Field(None, description="Timestamp of values[0] when timestamps are omitted.")
    frequency: Frequency | None = Field(None, description="As in /v1/forecast; omitted: inferred from timestamps.")
    horizon: int | None = Field(None, ge=1, description="Steps forecast from each origin (default and maximum: the "
                                                         "model's horizon for the frequency).")
    origins: int = Field(3, ge=1, description="Rolling origins: the last origins x horizon points are forecast, "
                                              "one horizon at a time, each from the history before it (at most "
                                              "limits.forecast.max_backtest_origins).")
    model: ModelChoice = Field("auto", description="'auto' (primary, fallback if it fails), 'primary' or 'fallback'.")
    deployment: str | None = deployment_field()
    covariates: Covariates | None = Field(None, description="Known-future regressors over the whole history (name "
                                                            "-> one value per point): at each origin the ones after "
                                                            "it are its future values.")
    calendar: list[CalendarFeature] | None = Field(None, description=CALENDAR_HELP)
    _calendar = field_validator("calendar")(calendar_features)

    @model_validator(mode="after")
    def _one_time_axis(self) -> BacktestRequest:
        if (self.timestamps is None) == (self.start is None):
            raise ValueError("give exactly one of 'timestamps' or 'start'")
        if self.start is not None and self.frequency is None:
            raise ValueError("'start' needs a 'frequency' (it can only be inferred from timestamps)")
        return self


class ForecastPoint(BaseModel):
    timestamp: datetime = Field(description="Start of the forecast step's bucket, UTC, RFC 3339.")
    point: float = Field(description="The point forecast: the median (0.5 quantile).")
    lower_50: float | None = Field(None, description="0.25 quantile (null when the model does not output it).")
    upper_50: float | None = Field(None, description="0.75 quantile.")
    lower_90: float | None = Field(None, description="0.05 quantile.")
    upper_90: float | None = Field(None, description="0.95 quantile.")
    quantiles: dict[str, float] = Field(description="Every quantile the model outputs, keyed by level ('0.1').")


class LevelShiftReport(BaseModel):
    at: datetime = Field(description="The first point at the new level (UTC).")
    size: float = Field(description="New level minus old, in the series' units: the points before the shift were "
                                    "moved by it before forecasting, so the forecast continues the new level.")


class CovariateEffect(BaseModel):
    name: str = Field(description="The covariate ('weekday=tue', 'month=feb', 'holidays:US' for calendar "
                                   "features).")
    effect: float = Field(description="Change of the series per unit of the covariate (least squares on the history, "
                                      "with a level and a trend).")
    t_value: float = Field(description="Its t statistic in that fit (|t| >= 3 makes it a candidate).")
    used: bool = Field(description="True when it moved the forecast: a candidate, and the backtest with the "
                                   "candidates beat the one without.")


class CovariateReport(BaseModel):
    used: bool = Field(description="True when any covariate moved the forecast.")
    backtest_error_with: float | None = Field(description="Backtest mean absolute error with the candidates (null: "
                                                          "no candidate or too short to backtest).")
    backtest_error_without: float | None = Field(description="The same without covariates.")
    effects: list[CovariateEffect]


class StaticCategorical(BaseModel):
    name: str = Field(description="The categorical, as sent in 'static'.")
    categories: int = Field(description="Distinct categories over the panel.")
    used: bool = Field(description="True when the series were pooled by it: pooling lowered the panel's error on "
                                   "its last backtest origin, and more than any other categorical.")
    backtest_error_own: float | None = Field(description="Mean scaled error on the last backtest origin with each "
                                                         "series' own method scores (weights from the earlier "
                                                         "origins; null: no series with two origins).")
    backtest_error_pooled: float | None = Field(description="The same with the scores pooled by this categorical.")


class StaticReport(BaseModel):
    used: bool = Field(description="True when this series' method weights came from scores pooled with its "
                                   "category.")
    pooled_by: str | None = Field(description="The categorical its scores were pooled by (null: none).")
    series_in_category: int | None = Field(description="Series of the panel in its category, itself included.")
    categoricals: list[StaticCategorical] = Field(description="Every categorical of the panel, and whether it was "
                                                              "used.")


class InputReport(BaseModel):
    frequency: Frequency = Field(description="The frequency forecast at.")
    frequency_inferred: bool = Field(description="True if it was inferred from the timestamps.")
    sorted: bool = Field(description="True if points arrived out of order and were sorted.")
    duplicates_merged: int = Field(description="Extra points in an already occupied bucket (averaged).")
    imputed: int = Field(description="Missing or null points filled by linear interpolation.")
    points: int = Field(description="Regular points after regularisation.")
    used: int = Field(description="Points the model read (the end of the series).")
    padded: int = Field(description="Context positions the model saw as padding (masked) because the series is "
                                    "shorter than its context.")
    method: str = Field(description="What forecast: the methods combined, by weight, joined with '+' (e.g. "
                                    "'drift', 'global+damped_holt'; 'theta' for the degraded fallback, 'model' for "
                                    "a model answering alone). docs/families/forecast.md, 'The method'.")
    method_weights: dict[str, float] = Field(description="Weight of each combined method (they sum to 1).")
    backtest_mase: float | None = Field(description="The combination's error on the series' own past (rolling-"
                                                    "origin backtest), scaled like MASE: below 1 beats the naive "
                                                    "step of the history. Null without a backtest.")
    backtest_origins: int = Field(description="Backtest origins the methods were scored from (0: none).")
    interval_calibration: Literal["conformal", "model"] = Field(
        description="conformal: the intervals are scaled by the series' backtest errors and the calibration factors; "
                    "model: the model's own quantiles.")
    level_shift: LevelShiftReport | None = Field(None, description="A step to a new level that persists (detected "
                                                                   "on the history), or null.")
    covariates: CovariateReport | None = Field(None, description="What the covariates did (null: none given).")
    static: StaticReport | None = Field(None, description="What the panel's static categoricals did for this "
                                                          "series (null: none given).")


class ForecastResponse(ServedBy):
    forecast: list[ForecastPoint]
    input: InputReport


class SeriesForecast(BaseModel):
    id: str = Field(description="The series' id, as sent.")
    model: ModelInfo = Field(description="The model version that forecast this series.")
    degraded: bool = Field(description="True when a fallback model answered for this series.")
    forecast: list[ForecastPoint]
    input: InputReport


class PanelForecastResponse(ServedBy):
    """`model` and `degraded` of the envelope: the first runner call's model, and whether any series was degraded
    (each series says which model answered it)."""

    runner_calls: int = Field(description="Runner calls the panel took (chunks of at most one runner batch).")
    series: list[SeriesForecast] = Field(description="One answer per series, in request order.")


class BacktestOrigin(BaseModel):
    origin: datetime = Field(description="The first forecast step of this origin (UTC): the history ends before it.")
    method: str = Field(description="The method the service chose at this origin (as input.method).")
    mase: float | None = Field(description="Mean absolute error over the horizon / the history's in-sample naive "
                                           "(lag 1) mean absolute error (null: a constant history).")
    rmsse: float | None = Field(description="Root mean squared error / the naive step's root mean square.")
    actual: list[float] = Field(description="What happened at each step.")
    forecast: list[ForecastPoint] = Field(description="What the service forecast from this origin.")


class BacktestResponse(ServedBy):
    """Rolling-origin evaluation of the served forecaster on the request's series."""

    frequency: Frequency
    horizon: int
    runner_calls: int = Field(description="Runner calls the backtest took.")
    mase: float | None = Field(description="Mean over origins and steps of the scaled absolute errors (below 1: "
                                           "better than the naive step of the history).")
    rmsse: float | None = Field(description="Root of the mean over origins and steps of the scaled squared errors.")
    mase_by_step: list[float | None] = Field(description="MASE per step ahead (1, 2, ...), over the origins.")
    rmsse_by_step: list[float | None] = Field(description="RMSSE per step ahead, over the origins.")
    coverage_50: float | None = Field(description="Share of actual points inside the 50 % interval (ideal 0.5).")
    coverage_90: float | None = Field(description="Share inside the 90 % interval (ideal 0.9).")
    origins: list[BacktestOrigin] = Field(description="Each origin, oldest first.")
