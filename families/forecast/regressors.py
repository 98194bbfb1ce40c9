"""A request's covariates -> regular matrices aligned with the regular history and the horizon, or a clear 422.

Why its own module: the checks are the request policy (the same names over the history and the future, one value per
point of the history, at least one per step of the horizon, finite everywhere), and the history's values go through
the same regularisation as the series (sorted by timestamp, duplicates averaged, gaps interpolated) so that row i of
the matrix is the covariate at regular point i.
"""
from __future__ import annotations

import math

import numpy as np

from families.forecast.covariates import MAX_COVARIATES
from families.forecast.preprocess import regularize
from families.forecast.schemas import ForecastRequest
from kernel.errors import ApiError


def _finite(name: str, part: str, values: list[float | None]) -> np.ndarray:
    bad = [i for i, v in enumerate(values) if v is None or not math.isfinite(v)]
    if bad:
        raise ApiError(422, "covariate_not_finite", f"covariate {name!r} has {len(bad)} missing or non-finite values "
                       f"in its {part}", {"covariate": name, "part": part, "indices": bad[:20]})
    return np.asarray(values, dtype=np.float64)


def regressors(body: ForecastRequest, stamps: np.ndarray, frequency: str, horizon: int, max_points: int,
               n_regular: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(names sorted, history [n_regular, k], future [horizon, k]) of the request's covariates (k may be 0)."""
    past, future = body.covariates or {}, body.future_covariates or {}
    if set(past) != set(future):
        raise ApiError(422, "covariate_names_mismatch", "covariates and future_covariates must name the same "
                       "covariates", {"history_only": sorted(set(past) - set(future)),
                                      "future_only": sorted(set(future) - set(past))})
    if len(past) > MAX_COVARIATES:
        raise ApiError(422, "too_many_covariates", f"{len(past)} covariates exceed the limit of {MAX_COVARIATES}",
                       {"limit": MAX_COVARIATES, "received": len(past)})
    names = sorted(past)
    history, ahead = [], []
    for name in names:
        if len(past[name]) != len(body.values):
            raise ApiError(422, "covariate_length_mismatch", f"covariate {name!r} has {len(past[name])} values over "
                           f"the history; the series has {len(body.values)}",
                           {"covariate": name, "values": len(body.values), "received": len(past[name])})
        if len(future[name]) < horizon:
            raise ApiError(422, "covariate_horizon", f"covariate {name!r} has {len(future[name])} future values; the "
                           f"horizon is {horizon} steps", {"covariate": name, "horizon": horizon,
                                                            "received": len(future[name])})
        x = _finite(name, "history", past[name])
        history.append(regularize(x, stamps, frequency, max_points, 1.0)[0])
        ahead.append(_finite(name, "future", future[name][:horizon]))
    x_hist = np.stack(history, axis=1) if names else np.zeros((n_regular, 0))
    x_future = np.stack(ahead, axis=1) if names else np.zeros((horizon, 0))
    return names, x_hist, x_future
