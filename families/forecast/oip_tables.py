"""The forecast panel and the backtest on the Open Inference Protocol v2 (kernel/family.RestRoute.oip): long tensors,
one row per point, as a table of (id, timestamp, value) rows is laid out, so a client sends its table as it is.

Panel (model `forecast-panel`, or `<deployment>.panel`), the request of POST /v1/forecast/panel:

    SERIES_ID          BYTES [n]             each row's series id; the series answer in order of first appearance
    VALUES             FP64/FP32 [n]         each row's observation (NaN: missing)
    TIMESTAMPS         BYTES [n]             each row's time, ISO 8601 (else the parameter `start` for every series)
    COVARIATES         FP64/FP32 [n, k]      each row's covariates (parameter covariate_names: the k columns)
    FUTURE_SERIES_ID   BYTES [m]             with FUTURE_COVARIATES [m, k]: the rows over the forecast, per series in
    FUTURE_COVARIATES  FP64/FP32 [m, k]      step order (at least the horizon each)
    STATIC             BYTES [n, s]          each row's static categoricals (the same on every row of a series;
                                             parameter static_names: the s columns)
    parameters         start, frequency, horizon, model, calendar, covariate_names, static_names

Answer: one row per forecast step, series after series: SERIES_ID, TIMESTAMPS, POINT, QUANTILES [rows, levels],
LOWER_50 .. UPPER_90; parameters quantile_levels (JSON), runner_calls and `series` (JSON: per series its id, model,
degraded and input report, as REST's `series[i]` without the forecast).

Backtest (model `forecast-backtest`, or `<deployment>.backtest`), the request of POST /v1/forecast/backtest: VALUES,
TIMESTAMPS and COVARIATES as the single forecast's; parameters start, frequency, horizon, origins, model, calendar,
covariate_names. Answer: one row per origin and step, oldest origin first: ORIGIN, TIMESTAMPS, ACTUAL, POINT,
QUANTILES, the bands; MASE_BY_STEP and RMSSE_BY_STEP [horizon] (NaN where REST says null); parameters frequency,
horizon, runner_calls, quantile_levels, mase, rmsse, coverage_50, coverage_90 (left out where REST says null) and
`origins` (JSON: origin, method, mase, rmsse of each).

A tensor whose rows do not match VALUES is a 400 `shape_mismatch`; columns that do not match their names a 422
(`covariate_names_mismatch`, `static_names_mismatch`), a static categorical that changes within a series a 422
`static_not_constant`; the rest is REST's validation, with REST's codes, before any runner call.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from triserve.families.forecast import oip_fields
from triserve.families.forecast.oip import BANDS, ForecastOip
from triserve.families.forecast.schemas import BacktestResponse, ForecastPoint, PanelForecastResponse
from triserve.kernel.errors import ApiError
from triserve.kernel.tensors import TensorMeta, bad_request


def _numbers(name: str, shape: tuple[int, ...], field: str, optional: bool = False) -> TensorMeta:
    """An FP64 input that takes FP32 too."""
    return TensorMeta(name, "FP64", shape, optional=optional, also=("FP32",), field=field)


def _levels(groups: list[list[ForecastPoint]]) -> list[str]:
    """Every quantile level of the answer, ascending (series answered by different models may differ)."""
    return sorted({k for points in groups for p in points for k in p.quantiles}, key=float)


def _point_outputs(groups) -> tuple[TensorMeta, ...]:
    """TIMESTAMPS, POINT, QUANTILES and the bands of every forecast step, `groups(response)` its lists of points."""
    def rows(r):
        return [p for points in groups(r) for p in points]

    def band(name: str):
        return lambda r: [np.nan if getattr(p, name) is None else getattr(p, name) for p in rows(r)]

    def quantiles(r):
        levels = _levels(groups(r))
        return np.array([[p.quantiles.get(k, np.nan) for k in levels] for p in rows(r)]).reshape(-1, len(levels))

    return (TensorMeta("TIMESTAMPS", "BYTES", (-1,),
                       value=lambda r: [p.model_dump(mode="json")["timestamp"] for p in rows(r)]),
            TensorMeta("POINT", "FP64", (-1,), value=lambda r: [p.point for p in rows(r)]),
            TensorMeta("QUANTILES", "FP64", (-1, -1), value=quantiles)) + tuple(
        TensorMeta(n.upper(), "FP64", (-1,), value=band(n)) for n in BANDS)


def _panel_points(r: PanelForecastResponse) -> list[list[ForecastPoint]]:
    return [s.forecast for s in r.series]


def _origin_points(r: BacktestResponse) -> list[list[ForecastPoint]]:
    return [o.forecast for o in r.origins]


def _nan(values: list[float | None]) -> list[float]:
    return [np.nan if v is None else v for v in values]


PANEL_INPUTS = (TensorMeta("SERIES_ID", "BYTES", (-1,), field="series_id"),
                _numbers("VALUES", (-1,), field="values"),
                TensorMeta("TIMESTAMPS", "BYTES", (-1,), optional=True, field="timestamps"),
                _numbers("COVARIATES", (-1, -1), optional=True, field="covariates"),
                TensorMeta("FUTURE_SERIES_ID", "BYTES", (-1,), optional=True, field="future_series_id"),
                _numbers("FUTURE_COVARIATES", (-1, -1), optional=True, field="future_covariates"),
                TensorMeta("STATIC", "BYTES", (-1, -1), optional=True, field="static"))
PANEL_OUTPUTS = (TensorMeta("SERIES_ID", "BYTES", (-1,),
                            value=lambda r: [s.id for s in r.series for _ in s.forecast]),) + _point_outputs(
    _panel_points)
BACKTEST_INPUTS = (_numbers("VALUES", (-1,), field="values"),
                   TensorMeta("TIMESTAMPS", "BYTES", (-1,), optional=True, field="timestamps"),
                   _numbers("COVARIATES", (-1, -1), optional=True, field="covariates"))
BACKTEST_OUTPUTS = (
    TensorMeta("ORIGIN", "BYTES", (-1,),
               value=lambda r: [o.model_dump(mode="json")["origin"] for o in r.origins for _ in o.forecast]),
    TensorMeta("ACTUAL", "FP64", (-1,), value=lambda r: [a for o in r.origins for a in o.actual])) + _point_outputs(
    _origin_points) + (
    TensorMeta("MASE_BY_STEP", "FP64", (-1,), value=lambda r: _nan(r.mase_by_step)),
    TensorMeta("RMSSE_BY_STEP", "FP64", (-1,), value=lambda r: _nan(r.rmsse_by_step)))


def _rows(name: str, count: int, n: int) -> None:
    if count != n:
        raise bad_request("shape_mismatch", f"input {name!r} must have one row per VALUES element ({n}), got {count}",
                          {"input": name, "expected": n, "received": count})


def _groups(ids: list[str]) -> dict[str, list[int]]:
    """series id -> its rows, in order of first appearance."""
    out: dict[str, list[int]] = {}
    for i, key in enumerate(ids):
        out.setdefault(key, []).append(i)
    return out


def _statics(flat: list[str] | None, shape: tuple[int, ...] | None, names: list[str], n: int,
             groups: dict[str, list[int]]) -> dict[str, dict[str, str]]:
    """STATIC [n, s] -> series id -> {name: category}, one category per series."""
    if flat is None or shape is None:
        if names:
            raise ApiError(422, "static_names_mismatch", "static_names without STATIC", {"names": names})
        return {}
    _rows("STATIC", shape[0], n)
    columns = 1 if len(shape) == 1 else shape[1]
    if columns != len(names) or len(set(names)) != len(names):
        raise ApiError(422, "static_names_mismatch", f"STATIC must be [points, {len(names)}]: one column per name in "
                       f"static_names, each name once", {"input": "STATIC", "shape": list(shape), "names": names})
    table = np.array(flat, dtype=object).reshape(n, columns)
    out = {}
    for key, rows in groups.items():
        values = {}
        for j, name in enumerate(names):
            seen = set(table[rows, j])
            if len(seen) != 1:
                raise ApiError(422, "static_not_constant", f"series {key!r}: static categorical {name!r} changes "
                               f"within the series ({sorted(seen)[:4]})", {"id": key, "name": name})
            values[name] = seen.pop()
        out[key] = values
    return out


@dataclass(frozen=True)
class PanelOip(ForecastOip):
    """The panel's long tensors -> PanelForecastRequest; its answer -> one row per series and step."""

    def request_fields(self, fields, arrays, parameters):
        values = fields.pop("values")
        n = len(values)
        ids = fields.pop("series_id")
        _rows("SERIES_ID", len(ids), n)
        stamps = fields.pop("timestamps", None)
        if stamps is not None:
            _rows("TIMESTAMPS", len(stamps), n)
        start = fields.pop("start", None)
        future_ids = fields.pop("future_series_id", None)
        if (future_ids is None) != ("FUTURE_COVARIATES" not in arrays):
            raise bad_request("missing_input", "FUTURE_SERIES_ID and FUTURE_COVARIATES go together",
                              {"missing": ["FUTURE_COVARIATES" if future_ids is not None else "FUTURE_SERIES_ID"]})
        if "COVARIATES" in arrays:
            _rows("COVARIATES", np.asarray(arrays["COVARIATES"]).shape[0], n)
        if future_ids is not None:
            _rows("FUTURE_COVARIATES", np.asarray(arrays["FUTURE_COVARIATES"]).shape[0], len(future_ids))
        columns = oip_fields.covariate_columns(arrays, parameters)
        ahead = _groups(future_ids or [])
        groups = _groups(ids)
        unknown = sorted(set(ahead) - set(groups))
        if unknown:
            raise ApiError(422, "unknown_series", f"FUTURE_SERIES_ID names series without values: {unknown[:8]}",
                           {"unknown": unknown[:64]})
        static_names = [s.strip() for s in str(parameters.get("static_names") or "").split(",") if s.strip()]
        statics = _statics(fields.pop("static", None), None if "STATIC" not in arrays else
                           np.asarray(arrays["STATIC"]).shape, static_names, n, groups)
        series = []
        for key, rows in groups.items():
            one: dict[str, Any] = {"id": key, "values": [values[i] for i in rows]}
            if stamps is not None:
                one["timestamps"] = [stamps[i] for i in rows]
            elif start is not None:
                one["start"] = start
            if "covariates" in columns:
                one["covariates"] = {k: c[rows].tolist() for k, c in columns["covariates"].items()}
            if "future_covariates" in columns:
                one["future_covariates"] = {k: c[ahead.get(key, [])].tolist()
                                            for k, c in columns["future_covariates"].items()}
            if key in statics:
                one["static"] = statics[key]
            series.append(one)
        fields = {k: v for k, v in fields.items() if k not in ("covariates", "future_covariates")}
        if parameters.get("calendar") is not None:
            fields["calendar"] = oip_fields.calendar(parameters)
        return {**fields, "series": series}

    def extra_parameters(self, response) -> dict[str, Any]:
        series = [{"id": s.id, "model": s.model.model_dump(), "degraded": s.degraded,
                   "input": s.input.model_dump(mode="json")} for s in response.series]
        return {"quantile_levels": json.dumps([float(k) for k in _levels(_panel_points(response))]),
                "runner_calls": response.runner_calls, "series": json.dumps(series)}


@dataclass(frozen=True)
class BacktestOip(ForecastOip):
    """The backtest's tensors (the single forecast's, without future covariates) -> BacktestRequest; its answer ->
    one row per origin and step, the scores as parameters."""

    def extra_parameters(self, response) -> dict[str, Any]:
        origins = [{k: v for k, v in o.model_dump(mode="json").items() if k in ("origin", "method", "mase", "rmsse")}
                   for o in response.origins]
        scores = {k: getattr(response, k) for k in ("mase", "rmsse", "coverage_50", "coverage_90")}
        return {"frequency": response.frequency, "horizon": response.horizon, "runner_calls": response.runner_calls,
                "quantile_levels": json.dumps([float(k) for k in _levels(_origin_points(response))]),
                "origins": json.dumps(origins), **{k: v for k, v in scores.items() if v is not None}}


PANEL = PanelOip(alias="forecast-panel", inputs=PANEL_INPUTS, outputs=PANEL_OUTPUTS,
                 parameters=("start", "frequency", "horizon", "model"))
BACKTEST = BacktestOip(alias="forecast-backtest", inputs=BACKTEST_INPUTS, outputs=BACKTEST_OUTPUTS,
                       parameters=("start", "frequency", "horizon", "origins", "model"))
