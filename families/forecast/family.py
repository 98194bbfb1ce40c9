"""The forecasting family: any series (9 frequencies, any finite scale) -> per-series scaled items (the series and
its backtest origins) -> model -> combined with classical methods by the backtest (ensemble.py) -> quantile
forecasts in the series' units."""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from families.forecast.features import N_FEATURES
from families.forecast.postprocess import check_forecast
from families.forecast.preprocess import pack_global
from families.forecast.schemas import ForecastRequest
from kernel.family import Family, RestRoute, TensorMeta

BANDS = ("lower_50", "upper_50", "lower_90", "upper_90")


class ForecastFamily(Family):
    name = "forecast"
    routes = (RestRoute("/v1/forecast", "application/json"),)
    oip_alias = "forecast"
    oip_pipeline_inputs = (TensorMeta("VALUES", "FP64", (-1,), also=("FP32",)),
                           TensorMeta("TIMESTAMPS", "BYTES", (-1,), optional=True))
    oip_pipeline_outputs = (TensorMeta("TIMESTAMPS", "BYTES", (-1,)), TensorMeta("POINT", "FP64", (-1,)),
                            TensorMeta("QUANTILES", "FP64", (-1, -1))) + tuple(
        TensorMeta(n.upper(), "FP64", (-1,)) for n in BANDS)
    grpc_method = "Forecast"
    importers = ("forecast-onnx",)

    @property
    def router(self):
        from families.forecast.service import router

        return router

    def pipeline(self, ctx, deployment):
        from families.forecast.service import ForecastPipeline

        return ForecastPipeline(ctx, deployment, ctx.limits(deployment))

    def check_outputs(self, manifest, outputs):
        for out in outputs:
            check_forecast(np.asarray(out), manifest.preprocess)

    def agreement(self, manifest, served, shadow):
        """1 - mean relative difference of the medians (scaled units: the step's spread is ~1)."""
        pre = manifest.preprocess
        s, h = np.asarray(served, np.float64), np.asarray(shadow, np.float64)
        if pre.quantiles and s.ndim == 2 and h.ndim == 2:
            s, h = s[:, pre.quantiles.index(0.5)], h[:, pre.quantiles.index(0.5)]
        denom = np.maximum(np.abs(s), 1.0)
        return float(max(0.0, 1.0 - np.mean(np.abs(s - h) / denom)))

    def oip_tensor_items(self, ctx, deployment, served, tensors, batch_cap):
        """Raw tensor inference: the graph's own inputs (global: context, mask, freq, features[, scaling]; window:
        [n, context]), already scaled by the caller; outputs come back in the same scaled units."""
        from services.protocols.oip import bad_request, check_batch, check_finite

        manifest = served.manifest
        pre = manifest.preprocess
        arrays = {spec.name: np.asarray(tensors[spec.name].data) for spec in manifest.inputs}
        first = manifest.inputs[0]
        n = arrays[first.name].shape[0] if arrays[first.name].ndim else 0
        check_batch(n, batch_cap, first.name)
        for spec in manifest.inputs:
            arr = arrays[spec.name]
            expected = [n] + [d if isinstance(d, int) else -1 for d in spec.shape[1:]]
            if arr.ndim != len(expected) or any(e not in (-1, a) for e, a in zip(expected, arr.shape)):
                raise bad_request("shape_mismatch", f"input {spec.name!r} must be {expected}, got {list(arr.shape)}",
                                  {"input": spec.name, "expected": list(spec.shape), "received": list(arr.shape)})
            check_finite(arr, spec.name)
        if pre.contract == "window":
            return [np.asarray(x, dtype=np.float64) for x in arrays[first.name]]
        scaling = arrays.get("scaling", np.tile([0.0, 1.0], (n, 1)))
        features = arrays.get("features", np.zeros((n, N_FEATURES)))
        history = arrays.get("history")
        return [pack_global(arrays["context"][i], arrays["mask"][i], int(arrays["freq"][i]), features[i],
                            float(scaling[i][0]), float(scaling[i][1]), None if history is None else history[i])
                for i in range(n)]

    async def oip_infer(self, ctx, deployment, inputs, parameters, call):
        from services.protocols.oip import Tensor, bytes_tensor, pick_params, utf8

        fields: dict[str, Any] = {"values": [float(v) for v in inputs["VALUES"].data.reshape(-1)],
                                  "deployment": deployment.name}
        if "TIMESTAMPS" in inputs:
            fields["timestamps"] = utf8(inputs["TIMESTAMPS"].data, "TIMESTAMPS")
        fields.update(pick_params(parameters, ("start", "frequency", "horizon", "model")))
        resp = await ctx.pipeline(deployment).forecast(ForecastRequest(**fields), call)
        points = resp.forecast

        def fp64(name: str, values) -> Tensor:
            arr = np.asarray(values, dtype=np.float64)
            return Tensor(name, "FP64", list(arr.shape), arr)

        levels = list(points[0].quantiles) if points else []
        outputs = [bytes_tensor("TIMESTAMPS", [p.model_dump(mode="json")["timestamp"] for p in points]),
                   fp64("POINT", [p.point for p in points]),
                   fp64("QUANTILES", [[p.quantiles[k] for k in levels] for p in points])]
        outputs += [fp64(name.upper(), [np.nan if getattr(p, name) is None else getattr(p, name) for p in points])
                    for name in BANDS]
        return outputs, resp

    def oip_extra_parameters(self, resp) -> dict[str, Any]:
        levels = list(resp.forecast[0].quantiles) if resp.forecast else []
        return {"input": json.dumps(resp.input.model_dump()), "quantile_levels": json.dumps(levels)}

    def grpc_request(self, message: Any) -> ForecastRequest:
        from services.protocols.grpc_typed import model_choice, set_fields

        fields: dict[str, Any] = {"values": list(message.values), "model": model_choice(message.model)}
        if len(message.timestamps):
            fields["timestamps"] = list(message.timestamps)
        fields.update(set_fields(message, ("start", "frequency", "horizon", "deployment")))
        return ForecastRequest(**fields)

    async def handle(self, ctx, request, call):
        return await ctx.pipeline(await ctx.resolve(self.name, request.deployment)).forecast(request, call)


FAMILY = ForecastFamily()
