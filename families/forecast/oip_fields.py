"""Covariates over the Open Inference Protocol: named input tensors, one column per covariate, and the column names and
calendar features as parameters (OIP parameters are scalars: strings, numbers, booleans; tensors carry the numbers).

    COVARIATES         FP64/FP32 [points, k]   the covariates over the history, rows aligned with VALUES
    FUTURE_COVARIATES  FP64/FP32 [steps, k]    the same columns over the forecast (at least the horizon)
    covariate_names    "promo,price"           the k column names, in order (both tensors)
    calendar           "weekday,holidays:US"   calendar features, as REST's `calendar`

They become the REST fields (`covariates`, `future_covariates` by name, `calendar`), so the checks and their error
codes are REST's (regressors.py); a column count that does not match the names is covariate_names_mismatch too.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from triserve.kernel.errors import ApiError

TENSORS = {"COVARIATES": "covariates", "FUTURE_COVARIATES": "future_covariates"}


def _names(value: Any) -> list[str]:
    return [] if value is None else [n.strip() for n in str(value).split(",") if n.strip()]


def covariate_columns(arrays: dict[str, np.ndarray], parameters: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """The request field ('covariates' / 'future_covariates') -> covariate name -> its column, for the covariate tensors
    given, checked against covariate_names (see the module)."""
    names = _names(parameters.get("covariate_names"))
    if len(set(names)) != len(names):
        raise ApiError(422, "covariate_names_mismatch", "covariate_names names a column twice", {"names": names})
    given = [t for t in TENSORS if t in arrays]
    if names and not given:
        raise ApiError(422, "covariate_names_mismatch", "covariate_names without COVARIATES / FUTURE_COVARIATES",
                       {"names": names})
    out = {}
    for tensor in given:
        m = np.asarray(arrays[tensor], dtype=np.float64)
        m = m[:, None] if m.ndim == 1 else m
        if m.ndim != 2 or m.shape[1] != len(names):
            raise ApiError(422, "covariate_names_mismatch", f"{tensor} must be [points, {len(names)}]: one column "
                           f"per name in covariate_names", {"input": tensor, "shape": list(m.shape),
                                                             "names": names})
        out[TENSORS[tensor]] = {name: m[:, j] for j, name in enumerate(names)}
    return out


def calendar(parameters: dict[str, Any]) -> list[str] | None:
    """The calendar parameter as REST's `calendar` (None: not given)."""
    return None if parameters.get("calendar") is None else _names(parameters["calendar"])


def request_fields(fields: dict[str, Any], arrays: dict[str, np.ndarray], parameters: dict[str, Any]) -> dict[str, Any]:
    """The OIP request's covariates and calendar as the REST request's fields (see the module)."""
    fields = {k: v for k, v in fields.items() if k not in TENSORS.values()}
    if parameters.get("calendar") is not None:
        fields["calendar"] = calendar(parameters)
    for field, columns in covariate_columns(arrays, parameters).items():
        fields[field] = {name: column.tolist() for name, column in columns.items()}
    return fields
