"""Offline adapter of the forecast family (kernel/batch.py's contract): one series of a long table (id, timestamp,
value) -> regular history -> the model's items -> the served forecast, as a row.

The same steps as /v1/forecast (families/forecast/series.py), per series: the frequency as given to the job or
inferred from the series' timestamps, regularisation (gaps imputed, duplicates averaged, too many missing points
refused), the horizon and minimum-history checks against the model's contract, the model's item for the full history
and, for a model the ensemble weighs, the backtest origins' histories in the same call. What batching adds: the
classical methods of every series of a chunk are fitted in one pass (ensemble.combine_many).

Covariates (the job's covariate_columns, batch/sources.py) and calendar features (the job's calendar option) go
through the service's checks and per-series decision (regressors.py), with the service's error codes in the row: a
series' rows after its last value carry the covariates over the horizon.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from triserve.families.forecast.batch_tables import (
    CALENDAR,
    FREQUENCY,
    HORIZON,
    POINTS,
    BacktestAdapter,
    PanelAdapter,
    split_future,
)
from triserve.families.forecast.ensemble import backtest_cuts, backtest_steps, combine_many, combines
from triserve.families.forecast.features import QUANTILES, infer_frequency
from triserve.families.forecast.limits import Limits
from triserve.families.forecast.manifest import ForecastPreprocess
from triserve.families.forecast.postprocess import bands, quantile_forecast
from triserve.families.forecast.preprocess import (
    SeriesError,
    future_timestamps,
    model_item,
    past_timestamp,
    reads_history,
    regularize,
)
from triserve.families.forecast.regressors import fit_series, regressors
from triserve.families.forecast.shifts import remove as remove_shift
from triserve.kernel.batch import Prepared, error_row
from triserve.kernel.errors import ApiError
from triserve.models.manifest import Manifest, preprocess_as


class Adapter:
    FAMILY = "forecast"
    COMMAND = "forecast"
    CHUNK_SIZE, SHARD_SIZE = 256, 2048
    OPTIONS = (FREQUENCY, HORIZON, CALENDAR)
    SOURCE = "series"
    HEAVY_FINISH = True  # the classical fits and the backtest weigh more than the model
    COLUMNS = {"frequency": "str", **POINTS, "method": "str",
               "backtest_mase": "f64", "points": "i64", "imputed": "i64", "duplicates_merged": "i64", "used": "i64",
               "padded": "i64", "covariates_used": "bool", "covariate_effects": "str"}

    def __init__(self, directory: Path, manifest: Manifest, limits: Limits, options: dict[str, Any]):
        self.pre = preprocess_as(manifest, ForecastPreprocess)
        self.limits = limits
        self.frequency: str | None = options.get("frequency")
        self.horizon: int | None = options.get("horizon")
        self.calendar = [c.strip() for c in str(options.get("calendar") or "").split(",") if c.strip()]
        self.raw = reads_history(i.name for i in manifest.inputs)
        self.combines = combines(self.pre, self.raw)
        if self.frequency is not None and self.frequency not in self.pre.frequencies:
            raise ValueError(f"frequency {self.frequency!r} is not served by {manifest.name} "
                             f"({', '.join(self.pre.frequencies)})")

    def _series(self, record: dict) -> dict:
        """One series -> what its items and its row are made from; SeriesError / ApiError say why it is refused."""
        lim, pre = self.limits, self.pre
        values = np.asarray(record["values"], dtype=np.float64)
        stamps = np.asarray(record["timestamps"], dtype="datetime64[s]")
        covs = record.get("covariates") or {}
        past: dict[str, list] = {}
        future_covs: dict[str, list] = {}
        if covs:
            values, stamps, past, future_covs = split_future(values, stamps, covs)
        if len(values) > lim.max_points:
            raise SeriesError("series_too_long", f"{len(values)} points exceed the limit of {lim.max_points}")
        frequency = self.frequency
        if frequency is None:
            if len(np.unique(stamps)) < 2:
                raise SeriesError("frequency_required", "give the job a frequency: it cannot be inferred from "
                                  "fewer than two distinct timestamps")
            frequency = infer_frequency(stamps)
            if frequency not in pre.frequencies:
                raise SeriesError("unsupported_frequency", f"inferred frequency {frequency!r} is not served")
        regular, last_ts, report = regularize(values, stamps, frequency, lim.max_points, lim.max_gap_fraction)
        max_h = min(pre.max_horizon[frequency], lim.max_horizon)
        horizon = self.horizon or max_h
        if horizon > max_h:
            raise SeriesError("horizon_too_long", f"horizon {horizon} exceeds {max_h} steps at frequency {frequency}")
        if len(regular) < pre.min_history:
            raise SeriesError("series_too_short", f"need at least {pre.min_history} regular points, got "
                              f"{len(regular)}")
        future = future_timestamps(last_ts, frequency, horizon)
        offset, effects, nonneg = None, None, bool(np.all(regular >= 0))
        if covs or self.calendar:  # as the service: the covariates' effect where the series' backtest says so
            names, x, x_future = regressors(past, future_covs, len(values), stamps, frequency, horizon,
                                            lim.max_points, len(regular))
            fit = fit_series(regular, last_ts, future, frequency, horizon, names, x, x_future, self.calendar)
            regular = fit.series
            offset = fit.offset if any(fit.used) else None
            effects = [{"name": n, "effect": e, "t_value": t, "used": u}
                       for n, e, t, u in zip(fit.names, fit.effects, fit.t_values, fit.used)]
        else:
            regular, _ = remove_shift(regular)  # as the service: a level shift is forecast from the new level
        items = [model_item(pre, regular, frequency, future[0], self.raw)]
        cuts = backtest_cuts(len(regular), horizon) if self.combines else []
        items += [model_item(pre, regular[:c], frequency, past_timestamp(last_ts, frequency, c, len(regular)),
                             self.raw) for c in cuts]
        return {"regular": regular, "frequency": frequency, "horizon": horizon, "future": future, "report": report,
                "items": items, "offset": offset, "effects": effects, "nonneg": nonneg}

    def prepare(self, records: Sequence[dict]) -> Prepared:
        out = Prepared(keys=[str(r["key"]) for r in records], states=[None] * len(records))
        for i, record in enumerate(records):
            try:
                series = self._series(record)
            except SeriesError as exc:
                out.errors[i] = (exc.code, str(exc))
                continue
            except ApiError as exc:  # the covariates' and the calendar's refusals, with the service's codes
                out.errors[i] = (exc.code, exc.message)
                continue
            except (ValueError, TypeError, KeyError) as exc:  # malformed timestamps or values: this series' row
                out.errors[i] = ("invalid_series", f"{type(exc).__name__}: {exc}")
                continue
            items = series.pop("items")
            for item in items:
                out.items.append(item.x)
                out.owners.append(i)
            series["scaling"] = [(item.loc, item.scale) for item in items]
            series["used"], series["padded"] = items[0].used, items[0].padded
            out.states[i] = series
        return out

    def finish(self, prepared: Prepared, outputs: Sequence[np.ndarray]) -> list[dict[str, Any]]:
        forecasts: dict[int, tuple[list[float], np.ndarray, str, float | None]] = {}
        to_combine: list[tuple[int, list[np.ndarray]]] = []
        for i, outs in enumerate(prepared.outputs_of(outputs)):
            if i in prepared.errors:
                continue
            s = prepared.states[i]
            n, horizon = len(s["regular"]), s["horizon"]
            qs = [quantile_forecast(out, self.pre, loc, scale, horizon if k == 0 else backtest_steps(n, horizon))
                  for k, (out, (loc, scale)) in enumerate(zip(outs, s["scaling"]))]
            if self.combines:
                to_combine.append((i, [q for _, q in qs]))
            else:
                forecasts[i] = (qs[0][0], qs[0][1], "theta" if self.raw else "model", None)
        if to_combine:  # every series of the chunk in one pass of the classical fits
            states = [prepared.states[i] for i, _ in to_combine]
            combined = combine_many([s["regular"] for s in states], [s["frequency"] for s in states],
                                    [s["horizon"] for s in states], [q for _, q in to_combine])
            for (i, _), fc in zip(to_combine, combined):
                forecasts[i] = (list(QUANTILES), fc.quantiles, fc.method, fc.backtest_mase)
        rows = []
        for i in range(len(prepared.keys)):
            if i in prepared.errors:
                rows.append(error_row(self.COLUMNS, *prepared.errors[i]))
                continue
            s = prepared.states[i]
            levels, q, method, mase = forecasts[i]
            if s["offset"] is not None:
                q = q + s["offset"][:, None]
                q = np.maximum(q, 0.0) if s["nonneg"] else q
            band = bands(levels, q)
            rows.append({"frequency": s["frequency"], "timestamps": [t.item() for t in s["future"]],
                         "point": q[:, levels.index(0.5)].tolist(),
                         **{k: None if v is None else v.tolist() for k, v in band.items()},
                         "quantile_levels": [float(x) for x in levels], "quantiles": q.tolist(), "method": method,
                         "backtest_mase": mase, "points": s["report"]["points"], "imputed": s["report"]["imputed"],
                         "duplicates_merged": s["report"]["duplicates_merged"], "used": s["used"],
                         "padded": s["padded"], "covariates_used": None if s["effects"] is None else bool(
                             s["offset"] is not None),
                         "covariate_effects": None if s["effects"] is None else json.dumps(s["effects"]),
                         "error_code": None, "error": None})
        return rows


# the family's `triserve batch` commands: forecast (this module), forecast-panel and forecast-backtest (batch_tables.py)
ADAPTERS = (Adapter, PanelAdapter, BacktestAdapter)
