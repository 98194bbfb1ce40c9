"""Forecast request bodies, shared by the HTTP clients and the typed gRPC clients: values and covariates as floats
(None = missing), timestamps as ISO 8601 strings, a panel's series each with its own time axis and covariates.

A panel's series is either its values (then the call's `start` applies) or a mapping of the REST SeriesInput fields:
{"values": [...], "start" | "timestamps": ..., "covariates": {...}, "future_covariates": {...}, "static": {...}}
(static: the series' categoricals, name -> category, e.g. {"store_type": "A"}; every series gives the same names).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import Any

Timestamp = str | datetime | date
Covariates = Mapping[str, Iterable[float | None]]
SeriesLike = Iterable[float | None] | Mapping[str, Any]
SERIES_FIELDS = ("values", "timestamps", "start", "covariates", "future_covariates", "static")


def number(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)  # numpy scalars, Decimals, ints
    return None if math.isnan(f) else f  # NaN = missing, sent as JSON null


def timestamp(t: Any) -> str:
    if isinstance(t, (datetime, date)):
        return t.isoformat()
    if hasattr(t, "isoformat"):  # pandas.Timestamp
        return t.isoformat()
    return str(t)  # str, numpy.datetime64


def covariates(given: Covariates | None) -> dict[str, list[float | None]] | None:
    return None if given is None else {str(k): [number(v) for v in vs] for k, vs in given.items()}


def _set(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


def series_body(values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None = None,
                start: Timestamp | None = None, covariates_: Covariates | None = None,
                future_covariates: Covariates | None = None) -> dict[str, Any]:
    """One series' fields (values, its time axis, its covariates), only those given."""
    return _set(values=[number(v) for v in values],
                timestamps=None if timestamps is None else [timestamp(t) for t in timestamps],
                start=None if start is None else timestamp(start), covariates=covariates(covariates_),
                future_covariates=covariates(future_covariates))


def forecast_body(values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None,
                  start: Timestamp | None, frequency: str | None, horizon: int | None, model: str | None,
                  deployment: str | None, covariates: Covariates | None, future_covariates: Covariates | None,
                  calendar: Sequence[str] | None) -> dict[str, Any]:
    """POST /v1/forecast's body (and Triserve/Forecast's fields)."""
    return {**series_body(values, timestamps=timestamps, start=start, covariates_=covariates,
                          future_covariates=future_covariates),
            **_set(frequency=frequency, horizon=horizon, model=model, deployment=deployment,
                   calendar=None if calendar is None else list(calendar))}


def panel_series(series: Mapping[str, SeriesLike], start: Timestamp | None) -> list[dict[str, Any]]:
    """The panel's series in the mapping's order: values alone take `start`; a mapping gives its own fields (a series
    with neither its own `start` nor `timestamps` takes the call's `start`)."""
    out = []
    for key, spec in series.items():
        if isinstance(spec, Mapping):
            unknown = sorted(set(spec) - set(SERIES_FIELDS))
            if unknown or "values" not in spec:
                raise ValueError(f"series {key!r}: a mapping with 'values' and any of {SERIES_FIELDS[1:]} "
                                 f"(unknown: {unknown})")
            own = spec.get("start") is not None or spec.get("timestamps") is not None
            body = series_body(spec["values"], timestamps=spec.get("timestamps"),
                               start=spec.get("start") if own else start, covariates_=spec.get("covariates"),
                               future_covariates=spec.get("future_covariates"))
            if spec.get("static") is not None:
                body["static"] = {str(k): str(v) for k, v in spec["static"].items()}
        else:
            body = series_body(spec, start=start)
        out.append({"id": str(key), **body})
    return out


def panel_body(series: Mapping[str, SeriesLike], *, start: Timestamp | None, frequency: str | None,
               horizon: int | None, model: str | None, deployment: str | None,
               calendar: Sequence[str] | None) -> dict[str, Any]:
    """POST /v1/forecast/panel's body (and Triserve/ForecastPanel's fields)."""
    return {"series": panel_series(series, start),
            **_set(frequency=frequency, horizon=horizon, model=model, deployment=deployment,
                   calendar=None if calendar is None else list(calendar))}
