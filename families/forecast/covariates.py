"""Covariates: known-future numeric regressors (temperature, promotions, prices; calendar dummies, public holidays) as a
regression with ensemble errors, kept per series only where the series' own backtest says it helps.

Why this form: the served forecaster (ensemble.py: the global model and the classical methods, weighed by a backtest)
has no input for regressors. Dynamic regression (Hyndman & Athanasopoulos, FPP3 ch. 10) puts them in front of any
error model: y_t = x_t b + u_t, b by least squares (with a level and a linear trend in the design, so a covariate that
merely trends is not credited with the series' trend), then u = y - x b is forecast like any series (the ensemble,
model included, level shifts removed) and x_future b added back to every quantile.

A useless covariate must never make the forecast worse, so two gates, both on the series' own history:
  1. each covariate's t statistic in the full-history fit: |t| >= MIN_T = 3 (a shuffled or unrelated regressor rarely
     passes; only the ones that pass are candidates);
  2. the backtest: at the ensemble's backtest origins (ensemble.backtest_cuts) the coefficients are refitted on the
     history before the origin, and the classical ensemble forecasts both y and u; the covariates are used when the
     mean absolute error with them is below MARGIN x the error without.
Everything is numpy; the classical fits of both variants and every origin run in one combine_many pass.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from triserve.families.forecast import public_holidays
from triserve.families.forecast.ensemble import backtest_cuts, backtest_steps, combine_many
from triserve.families.forecast.features import MEDIAN_INDEX
from triserve.families.forecast.shifts import LevelShift, remove

MAX_COVARIATES = 32
MIN_T = 3.0
MARGIN = 0.95  # the covariates must cut the backtest error by at least 5 %
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


@dataclass
class CovariateFit:
    """What the ensemble forecasts (`series`) and what is added back (`offset` [horizon]), with the evidence."""

    names: list[str]
    effects: list[float]  # per covariate: change of y per unit of it (full-history least squares)
    t_values: list[float]
    used: list[bool]
    series: np.ndarray  # y - x b (level shift removed) when any is used, else y (level shift removed)
    offset: np.ndarray  # [horizon]: x_future b, zeros when none is used
    shift: LevelShift | None
    error_with: float | None = None  # backtest mean absolute error with the candidates (None: no backtest)
    error_without: float | None = None
    candidates: list[str] = field(default_factory=list)


def calendar(stamps: np.ndarray, features: Sequence[str], frequency: str = "D") -> tuple[list[str], np.ndarray]:
    """Columns of the requested calendar features at each timestamp ([n, k]; Monday and January are the baselines):
    'weekday' -> weekday=tue..sun, 'month' -> month=feb..dec (dummies), 'holidays:<CC>[-<SUB>]' -> one column, the
    public holidays in each bucket (public_holidays.py); each feature once, in the order asked."""
    ts = np.asarray(stamps, dtype="datetime64[s]")
    names: list[str] = []
    cols: list[np.ndarray] = []
    for feature in dict.fromkeys(features):
        if feature == "weekday":
            day = (ts.astype("datetime64[D]").astype(np.int64) + 3) % 7  # 1970-01-01 was a Thursday; Monday = 0
            names += [f"weekday={d}" for d in WEEKDAYS[1:]]
            cols += [(day == k).astype(np.float64) for k in range(1, 7)]
        elif feature == "month":
            month = ts.astype("datetime64[M]").astype(np.int64) % 12
            names += [f"month={m}" for m in MONTHS[1:]]
            cols += [(month == k).astype(np.float64) for k in range(1, 12)]
        else:
            country, subdiv = public_holidays.parse(feature)
            names.append(f"holidays:{country}" + (f"-{subdiv}" if subdiv else ""))
            cols.append(public_holidays.counts(ts, frequency, feature))
    return names, (np.stack(cols, axis=1) if cols else np.zeros((len(ts), 0)))


def _fit(y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(coefficients, t statistics) of the covariates in least squares of y on [1, t, x] (a constant column gets 0)."""
    n, k = x.shape
    t = np.arange(n, dtype=np.float64)
    design = np.concatenate([np.ones((n, 1)), ((t - t.mean()) / max(n, 1))[:, None], x], axis=1)
    live = np.r_[True, True, np.ptp(x, axis=0) > 0] if n else np.ones(k + 2, bool)
    a = design[:, live]
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    resid = y - a @ coef
    dof = max(n - a.shape[1], 1)
    sigma2 = float(resid @ resid) / dof
    cov = np.linalg.pinv(a.T @ a) * sigma2
    se = np.sqrt(np.maximum(np.diag(cov), 1e-300))
    full_coef, full_t = np.zeros(k + 2), np.zeros(k + 2)
    full_coef[live], full_t[live] = coef, coef / se
    return full_coef[2:], full_t[2:]


def fit(y: np.ndarray, x: np.ndarray, x_future: np.ndarray, names: list[str], frequency: str,
        horizon: int) -> CovariateFit:
    """The per-series decision (module docstring) for a regular history y [n], covariates x [n, k] and their values
    over the horizon x_future [>= horizon, k]."""
    y = np.asarray(y, np.float64)
    x, x_future = np.asarray(x, np.float64), np.asarray(x_future, np.float64)[:horizon]
    n, k = x.shape
    plain, shift = remove(y)
    zeros = np.zeros(horizon)
    if n < k + 6:  # too short to estimate the effects: none used
        return CovariateFit(names, [0.0] * k, [0.0] * k, [False] * k, plain, zeros, shift)
    coef, tstat = _fit(y, x)
    cand = np.abs(tstat) >= MIN_T
    result = CovariateFit(names, coef.tolist(), tstat.tolist(), [False] * k, plain, zeros, shift,
                          candidates=[nm for nm, c in zip(names, cand) if c])
    cuts = backtest_cuts(n, horizon)
    if not cand.any() or not cuts:
        return result
    steps = backtest_steps(n, horizon)
    xc = x[:, cand]
    histories, offsets = [], []
    for c in cuts:
        b, _ = _fit(y[:c], xc[:c])
        histories += [remove(y[:c])[0], remove(y[:c] - xc[:c] @ b)[0]]
        offsets.append(xc[c: c + steps] @ b)
    fcs = combine_many(histories, [frequency] * len(histories), [steps] * len(histories))
    without = np.mean([np.abs(y[c: c + steps] - fcs[2 * j].quantiles[:, MEDIAN_INDEX]).mean()
                       for j, c in enumerate(cuts)])
    with_ = np.mean([np.abs(y[c: c + steps] - fcs[2 * j + 1].quantiles[:, MEDIAN_INDEX] - offsets[j]).mean()
                     for j, c in enumerate(cuts)])
    result.error_with, result.error_without = float(with_), float(without)
    if not with_ < MARGIN * without:
        return result
    b, _ = _fit(y, xc)
    result.used = cand.tolist()
    series, result.shift = remove(y - xc @ b)
    result.series, result.offset = series, x_future[:, cand] @ b
    full = np.zeros(k)
    full[cand] = b
    result.effects = [float(v) if u else float(e) for v, u, e in zip(full, cand, coef)]
    return result
