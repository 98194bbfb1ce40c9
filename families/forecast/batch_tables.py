"""Offline adapters for the forecast panel and the backtest (kernel/batch.py's contract): `triserve batch
forecast-panel` and `triserve batch forecast-backtest` over the same long table as `triserve batch forecast` (id,
timestamp, value[, covariates][, static categoricals]).

Both run the service's own series work (series.SeriesForecaster, with a deployment view built from the job's model
and limits), so each row is what POST /v1/forecast/panel or /v1/forecast/backtest answers for the same series:

- forecast-panel: each chunk of --chunk-size series (in id order) is one panel: the static categoricals the job names
  (--static-columns, constant within a series) pool the methods' backtest scores across the chunk exactly as a
  panel request pools them; a series' rows after its last value carry its future covariates (as `forecast`). The
  row: the forecast, and the series' `input` report (JSON, REST's `series[i].input`).
- forecast-backtest: each series is one backtest request (--horizon, --origins, its covariates over the whole
  history); the row holds the scores, the origins and each origin's actuals and forecast.

A series the service would refuse is that series' error row, with the service's code (a panel request refuses the
whole panel; a job refuses only the series).
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from triserve.families.forecast import backtest
from triserve.families.forecast.limits import Limits
from triserve.families.forecast.schemas import BacktestRequest, SeriesInput
from triserve.families.forecast.series import SeriesForecaster
from triserve.kernel.batch import Option, Prepared, error_row
from triserve.kernel.errors import ApiError
from triserve.kernel.family import DeploymentView
from triserve.kernel.served import ServedModel
from triserve.models.manifest import Manifest

FREQUENCY = Option("frequency", "YS QS MS W D h 30min 15min min (default: inferred per series)")
HORIZON = Option("horizon", "steps (default: the model's for the frequency)", int)
CALENDAR = Option("calendar", "calendar features, comma-separated: weekday, month, holidays:<CC>[-<SUB>]")
POINTS = {"timestamps": "list<ts>", "point": "list<f64>", "lower_50": "list<f64>", "upper_50": "list<f64>",
          "lower_90": "list<f64>", "upper_90": "list<f64>", "quantile_levels": "list<f64>",
          "quantiles": "list<list<f64>>"}


def split_future(values: np.ndarray, stamps: np.ndarray,
                 covs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, dict[str, list], dict[str, list]]:
    """(history values, history stamps, covariates over the history, over the future): a series' rows after its
    last value carry the future covariates, in time order."""
    observed = np.isfinite(values)
    history = stamps <= (stamps[observed].max() if observed.any() else stamps.max())
    ahead = np.argsort(stamps[~history], kind="stable")
    past = {k: v[history].tolist() for k, v in covs.items()}
    future = {k: v[~history][ahead].tolist() for k, v in covs.items()}
    return values[history], stamps[history], past, future


def _points(points: list) -> dict[str, Any]:
    """A forecast's steps as the row's list columns (quantile levels ascending, as REST's keys)."""
    levels = sorted({k for p in points for k in p.quantiles}, key=float)
    return {"timestamps": [p.timestamp.replace(tzinfo=None) for p in points], "point": [p.point for p in points],
            **{b: [getattr(p, b) for p in points] for b in ("lower_50", "upper_50", "lower_90", "upper_90")},
            "quantile_levels": [float(k) for k in levels],
            "quantiles": [[p.quantiles.get(k) for k in levels] for p in points]}


class _Tables:
    """What both adapters share: the job's model as a deployment view for SeriesForecaster, records as REST fields."""

    FAMILY = "forecast"
    SOURCE = "series"
    HEAVY_FINISH = True
    SHARD_SIZE = 2048

    def __init__(self, directory: Path, manifest: Manifest, limits: Limits, options: dict[str, Any]):
        self.served = ServedModel(slot="batch", version=manifest.version, directory=directory, manifest=manifest)
        self.model = manifest.name
        self.forecaster = SeriesForecaster(DeploymentView(
            name=manifest.name, limits=limits, primary=lambda: self.served, batch_limit=lambda: 1 << 30,
            observe=lambda *_: None))
        self.frequency: str | None = options.get("frequency")
        self.horizon: int | None = options.get("horizon")
        self.calendar = [c.strip() for c in str(options.get("calendar") or "").split(",") if c.strip()] or None
        frequencies = self.forecaster.contract.frequencies
        if self.frequency is not None and self.frequency not in frequencies:
            raise ValueError(f"frequency {self.frequency!r} is not served by {manifest.name} "
                             f"({', '.join(frequencies)})")

    @staticmethod
    def _stamps(stamps: np.ndarray) -> list:
        return np.asarray(stamps, dtype="datetime64[s]").astype(object).tolist()

    def _items(self, prepared: list) -> tuple[list[np.ndarray], list[list[Any]]]:
        """The model's items of prepared series, and the items without their arrays (what finish reads)."""
        xs, kept = [], []
        for p in prepared:
            items = SeriesForecaster.items(p, self.served)
            xs += [it.x for it in items]
            kept.append([dataclasses.replace(it, x=np.empty(0)) for it in items])
        return xs, kept

    def prepare(self, records: Sequence[dict]) -> Prepared:
        out = Prepared(keys=[str(r["key"]) for r in records], states=[None] * len(records))
        for i, record in enumerate(records):
            try:
                prepared = self._prepare(record)
            except ApiError as exc:  # the service's refusal, with its code
                out.errors[i] = (exc.code, exc.message)
                continue
            except ValidationError as exc:
                out.errors[i] = ("validation_error", str(exc).splitlines()[0] + ": " + exc.errors()[0]["msg"])
                continue
            except (ValueError, TypeError, KeyError) as exc:  # malformed timestamps or values: this series' row
                out.errors[i] = ("invalid_series", f"{type(exc).__name__}: {exc}")
                continue
            xs, kept = self._items(prepared)
            out.items += xs
            out.owners += [i] * len(xs)
            out.states[i] = (prepared, kept)
        return out

    def _prepare(self, record: dict) -> list:
        raise NotImplementedError

    def _answered(self, prepared: Prepared, outputs: Sequence[np.ndarray]) -> dict[int, list]:
        """Record index -> the answers of its prepared series, every series of the chunk in one pass."""
        ok = [i for i in range(len(prepared.keys)) if i not in prepared.errors]
        grouped = prepared.outputs_of(outputs)
        series, kept, outs, owner = [], [], [], []
        for i in ok:
            state, rows, at = prepared.states[i], grouped[i], 0
            for p, its in zip(*state):
                series.append(p)
                kept.append(its)
                outs.append(rows[at: at + len(its)])
                owner.append(i)
                at += len(its)
        answers = self.forecaster.answer(series, self.served, kept, outs, self.model) if series else []
        out: dict[int, list] = {i: [] for i in ok}
        for i, answer in zip(owner, answers):
            out[i].append(answer)
        return out


class PanelAdapter(_Tables):
    COMMAND = "forecast-panel"
    CHUNK_SIZE = 256
    OPTIONS = (FREQUENCY, HORIZON, CALENDAR,
               Option("static_columns", "static categorical columns, comma-separated (constant within a series): "
                                        "series of a chunk sharing a category pool their methods' scores"))
    COLUMNS = {"frequency": "str", **POINTS, "method": "str", "input": "str"}

    def _prepare(self, record: dict) -> list:
        values = np.asarray(record["values"], dtype=np.float64)
        stamps = np.asarray(record["timestamps"], dtype="datetime64[s]")
        covs = record.get("covariates") or {}
        past: dict[str, list] = {}
        future: dict[str, list] = {}
        if covs:
            values, stamps, past, future = split_future(values, stamps, covs)
        static = {}
        for name, column in (record.get("static") or {}).items():
            if any(v is None for v in column):
                raise ApiError(422, "static_missing", f"static categorical {name!r} is null in the series",
                               {"missing": [name]})
            seen = sorted({str(v) for v in column})
            if len(seen) != 1:
                raise ApiError(422, "static_not_constant", f"static categorical {name!r} changes within the series "
                               f"({seen[:4]})", {"name": name})
            static[name] = seen[0]
        body = SeriesInput(id=str(record["key"]), values=values.tolist(), timestamps=self._stamps(stamps),
                           covariates=past or None, future_covariates=future or None, static=static or None)
        p = self.forecaster.prepare(body, self.frequency, self.horizon, self.calendar)
        p.static = body.static
        return [p]

    def finish(self, prepared: Prepared, outputs: Sequence[np.ndarray]) -> list[dict[str, Any]]:
        answered = self._answered(prepared, outputs)
        rows = []
        for i in range(len(prepared.keys)):
            if i in prepared.errors:
                rows.append(error_row(self.COLUMNS, *prepared.errors[i]))
                continue
            [(points, report)] = answered[i]
            rows.append({"frequency": report.frequency, **_points(points), "method": report.method,
                         "input": json.dumps(report.model_dump(mode="json")), "error_code": None, "error": None})
        return rows


class BacktestAdapter(_Tables):
    COMMAND = "forecast-backtest"
    CHUNK_SIZE = 64
    OPTIONS = (FREQUENCY, HORIZON, CALENDAR,
               Option("origins", "rolling origins per series (at most limits.forecast.max_backtest_origins)", int,
                      default=3))
    COLUMNS = {"frequency": "str", "horizon": "i64", "mase": "f64", "rmsse": "f64", "mase_by_step": "list<f64>",
               "rmsse_by_step": "list<f64>", "coverage_50": "f64", "coverage_90": "f64", "origins": "list<ts>",
               "methods": "list<str>", "origin_mase": "list<f64>", "origin_rmsse": "list<f64>",
               "actual": "list<list<f64>>", "forecast": "list<list<f64>>", "lower_90": "list<list<f64>>",
               "upper_90": "list<list<f64>>"}

    def __init__(self, directory: Path, manifest: Manifest, limits: Limits, options: dict[str, Any]):
        super().__init__(directory, manifest, limits, options)
        self.origins = int(options.get("origins") or 3)

    def _prepare(self, record: dict) -> list:
        covs = record.get("covariates") or {}
        body = BacktestRequest(values=np.asarray(record["values"], dtype=np.float64).tolist(),
                               timestamps=self._stamps(record["timestamps"]), frequency=self.frequency,
                               horizon=self.horizon, origins=self.origins, calendar=self.calendar,
                               covariates={k: np.asarray(v, dtype=np.float64).tolist() for k, v in covs.items()}
                               or None)
        return self.forecaster.validate(body)

    def finish(self, prepared: Prepared, outputs: Sequence[np.ndarray]) -> list[dict[str, Any]]:
        answered = self._answered(prepared, outputs)
        rows = []
        for i in range(len(prepared.keys)):
            if i in prepared.errors:
                rows.append(error_row(self.COLUMNS, *prepared.errors[i]))
                continue
            report = backtest.report(prepared.states[i][0], answered[i], runner_calls=1)
            origins = report.pop("origins")
            report.pop("runner_calls")
            rows.append({**report, "origins": [o.origin.replace(tzinfo=None) for o in origins],
                         "methods": [o.method for o in origins], "origin_mase": [o.mase for o in origins],
                         "origin_rmsse": [o.rmsse for o in origins], "actual": [o.actual for o in origins],
                         "forecast": [[p.point for p in o.forecast] for o in origins],
                         "lower_90": [[p.lower_90 for p in o.forecast] for o in origins],
                         "upper_90": [[p.upper_90 for p in o.forecast] for o in origins],
                         "error_code": None, "error": None})
        return rows
