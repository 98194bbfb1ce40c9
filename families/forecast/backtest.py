"""POST /v1/forecast/backtest: the served forecaster judged on the user's own series, so a user can see how it does
on their data before trusting it.

Rolling origins: the series is regularised as /v1/forecast does, then its last origins x horizon points are forecast
one horizon at a time, each from the history before it (with the covariates' values after the origin as their
future values). Every origin is an ordinary forecast request (SeriesForecaster.prepare: the same checks, level
shifts, covariate decision and ensemble), all answered together like a panel. The errors are scaled per origin by
the history's in-sample naive step (lag 1, as MASE and RMSSE define it), so they compare across series and scales.
Bounded work: at most limits.forecast.max_backtest_origins origins, the series within max_points.
"""
from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np

from triserve.families.forecast.preprocess import SeriesError, past_timestamp, regularize, series_timestamps
from triserve.families.forecast.regressors import regressors
from triserve.families.forecast.schemas import (
    BacktestOrigin,
    BacktestRequest,
    ForecastPoint,
    ForecastRequest,
    InputReport,
)
from triserve.kernel.errors import ApiError


def _datetime(t: np.datetime64) -> datetime:
    return datetime.fromisoformat(str(t.astype("datetime64[s]"))).replace(tzinfo=UTC)


def origins(pipeline: Any, body: BacktestRequest) -> list[Any]:
    """One prepared forecast per origin (series.SeriesForecaster.prepare, passed in: series.py imports this
    module), oldest first; each knows what followed it (`actual`) and its raw history."""
    lim, contract = pipeline.limits, pipeline.contract
    if body.origins > lim.max_backtest_origins:
        raise ApiError(422, "too_many_origins", f"{body.origins} origins exceed the limit of "
                       f"{lim.max_backtest_origins}", {"limit": lim.max_backtest_origins, "received": body.origins})
    whole = ForecastRequest(values=body.values, timestamps=body.timestamps, start=body.start,
                            frequency=body.frequency, model=body.model)
    frequency, _, stamps = pipeline._check(whole)
    values = np.array([np.nan if v is None else v for v in body.values], dtype=np.float64)
    if stamps is None:
        assert body.start is not None  # BacktestRequest: exactly one of 'timestamps' or 'start'
        t0 = body.start if body.start.tzinfo is None else body.start.astimezone(UTC).replace(tzinfo=None)
        stamps = series_timestamps(np.datetime64(t0, "s"), frequency, len(values))
    try:
        regular, last_ts, _ = regularize(values, stamps, frequency, lim.max_points, lim.max_gap_fraction)
    except SeriesError as exc:
        raise ApiError(422, exc.code, str(exc), exc.details) from exc
    n = len(regular)
    max_h = min(contract.max_horizon[frequency], lim.max_horizon)
    horizon = body.horizon or max_h
    if horizon > max_h:
        raise ApiError(422, "horizon_too_long", f"horizon {horizon} exceeds {max_h} steps at frequency {frequency}",
                       {"limit": max_h, "frequency": frequency})
    cuts = [n - horizon * (body.origins - j) for j in range(body.origins)]
    if cuts[0] < contract.min_history:
        raise ApiError(422, "backtest_too_short", f"{body.origins} origins of {horizon} steps need at least "
                       f"{contract.min_history + body.origins * horizon} regular points, got {n}",
                       {"required": contract.min_history + body.origins * horizon, "received": n})
    covs = body.covariates or {}
    names, x, _ = regressors(covs, covs, len(values), stamps, frequency, 1, lim.max_points, n)
    start = _datetime(past_timestamp(last_ts, frequency, 0, n))
    prepared = []
    for c in cuts:
        request = ForecastRequest(
            values=regular[:c].tolist(), start=start, frequency=frequency, horizon=horizon, model=body.model,
            covariates={k: x[:c, j].tolist() for j, k in enumerate(names)} or None,
            future_covariates={k: x[c: c + horizon, j].tolist() for j, k in enumerate(names)} or None,
            calendar=body.calendar)
        p = pipeline.prepare(request)
        p.actual, p.history = regular[c: c + horizon], regular[:c]
        prepared.append(p)
    return prepared


def _scaled(errors: np.ndarray, history: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(|e| / naive MAE, e^2 / naive MSE) of one origin; NaN where the history is constant."""
    step = np.diff(history)
    mae, mse = float(np.mean(np.abs(step))) if len(step) else 0.0, float(np.mean(step ** 2)) if len(step) else 0.0
    return (np.abs(errors) / mae if mae > 0 else np.full(len(errors), np.nan),
            errors ** 2 / mse if mse > 0 else np.full(len(errors), np.nan))


def _mean(a: np.ndarray) -> float | None:
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else None


def _coverage(actual: np.ndarray, points: list[ForecastPoint], level: int) -> list[bool] | None:
    lo, hi = [getattr(p, f"lower_{level}") for p in points], [getattr(p, f"upper_{level}") for p in points]
    if any(v is None for v in lo + hi):
        return None
    return [bool(a_lo <= a <= a_hi) for a, a_lo, a_hi in zip(actual, lo, hi)]


def report(prepared: list[Any], answered: list[tuple[list[ForecastPoint], InputReport]],
           runner_calls: int) -> dict[str, Any]:
    """The backtest answer: per-origin and per-step scaled errors, interval coverage, the method at each origin."""
    abs_rows: list[np.ndarray] = []
    sq_rows: list[np.ndarray] = []
    cover: dict[int, list[bool] | None] = {50: [], 90: []}  # None: a model without that interval
    out = []
    for p, (points, input_report) in zip(prepared, answered):
        assert p.actual is not None and p.history is not None
        errors = p.actual - np.array([pt.point for pt in points])
        a, s = _scaled(errors, p.history)
        abs_rows.append(a)
        sq_rows.append(s)
        for level in cover:
            hits, sofar = _coverage(p.actual, points, level), cover[level]
            cover[level] = None if hits is None or sofar is None else sofar + hits
        rmsse = _mean(s)
        out.append(BacktestOrigin(origin=points[0].timestamp, method=input_report.method, mase=_mean(a),
                                  rmsse=None if rmsse is None else float(np.sqrt(rmsse)),
                                  actual=p.actual.tolist(), forecast=points))
    abs_m, sq_m = np.array(abs_rows), np.array(sq_rows)
    root = lambda v: None if v is None else float(np.sqrt(v))  # noqa: E731
    return {"frequency": prepared[0].frequency, "horizon": prepared[0].horizon, "runner_calls": runner_calls,
            "mase": _mean(abs_m.ravel()), "rmsse": root(_mean(sq_m.ravel())),
            "mase_by_step": [_mean(abs_m[:, k]) for k in range(abs_m.shape[1])],
            "rmsse_by_step": [root(_mean(sq_m[:, k])) for k in range(sq_m.shape[1])],
            **{f"coverage_{level}": None if hits is None else float(np.mean(hits)) for level, hits in cover.items()},
            "origins": out}

