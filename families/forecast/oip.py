"""Forecasting on the Open Inference Protocol v2 (kernel/family.OipSurface): VALUES (+ TIMESTAMPS and covariates,
oip_fields.py) in; the forecast's timestamps, points, quantiles and bands out; as a raw tensor model the graph's own
scaled inputs."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from triserve.families.forecast import oip_fields
from triserve.families.forecast.features import N_FEATURES
from triserve.families.forecast.preprocess import pack_global
from triserve.families.forecast.schemas import ForecastResponse
from triserve.kernel.family import OipSurface
from triserve.kernel.tensors import TensorMeta, bad_request, check_batch, check_finite

BANDS = ("lower_50", "upper_50", "lower_90", "upper_90")


def _band(name: str):
    return lambda r: [np.nan if getattr(p, name) is None else getattr(p, name) for p in r.forecast]


def _levels(response: ForecastResponse) -> list[str]:
    return list(response.forecast[0].quantiles) if response.forecast else []


OIP_INPUTS = (TensorMeta("VALUES", "FP64", (-1,), also=("FP32",), field="values"),
              TensorMeta("TIMESTAMPS", "BYTES", (-1,), optional=True, field="timestamps"),
              TensorMeta("COVARIATES", "FP64", (-1, -1), also=("FP32",), optional=True, field="covariates"),
              TensorMeta("FUTURE_COVARIATES", "FP64", (-1, -1), also=("FP32",), optional=True,
                         field="future_covariates"))
OIP_OUTPUTS = (
    TensorMeta("TIMESTAMPS", "BYTES", (-1,), value=lambda r: [p.model_dump(mode="json")["timestamp"]
                                                               for p in r.forecast]),
    TensorMeta("POINT", "FP64", (-1,), value=lambda r: [p.point for p in r.forecast]),
    TensorMeta("QUANTILES", "FP64", (-1, -1),
               value=lambda r: np.array([[p.quantiles[k] for k in _levels(r)] for p in r.forecast]))) + tuple(
    TensorMeta(n.upper(), "FP64", (-1,), value=_band(n)) for n in BANDS)


@dataclass(frozen=True)
class ForecastOip(OipSurface):
    """Forecasting on OIP: VALUES (+ TIMESTAMPS, covariates) in, the forecast's points, quantiles and bands out; as
    a raw tensor model the graph's own scaled inputs."""

    def tensor_items(self, view, served, arrays, batch_cap):
        """Raw tensor inference: the graph's own inputs (global: context, mask, freq, features[, scaling]; window:
        [n, context]), already scaled by the caller; outputs come back in the same scaled units."""
        manifest = served.manifest
        pre = manifest.preprocess
        arrays = {spec.name: np.asarray(arrays[spec.name]) for spec in manifest.inputs}
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

    def request_fields(self, fields, arrays, parameters):
        """COVARIATES / FUTURE_COVARIATES [n, k] + parameters covariate_names and calendar (oip_fields.py)."""
        return oip_fields.request_fields(fields, arrays, parameters)

    def extra_parameters(self, response) -> dict[str, Any]:
        return {"input": json.dumps(response.input.model_dump()), "quantile_levels": json.dumps(_levels(response))}
