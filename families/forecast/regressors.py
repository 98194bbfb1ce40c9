"""A request's covariates -> regular matrices aligned with the regular history and the horizon, or a clear 422.

Why its own module: the checks are the request policy (the same names over the history and the future, one value per
point of the history, at least one per step of the horizon, finite everywhere), and the history's values go through
the same regularisation as the series (sorted by timestamp, duplicates averaged, gaps interpolated) so that row i of
the matrix is the covariate at regular point i.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from triserve.families.forecast import covariates
from triserve.families.forecast.covariates import MAX_COVARIATES
from triserve.families.forecast.preprocess import past_timestamp, regularize, series_timestamps
from triserve.kernel.errors import ApiError


def _finite(name: str, part: str, values: list[float | None]) -> np.ndarray:
    bad = [i for i, v in enumerate(values) if v is None or not math.isfinite(v)]
    if bad:
        raise ApiError(422, "covariate_not_finite", f"covariate {name!r} has {len(bad)} missing or non-finite values "
                       f"in its {part}", {"covariate": name, "part": part, "indices": bad[:20]})
    return np.asarray(values, dtype=np.float64)


def regressors(past: Mapping[str, Sequence[float | None]], future: Mapping[str, Sequence[float | None]],
               n_values: int, stamps: np.ndarray, frequency: str, horizon: int, max_points: int,
               n_regular: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(names sorted, history [n_regular, k], future [horizon, k]) of a series' covariates (k may be 0): `past` one
    value per point of the series (n_values, at `stamps`), `future` at least one per step of the horizon."""
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
        if len(past[name]) != n_values:
            raise ApiError(422, "covariate_length_mismatch", f"covariate {name!r} has {len(past[name])} values over "
                           f"the history; the series has {n_values}",
                           {"covariate": name, "values": n_values, "received": len(past[name])})
        if len(future[name]) < horizon:
            raise ApiError(422, "covariate_horizon", f"covariate {name!r} has {len(future[name])} future values; the "
                           f"horizon is {horizon} steps", {"covariate": name, "horizon": horizon,
                                                            "received": len(future[name])})
        x = _finite(name, "history", list(past[name]))
        history.append(regularize(x, stamps, frequency, max_points, 1.0)[0])
        ahead.append(_finite(name, "future", list(future[name][:horizon])))
    x_hist = np.stack(history, axis=1) if names else np.zeros((n_regular, 0))
    x_future = np.stack(ahead, axis=1) if names else np.zeros((horizon, 0))
    return names, x_hist, x_future


def fit_series(regular: np.ndarray, last_ts: np.datetime64, future: np.ndarray, frequency: str, horizon: int,
               names: list[str], x: np.ndarray, x_future: np.ndarray,
               features: Sequence[str]) -> covariates.CovariateFit:
    """The per-series covariate decision (covariates.fit) on the numeric covariates and the calendar features made
    from the regular history's timestamps and the horizon's."""
    grid = past_timestamp(last_ts, frequency, 0, len(regular))
    cal_names, cal = covariates.calendar(series_timestamps(grid, frequency, len(regular)), features, frequency)
    _, cal_future = covariates.calendar(future, features, frequency)
    return covariates.fit(regular, np.concatenate([x, cal], axis=1), np.concatenate([x_future, cal_future], axis=1),
                          names + cal_names, frequency, horizon)
