"""The forecasting family: a regular series -> scaled last window -> model -> unscaled points with intervals."""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from families.base import Family, RestRoute, TensorMeta
from families.forecast.postprocess import check_forecast
from families.forecast.schemas import ForecastRequest

BANDS = ("mean", "lower_50", "upper_50", "lower_90", "upper_90")


class ForecastFamily(Family):
    name = "forecast"
    routes = (RestRoute("/v1/forecast", "application/json"),)
    oip_alias = "forecast"
    oip_pipeline_inputs = (TensorMeta("VALUES", "FP32", (-1,), also=("FP64",)),
                           TensorMeta("TIMESTAMPS", "BYTES", (-1,), optional=True))
    oip_pipeline_outputs = (TensorMeta("TIMESTAMPS", "BYTES", (-1,)),) + tuple(
        TensorMeta(n.upper(), "FP32", (-1,)) for n in BANDS)
    grpc_method = "Forecast"
    importers = ()

    @property
    def router(self):
        from families.forecast.service import router

        return router

    def pipeline(self, ctx, deployment):
        from families.forecast.service import ForecastPipeline

        return ForecastPipeline(ctx, deployment, ctx.limits(deployment))

    def check_outputs(self, manifest, outputs):
        for out in outputs:
            check_forecast(out, manifest.preprocess.horizon)

    def agreement(self, manifest, served, shadow):
        denom = np.maximum(np.abs(served), 1e-6)
        return float(max(0.0, 1.0 - np.mean(np.abs(served - shadow) / denom)))

    def oip_tensor_items(self, ctx, deployment, served, tensors, batch_cap):
        manifest = served.manifest
        from services.protocols.oip import bad_request, check_batch, check_finite

        spec = manifest.inputs[0]
        arr = tensors[spec.name].data
        context = manifest.preprocess.context
        if arr.ndim != 2 or arr.shape[1] != context:
            raise bad_request("shape_mismatch", f"input {spec.name!r} must be [n, {context}], got {list(arr.shape)}",
                              {"expected": list(spec.shape), "received": list(arr.shape)})
        check_batch(arr.shape[0], batch_cap, spec.name)
        check_finite(arr, spec.name)
        return [np.ascontiguousarray(x, dtype=np.float32) for x in arr]

    async def oip_infer(self, ctx, deployment, inputs, parameters, call):
        from services.protocols.oip import bytes_tensor, fp32_tensor, pick_params, utf8

        fields: dict[str, Any] = {"values": [float(v) for v in inputs["VALUES"].data.reshape(-1)],
                                  "deployment": deployment.name}
        if "TIMESTAMPS" in inputs:
            fields["timestamps"] = utf8(inputs["TIMESTAMPS"].data, "TIMESTAMPS")
        fields.update(pick_params(parameters, ("start", "frequency", "horizon", "model")))
        resp = await ctx.pipeline(deployment).forecast(ForecastRequest(**fields), call)
        points = resp.forecast
        outputs = [bytes_tensor("TIMESTAMPS", [p.model_dump(mode="json")["timestamp"] for p in points])]
        outputs += [fp32_tensor(name.upper(), [getattr(p, name) for p in points]) for name in BANDS]
        return outputs, resp

    def oip_extra_parameters(self, resp) -> dict[str, Any]:
        return {"input": json.dumps(resp.input.model_dump())}

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
