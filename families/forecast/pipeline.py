"""The forecast pipeline: regularise -> per-model item (scaled history) -> runner -> unscaled quantiles."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from configs.deployments import Deployment
from families.forecast.ensemble import backtest_cuts, backtest_steps, combine
from families.forecast.features import QUANTILES, infer_frequency, step_timestamps
from families.forecast.limits import Limits
from families.forecast.manifest import ForecastPreprocess
from families.forecast.postprocess import bands, quantile_forecast
from families.forecast.preprocess import (
    Item,
    SeriesError,
    future_timestamps,
    model_item,
    reads_history,
    regularize,
    series_timestamps,
)
from families.forecast.schemas import ForecastPoint, ForecastRequest, ForecastResponse, InputReport
from kernel.call import CallContext, bind, finish
from kernel.context import ServingContext
from kernel.errors import ApiError
from kernel.request_context import StageClock
from kernel.routing.inference import run_task
from kernel.routing.rollout import ServedModel
from kernel.schemas import ModelInfo
from models.manifest import preprocess_as
from observability.metrics import ITEMS, labelled


def _utc(t: datetime) -> np.datetime64:
    return np.datetime64(t if t.tzinfo is None else t.astimezone(UTC).replace(tzinfo=None), "s")


def _frequency(body: ForecastRequest, stamps: np.ndarray | None) -> tuple[str, bool]:
    """(frequency, inferred?): as given, or from the median spacing of the client's timestamps (UTC)."""
    if body.frequency is not None:
        return body.frequency, False
    assert stamps is not None  # ForecastRequest: 'start' needs 'frequency', so here timestamps are given
    if len(np.unique(stamps)) < 2:
        raise ApiError(422, "frequency_required", "give 'frequency': it cannot be inferred from fewer than two "
                       "distinct timestamps", {"timestamps": len(stamps)})
    return infer_frequency(stamps), True


def past_timestamp(last_ts: np.datetime64, frequency: str, cut: int, n: int) -> np.datetime64:
    """The timestamp of point `cut` (the first step a history cut to `cut` points forecasts); last_ts is point
    n - 1's."""
    return step_timestamps(last_ts, frequency, 1, offset=cut - (n - 1))[0]


def combines(pre: ForecastPreprocess, raw_history: bool) -> bool:
    """A model the ensemble weighs: a global-contract graph with the standard quantiles (the numpy Theta fallback,
    which reads the raw history, answers alone as the degraded path; so does a user's window model)."""
    return pre.contract == "global" and not raw_history and tuple(pre.quantiles) == QUANTILES


@dataclass
class ForecastPipeline:
    """One forecast deployment: its limits, and the contract (frequencies, horizons, minimum history) of the primary
    it serves."""

    ctx: ServingContext
    deployment: Deployment
    limits: Limits

    @property
    def contract(self) -> ForecastPreprocess:
        """The primary's contract: what every request to this deployment is checked against."""
        return preprocess_as(self.ctx.served(self.deployment.name).manifest, ForecastPreprocess)

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
            raise ApiError(422, "unsupported_frequency", f"deployment {self.deployment.name!r} does not forecast "
                           f"frequency {frequency!r}", {"frequency": frequency, "supported": served,
                                                        "inferred": inferred})
        return frequency, inferred, stamps

    async def run(self, body: ForecastRequest, call: CallContext) -> ForecastResponse:
        clock = StageClock()
        ctx, dep, lim, contract = self.ctx, self.deployment, self.limits, self.contract
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
        ctx.protection.access.capacity(dep.name, dep.family)
        bind(call, dep.name)
        labelled(ITEMS, dep.name).observe(1)
        items: dict[ServedModel, list[Item]] = {}
        cuts = backtest_cuts(len(regular), horizon)

        def items_for(model: ServedModel) -> list[np.ndarray]:
            pre = preprocess_as(model.manifest, ForecastPreprocess)
            if frequency not in pre.frequencies or len(regular) < pre.min_history:
                raise ApiError(422, "unsupported_by_model", f"{model.manifest.name} cannot forecast this series "
                               f"({frequency}, {len(regular)} points)", {"model": model.manifest.name})
            raw = reads_history(i.name for i in model.manifest.inputs)
            items[model] = [model_item(pre, regular, frequency, future[0], raw)]
            if combines(pre, raw):  # the backtest origins, forecast in the same runner call
                items[model] += [model_item(pre, regular[:c], frequency, past_timestamp(last_ts, frequency, c, len(
                    regular)), raw) for c in cuts]
            return [item.x for item in items[model]]

        result = await run_task(ctx, dep, items_for, body.model, clock, call.deadline, request_id=call.request_id,
                                route_key=call.route_key, arrived=call.arrived)
        served_items = items[result.served]
        item = served_items[0]
        if ctx.quality is not None:
            ctx.quality.observe(result.model, "relative_spread", [item.scale / (abs(item.loc) + item.scale)])
        served_pre = preprocess_as(result.served.manifest, ForecastPreprocess)
        outputs = [quantile_forecast(out, served_pre, it.loc, it.scale, horizon if k == 0 else backtest_steps(
            len(regular), horizon)) for k, (out, it) in enumerate(zip(result.outputs, served_items))]
        levels, q = outputs[0]
        served_raw = reads_history(i.name for i in result.served.manifest.inputs)
        if combines(served_pre, served_raw):  # the served forecaster: the model and the classical methods
            fc = combine(regular, frequency, horizon, [o[1] for o in outputs])
            q, levels = fc.quantiles, list(QUANTILES)
            method = {"method": fc.method, "method_weights": fc.weights, "backtest_mase": fc.backtest_mase,
                      "backtest_origins": fc.origins, "interval_calibration": fc.calibration}
        else:  # a model alone: the degraded fallback, or a model whose output the ensemble cannot read
            name = "theta" if served_raw else "model"
            method = {"method": name, "method_weights": {name: 1.0}, "backtest_mase": None, "backtest_origins": 0,
                      "interval_calibration": "model"}
        median = q[:, levels.index(0.5)]
        band = bands(levels, q)
        keys = [f"{level:g}" for level in levels]
        points = [ForecastPoint(timestamp=datetime.fromisoformat(str(t)).replace(tzinfo=UTC),
                                point=float(median[i]),
                                **{k: None if v is None else float(v[i]) for k, v in band.items()},
                                quantiles={k: float(q[i, j]) for j, k in enumerate(keys)})
                  for i, t in enumerate(future)]
        clock.stage("postprocess")
        return finish(dep.name, ForecastResponse(
            request_id=call.request_id, deployment=dep.name, model=ModelInfo(name=result.model, version=result.version),
            degraded=result.degraded, degraded_reason=result.degraded_reason, timings=clock.timings(result.infer_ms),
            forecast=points, input=InputReport(**report, frequency=frequency, frequency_inferred=inferred,
                                               used=item.used, padded=item.padded, **method)), call,
            result.batch)

