"""Forecast endpoint: regularise -> last window -> scale -> runner -> unscale + intervals."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
from fastapi import APIRouter, Depends

from configs.deployments import Deployment
from families.forecast.limits import Limits
from models.manifest import Manifest
from services.common.errors import ApiError, ErrorResponse
from services.common.inference import run_task
from observability.metrics import ITEMS, labelled
from services.common.request_context import StageClock
from services.common.rollout import ServedModel
from services.common.schemas import ModelInfo
from families.forecast.preprocess import (FIXED_STEPS, SeriesError, future_timestamps, last_window, regularize,
                                         scale_windows, unscale)
from families.forecast.postprocess import with_intervals
from families.forecast.schemas import ForecastPoint, ForecastRequest, ForecastResponse, InputReport
from services.context import ServingContext
from services.gateway_deps import CallContext, bind, current_context, finish, inference_guard

router = APIRouter(prefix="/v1", tags=["forecast"])
# A window whose points sit this many training scale units from its own mean is input the model cannot answer
# sensibly: refuse it as the client's problem (422), instead of letting the model's garbage count against it.
MAX_INPUT_DEVIATION = 200.0
ERRORS = {code: {"model": ErrorResponse} for code in (400, 413, 415, 422, 503)}


def _timestamps(body: ForecastRequest) -> np.ndarray:
    if body.timestamps is not None:
        ts = [t if t.tzinfo is None else t.astimezone(timezone.utc).replace(tzinfo=None)
              for t in body.timestamps]
        return np.array(ts, dtype="datetime64[s]")
    start = np.datetime64(body.start if body.start.tzinfo is None else
                          body.start.astimezone(timezone.utc).replace(tzinfo=None), "s")
    n = len(body.values)
    if body.frequency == "MS":
        return (np.datetime64(start, "M") + np.arange(n)).astype("datetime64[s]")
    return start + np.arange(n) * FIXED_STEPS[body.frequency]


@dataclass
class ForecastPipeline:
    """One forecast deployment: its limits, and the contract (context, horizon) of the primary it serves."""

    ctx: ServingContext
    deployment: Deployment
    limits: Limits

    @property
    def contract(self) -> Manifest:
        """The primary's serving manifest: the context and horizon every version of this deployment honours."""
        return self.ctx.served(self.deployment.name).manifest

    async def forecast(self, body: ForecastRequest, call: CallContext) -> ForecastResponse:
        clock = StageClock()
        ctx, dep = self.ctx, self.deployment
        lim = self.limits
        if len(body.values) > lim.max_points:
            raise ApiError(422, "series_too_long", f"{len(body.values)} points exceed the limit of {lim.max_points}",
                           {"limit": lim.max_points, "received": len(body.values)})
        if body.timestamps is not None and len(body.timestamps) != len(body.values):
            raise ApiError(422, "length_mismatch", "values and timestamps must have the same length",
                           {"values": len(body.values), "timestamps": len(body.timestamps)})
        values = np.array([np.nan if v is None else v for v in body.values], dtype=np.float64)
        try:
            regular, last_ts, report = regularize(values, _timestamps(body), body.frequency, lim.max_points,
                                                  lim.max_gap_fraction)
        except SeriesError as exc:
            raise ApiError(422, exc.code, str(exc), exc.details) from exc
        primary = self.contract.preprocess
        max_h = min(primary.horizon, lim.max_horizon)
        if body.horizon > max_h:
            raise ApiError(422, "horizon_too_long", f"horizon {body.horizon} exceeds {max_h}", {"limit": max_h})
        if len(regular) < primary.context:
            raise ApiError(422, "series_too_short", f"need at least {primary.context} regular points, got "
                           f"{len(regular)}", {"required": primary.context, "received": len(regular)})
        scaled, _ = scale_windows(last_window(regular, primary.context), primary.scale)
        if np.abs(scaled).max(initial=0.0) > MAX_INPUT_DEVIATION:
            raise ApiError(422, "input_out_of_range", "the series' last window swings far beyond anything the model "
                           "was trained on", {"max_deviation_in_scale_units": round(float(np.abs(scaled).max()), 1),
                                             "limit": MAX_INPUT_DEVIATION})
        ctx.protection.access.capacity(dep.name, dep.family)
        bind(call, dep.name)
        labelled(ITEMS, dep.name).observe(1)
        levels: dict[ServedModel, np.ndarray] = {}
        spreads: dict[ServedModel, float] = {}

        def items_for(model: ServedModel) -> list[np.ndarray]:
            pre = model.manifest.preprocess
            window = last_window(regular, pre.context)
            scaled, levels[model] = scale_windows(window, pre.scale)
            spreads[model] = float(np.std(window))
            return list(scaled)

        result = await run_task(ctx, dep, items_for, body.model, clock, call.deadline, request_id=call.request_id,
                                route_key=call.route_key, arrived=call.arrived)
        pre = result.served.manifest.preprocess
        if ctx.quality is not None:
            ctx.quality.observe(result.model, "level", [float(levels[result.served][0])])
            ctx.quality.observe(result.model, "spread", [spreads[result.served]])
        mean = unscale(result.outputs[0][None, :], levels[result.served], pre.scale)[0][: body.horizon]
        bands = with_intervals(mean, pre.interval_quantiles)
        stamps = future_timestamps(last_ts, body.frequency, body.horizon)
        points = [ForecastPoint(timestamp=datetime.fromisoformat(str(t)).replace(tzinfo=timezone.utc),
                                mean=round(float(mean[i]), 6),
                                **{k: round(float(v[i]), 6) for k, v in bands.items()})
                  for i, t in enumerate(stamps)]
        clock.stage("postprocess")
        return finish(dep.name, ForecastResponse(
            request_id=call.request_id, deployment=dep.name, model=ModelInfo(name=result.model, version=result.version),
            degraded=result.degraded, degraded_reason=result.degraded_reason, timings=clock.timings(result.infer_ms),
            forecast=points, input=InputReport(**report, used=pre.context)), call, result.batch)


@router.post("/forecast", response_model=ForecastResponse, responses=ERRORS,
             summary="Forecast the next points of a series, with 50% and 90% intervals")
async def forecast(body: ForecastRequest, call: CallContext = Depends(inference_guard("forecast"))) -> ForecastResponse:
    ctx = current_context()
    return await ctx.pipeline(await ctx.resolve("forecast", body.deployment)).forecast(body, call)
