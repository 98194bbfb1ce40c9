"""What the forecast family's hooks do with a series: validate and regularise it, build its items per served model
(the scaled history and its backtest origins), and read the runner's outputs back as unscaled quantiles combined with
the classical methods (families/forecast/family.py wires them into the kernel's lifecycle)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from triserve.families.forecast import backtest
from triserve.families.forecast.ensemble import StaticUse, backtest_cuts, backtest_steps, combine_many, combines
from triserve.families.forecast.features import QUANTILES, infer_frequency
from triserve.families.forecast.limits import Limits
from triserve.families.forecast.manifest import ForecastPreprocess
from triserve.families.forecast.postprocess import bands, quantile_forecast
from triserve.families.forecast.preprocess import (
    Item,
    SeriesError,
    future_timestamps,
    model_item,
    past_timestamp,
    reads_history,
    regularize,
    series_timestamps,
)
from triserve.families.forecast.regressors import fit_series, regressors
from triserve.families.forecast.schemas import (
    BacktestRequest,
    CalendarFeature,
    CovariateEffect,
    CovariateReport,
    ForecastPoint,
    ForecastRequest,
    InputReport,
    LevelShiftReport,
    PanelForecastRequest,
    SeriesForecast,
    SeriesInput,
    StaticCategorical,
    StaticReport,
)
from triserve.families.forecast.shifts import remove as remove_shift
from triserve.kernel.errors import ApiError
from triserve.kernel.family import Answer, DeploymentView
from triserve.kernel.schemas import ModelInfo
from triserve.kernel.served import ServedModel
from triserve.models.manifest import preprocess_as


def _utc(t: datetime) -> np.datetime64:
    return np.datetime64(t if t.tzinfo is None else t.astimezone(UTC).replace(tzinfo=None), "s")


def _datetime(t: np.datetime64) -> datetime:
    return datetime.fromisoformat(str(t.astype("datetime64[s]"))).replace(tzinfo=UTC)


def _frequency(body: ForecastRequest, stamps: np.ndarray | None) -> tuple[str, bool]:
    """(frequency, inferred?): as given, or from the median spacing of the client's timestamps (UTC)."""
    if body.frequency is not None:
        return body.frequency, False
    assert stamps is not None  # ForecastRequest: 'start' needs 'frequency', so here timestamps are given
    if len(np.unique(stamps)) < 2:
        raise ApiError(422, "frequency_required", "give 'frequency': it cannot be inferred from fewer than two "
                       "distinct timestamps", {"timestamps": len(stamps)})
    return infer_frequency(stamps), True


@dataclass
class Prepared:
    """One series, validated and regularised: what its model items and its answer are built from."""

    regular: np.ndarray
    last_ts: np.datetime64
    report: dict
    frequency: str
    inferred: bool
    horizon: int
    future: np.ndarray
    cuts: list[int]
    offset: np.ndarray | None = None  # [horizon] the covariates' effect added back to every quantile
    nonneg: bool = False  # the history is non-negative: so is the forecast (after the offset)
    actual: np.ndarray | None = None  # a backtest origin: what followed it (backtest.py)
    history: np.ndarray | None = None  # a backtest origin: the regular history before it
    static: dict[str, str] | None = None  # a panel series' static categoricals (pooling.py)


@dataclass
class SeriesForecaster:
    """One forecast deployment: its limits, and the contract (frequencies, horizons, minimum history) of the primary
    it serves."""

    view: DeploymentView

    @property
    def limits(self) -> Limits:
        return self.view.limits

    @property
    def contract(self) -> ForecastPreprocess:
        """The primary's contract: what every request to this deployment is checked against."""
        return preprocess_as(self.view.primary().manifest, ForecastPreprocess)

    def _check(self, body: ForecastRequest) -> tuple[str, bool, np.ndarray | None]:
        """(frequency, inferred?, the client's timestamps in UTC or None when it gave `start`)."""
        lim = self.limits
        if len(body.values) > lim.max_points:
            raise ApiError(422, "series_too_long", f"{len(body.values)} points exceed the limit of {lim.max_points}",
                           {"limit": lim.max_points, "received": len(body.values)})
        if body.timestamps is not None and len(body.timestamps) != len(body.values):
            raise ApiError(422, "length_mismatch", "values and timestamps must have the same length",
                           {"values": len(body.values), "timestamps": len(body.timestamps)})
        stamps = None if body.timestamps is None else np.array([_utc(t) for t in body.timestamps],
                                                                dtype="datetime64[s]")
        frequency, inferred = _frequency(body, stamps)
        served = self.contract.frequencies
        if frequency not in served:
            raise ApiError(422, "unsupported_frequency", f"deployment {self.view.name!r} does not forecast "
                           f"frequency {frequency!r}", {"frequency": frequency, "supported": served,
                                                        "inferred": inferred})
        return frequency, inferred, stamps

    def prepare(self, body: ForecastRequest | SeriesInput, frequency: str | None = None,
                horizon: int | None = None, calendar: list[CalendarFeature] | None = None) -> Prepared:
        """Validate one series against the deployment's limits and the primary's contract; regularise it; remove a
        level shift (shifts.py) and, with covariates, their effect where the series' backtest says it helps."""
        lim, contract = self.limits, self.contract
        if isinstance(body, SeriesInput):  # a panel's series: the panel's frequency, horizon and calendar apply
            body = ForecastRequest(values=body.values, timestamps=body.timestamps, start=body.start,
                                   frequency=frequency, horizon=horizon, covariates=body.covariates,
                                   future_covariates=body.future_covariates, calendar=calendar)
        frequency, inferred, stamps = self._check(body)
        values = np.array([np.nan if v is None else v for v in body.values], dtype=np.float64)
        if stamps is None:
            assert body.start is not None  # ForecastRequest: exactly one of 'timestamps' or 'start'
            stamps = series_timestamps(_utc(body.start), frequency, len(values))
        try:
            regular, last_ts, report = regularize(values, stamps, frequency, lim.max_points, lim.max_gap_fraction)
        except SeriesError as exc:
            raise ApiError(422, exc.code, str(exc), exc.details) from exc
        max_h = min(contract.max_horizon[frequency], lim.max_horizon)
        horizon = body.horizon or max_h
        if horizon > max_h:
            raise ApiError(422, "horizon_too_long", f"horizon {horizon} exceeds {max_h} steps at frequency "
                           f"{frequency}", {"limit": max_h, "frequency": frequency})
        if len(regular) < contract.min_history:
            raise ApiError(422, "series_too_short", f"need at least {contract.min_history} regular points, got "
                           f"{len(regular)}", {"required": contract.min_history, "received": len(regular)})
        future = future_timestamps(last_ts, frequency, horizon)
        offset, nonneg = None, bool(np.all(regular >= 0))
        if body.covariates or body.future_covariates or body.calendar:
            names, x, x_future = regressors(body.covariates or {}, body.future_covariates or {}, len(body.values),
                                            stamps, frequency, horizon, lim.max_points, len(regular))
            fit = fit_series(regular, last_ts, future, frequency, horizon, names, x, x_future, body.calendar or [])
            regular, shift = fit.series, fit.shift
            offset = fit.offset if any(fit.used) else None
            report["covariates"] = CovariateReport(
                used=any(fit.used), backtest_error_with=fit.error_with, backtest_error_without=fit.error_without,
                effects=[CovariateEffect(name=nm, effect=e, t_value=t, used=u)
                         for nm, e, t, u in zip(fit.names, fit.effects, fit.t_values, fit.used)])
        else:
            regular, shift = remove_shift(regular)
        report["level_shift"] = None if shift is None else LevelShiftReport(
            at=_datetime(past_timestamp(last_ts, frequency, shift.at, len(regular))), size=shift.size)
        return Prepared(regular, last_ts, report, frequency, inferred, horizon, future,
                        backtest_cuts(len(regular), horizon), offset, nonneg)

    @staticmethod
    def items(series: Prepared, model: ServedModel) -> list[Item]:
        """The model's items for one series: the full history, then each backtest origin when the ensemble weighs
        this model (forecast in the same runner call)."""
        pre = preprocess_as(model.manifest, ForecastPreprocess)
        regular, frequency = series.regular, series.frequency
        if frequency not in pre.frequencies or len(regular) < pre.min_history:
            raise ApiError(422, "unsupported_by_model", f"{model.manifest.name} cannot forecast this series "
                           f"({frequency}, {len(regular)} points)", {"model": model.manifest.name})
        raw = reads_history(i.name for i in model.manifest.inputs)
        items = [model_item(pre, regular, frequency, series.future[0], raw)]
        if combines(pre, raw):
            items += [model_item(pre, regular[:c], frequency, past_timestamp(series.last_ts, frequency, c, len(
                regular)), raw) for c in series.cuts]
        return items

    def answer(self, prepared: list[Prepared], served: ServedModel, items: list[list[Item]],
               outputs: list[list[np.ndarray]], model: str) -> list[tuple[list[ForecastPoint], InputReport]]:
        """Model outputs -> each series' forecast: combined with the classical methods (all series in one pass,
        ensemble.combine_many, a panel's static categoricals pooled) when the served model is one the ensemble
        weighs, else the model alone."""
        pre = preprocess_as(served.manifest, ForecastPreprocess)
        raw = reads_history(i.name for i in served.manifest.inputs)
        scaled = []
        for series, its, outs in zip(prepared, items, outputs):
            self.view.observe(model, "relative_spread", [its[0].scale / (abs(its[0].loc) + its[0].scale)])
            steps = backtest_steps(len(series.regular), series.horizon)
            scaled.append([quantile_forecast(out, pre, it.loc, it.scale, series.horizon if k == 0 else steps)
                           for k, (out, it) in enumerate(zip(outs, its))])
        if combines(pre, raw):  # the served forecaster: the model and the classical methods
            statics = [s.static or {} for s in prepared]
            fcs = combine_many([s.regular for s in prepared], [s.frequency for s in prepared],
                               [s.horizon for s in prepared], [[o[1] for o in outs] for outs in scaled],
                               statics if any(statics) else None)
            results = [(fc.quantiles, list(QUANTILES),
                        {"method": fc.method, "method_weights": fc.weights, "backtest_mase": fc.backtest_mase,
                         "backtest_origins": fc.origins, "interval_calibration": fc.calibration,
                         "static": _static_report(fc.static)}) for fc in fcs]
        else:  # a model alone: the degraded fallback, or a model whose output the ensemble cannot read
            name = "theta" if raw else "model"
            results = [(outs[0][1], outs[0][0], {"method": name, "method_weights": {name: 1.0},
                                                 "backtest_mase": None, "backtest_origins": 0,
                                                 "interval_calibration": "model"}) for outs in scaled]
        answers = []
        for series, its, (q, levels, method) in zip(prepared, items, results):
            if series.offset is not None:
                q = q + series.offset[:, None]
                q = np.maximum(q, 0.0) if series.nonneg else q
            median = q[:, levels.index(0.5)]
            band = bands(levels, q)
            keys = [f"{level:g}" for level in levels]
            points = [ForecastPoint(timestamp=_datetime(t),
                                    point=float(median[i]),
                                    **{k: None if v is None else float(v[i]) for k, v in band.items()},
                                    quantiles={k: float(q[i, j]) for j, k in enumerate(keys)})
                      for i, t in enumerate(series.future)]
            answers.append((points, InputReport(**series.report, frequency=series.frequency,
                                                frequency_inferred=series.inferred, used=its[0].used,
                                                padded=its[0].padded, **method)))
        return answers

    def validate(self, body: ForecastRequest | PanelForecastRequest | BacktestRequest) -> list[Prepared]:
        """One series, a backtest's origins, or a panel's series all validated first (a bad series refuses the
        request, naming it)."""
        if isinstance(body, BacktestRequest):
            return backtest.origins(self, body)
        if not isinstance(body, PanelForecastRequest):
            return [self.prepare(body)]
        lim = self.limits
        if len(body.series) > lim.max_series:
            raise ApiError(422, "too_many_series", f"{len(body.series)} series exceed the limit of {lim.max_series}",
                           {"limit": lim.max_series, "received": len(body.series)})
        points_total = sum(len(s.values) for s in body.series)
        if points_total > lim.max_panel_points:
            raise ApiError(422, "panel_too_large", f"{points_total} points in all exceed the limit of "
                           f"{lim.max_panel_points}", {"limit": lim.max_panel_points, "received": points_total})
        _check_statics(body)
        prepared = []
        for index, s in enumerate(body.series):
            try:
                prepared.append(self.prepare(s, body.frequency, body.horizon, body.calendar))
            except ApiError as exc:
                raise ApiError(exc.status, exc.code, f"series {index} ({s.id!r}): {exc.message}",
                               {"index": index, "id": s.id, **(exc.details or {})}) from exc
            prepared[-1].static = s.static
        return prepared

    def parts(self, prepared: list[Prepared]) -> list[list[Prepared]]:
        """A panel forecast in chunks of at most one runner batch of items each, one chunk after the other (each
        admitted like a request, so a panel never floods the queue), the classical fits of a chunk in one pass."""
        per_series = 1 + max(len(p.cuts) for p in prepared)
        chunk = max(1, self.view.batch_limit() // per_series)
        return [prepared[start: start + chunk] for start in range(0, len(prepared), chunk)]

    def respond(self, body: ForecastRequest | PanelForecastRequest | BacktestRequest,
                answers: list[Answer]) -> dict[str, Any]:
        unpacked = []
        for answer in answers:
            outputs, at = [], 0
            for its in answer.state:
                outputs.append(answer.result.outputs[at: at + len(its)])
                at += len(its)
            unpacked.append(outputs)
        answered = []
        if _pooled_panel(body, answers):  # static categoricals: the panel's chunks answered together (pooling)
            result = answers[0].result
            together = self.answer([p for a in answers for p in a.part], result.served,
                                   [s for a in answers for s in a.state], [o for outs in unpacked for o in outs],
                                   result.model)
            at = 0
            for answer in answers:
                answered.append((answer.result, together[at: at + len(answer.part)]))
                at += len(answer.part)
        else:
            for answer, outputs in zip(answers, unpacked):
                result = answer.result
                answered.append((result, self.answer(answer.part, result.served, answer.state, outputs,
                                                     result.model)))
        if isinstance(body, BacktestRequest):
            return backtest.report([p for answer in answers for p in answer.part],
                                   [pr for _, part in answered for pr in part], len(answers))
        if not isinstance(body, PanelForecastRequest):
            [(_, [(points, report)])] = answered
            return {"forecast": points, "input": report}
        series, ids = [], iter(s.id for s in body.series)
        for result, part in answered:
            info = ModelInfo(name=result.model, version=result.version)
            series += [SeriesForecast(id=next(ids), model=info, degraded=result.degraded, forecast=points,
                                      input=report) for points, report in part]
        return {"runner_calls": len(answers), "series": series}


def _check_statics(body: PanelForecastRequest) -> None:
    """A panel's static categoricals name the same categoricals on every series (or on none)."""
    given = [s.static for s in body.series]
    if all(st is None for st in given):
        return
    names = sorted(set().union(*(set(st or {}) for st in given)))
    for index, (s, st) in enumerate(zip(body.series, given)):
        missing = [name for name in names if name not in (st or {})]
        if missing:
            raise ApiError(422, "static_missing", f"series {index} ({s.id!r}) lacks the static categorical(s) "
                           f"{missing} that other series of the panel give: give every series the same names",
                           {"index": index, "id": s.id, "missing": missing, "expected": names})


def _pooled_panel(body: Any, answers: list[Answer]) -> bool:
    """A panel with static categoricals whose chunks were all answered by the same model version: answered in one
    pass so categories pool across chunks (a chunk answered by another model, e.g. degraded, pools apart)."""
    if not isinstance(body, PanelForecastRequest) or not any(s.static for s in body.series) or len(answers) < 2:
        return False
    first = answers[0].result
    return all((a.result.model, a.result.version, a.result.degraded) == (first.model, first.version,
                                                                        first.degraded) for a in answers)


def _static_report(use: StaticUse | None) -> StaticReport | None:
    if use is None:
        return None
    return StaticReport(used=use.used, pooled_by=use.pooled_by, series_in_category=use.group_size,
                        categoricals=[StaticCategorical(name=c.name, categories=c.groups, used=c.used,
                                                        backtest_error_own=c.error_own,
                                                        backtest_error_pooled=c.error_pooled)
                                      for c in use.categoricals])
