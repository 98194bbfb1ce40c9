"""The served forecaster: the global model and the classical methods (classical.py), weighted per series by a
rolling-origin backtest on the series' own history, with intervals calibrated on the backtest's errors.

Why: one model bends a straight line; the M4 lesson is that per-series selection and combination of robust methods
beat any single one. Each request:
  1. backtest_cuts: up to ORIGINS earlier origins (history cut at c), each forecast `steps` ahead and scored on the
     points that followed; the global model forecasts from each origin too (the service sends those histories to
     the runner with the final one, in one call).
  2. combine: every method's mean absolute backtest error, scaled like MASE (in-sample seasonal-naive error of the
     history), multiplied by the method's prior trust at the series' frequency (trust.py: fitted on the training
     series' validation windows; the global model's 0.6 by default); the TOP_K best are combined with weights
     1/error^2 (a method exact on the series' own past, a straight line's drift, takes all the weight: the textbook
     shapes are continued exactly). Intermittent demand (classical.intermittent) is forecast as a mean rate: only
     the mean methods (TSB, SES, seasonal means) and the mean of the model's quantiles, scored by squared error.
  3. intervals: the model's quantiles (its spread per step, its asymmetry) moved onto the combined point and scaled
     by the series' backtest (median ratio of the combination's errors to the model's 25-75 % half-width, shrunk
     toward 1 in log space by PRIOR_WEIGHT pseudo-residuals), then widened per level by the split-conformal factors
     of the request's frequency (intervals.py: fitted on the training series' validation windows). Per-series
     conformal quantiles of three close origins' errors alone were calibrated on average but set each level too
     noisily (README). Without a model: conformal quantiles of the backtest errors normalised by sqrt(step).
  Non-negative histories get non-negative forecasts. The result names the method(s) and the backtest error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from triserve.families.forecast import classical, intervals, pooling, trust
from triserve.families.forecast.features import MEDIAN_INDEX, QUANTILES, SEASON, SEASON2
from triserve.families.forecast.manifest import ForecastPreprocess

ORIGINS = 3
MIN_FIT = 2  # fewest points a method is fitted on at an origin (drift needs two; 3 points still get a backtest)
TOP_K = 3
POWER = 2.0  # weights 1 / error^POWER
PRIOR_WEIGHT = 100.0  # pseudo-residuals at the model's own spread the per-series scale is shrunk toward (log space)
_CENTRAL = [abs(1 - 2 * q) for q in QUANTILES]  # central coverage of the interval each level bounds (0 for 0.5)
# Without a model the conformal intervals are widened by the global factors (intervals.GLOBAL: the per-frequency ones
# are fitted on the model's shape); with one, by the request frequency's (intervals.factors).
_WIDEN = intervals.factors(None)


@dataclass
class Forecast:
    quantiles: np.ndarray  # [horizon, len(QUANTILES)] original units
    method: str  # the methods combined, by weight, joined with '+'
    weights: dict[str, float] = field(default_factory=dict)
    backtest_mase: float | None = None  # the combination's scaled error over the backtest (None: no backtest)
    origins: int = 0
    calibration: str = "model"  # "conformal" (backtest errors) or "model" (no backtest: the model's own)
    static: StaticUse | None = None  # a panel with static categoricals: what pooling did for this series


@dataclass
class StaticUse:
    used: bool  # this series' weights came from pooled scores
    pooled_by: str | None  # the categorical pooled by
    group_size: int | None  # series in its category (itself included)
    categoricals: list[pooling.Categorical]


def combines(pre: ForecastPreprocess, raw_history: bool) -> bool:
    """A model this ensemble weighs: a global-contract graph with the standard
    quantiles. The numpy Theta fallback, which reads the raw history, answers alone (the degraded path); so does a
    user's window model."""
    return pre.contract == "global" and not raw_history and tuple(pre.quantiles) == QUANTILES


def backtest_steps(n: int, horizon: int) -> int:
    return min(horizon, max(1, n // 3))


def backtest_cuts(n: int, horizon: int) -> list[int]:
    """History lengths at the backtest origins, oldest first: the last `steps` points are the last origin's
    targets; origins a quarter of a backtest apart (close, so the oldest still holds two seasons where the series
    does); none shorter than MIN_FIT."""
    steps = backtest_steps(n, horizon)
    stride = max(1, steps // 4)
    cuts = [n - steps - j * stride for j in range(ORIGINS - 1, -1, -1)]
    return [c for c in cuts if c >= MIN_FIT]


def _seasons(frequency: str, n: int) -> tuple[int, int]:
    m, m2 = SEASON[frequency], SEASON2[frequency]
    return (m if n >= m else 1), m2


def _scale(y: np.ndarray, m: int) -> float:
    """MASE's scale: the in-sample mean absolute seasonal-naive (naive when too short) step of the whole history
    (the same for every method: it only makes the reported error comparable across series), floored relative to
    the level (a noise-free series scores its errors relative to its size)."""
    lag = m if len(y) > m else 1
    d = float(np.mean(np.abs(y[lag:] - y[:-lag]))) if len(y) > lag else 0.0
    floor = max(1e-9 * float(np.mean(np.abs(y))), 1e-300)
    return max(d, floor)


@dataclass
class _Series:
    """One series' plan: its backtest and the candidate methods (decided by its shortest backtest history)."""

    y: np.ndarray
    frequency: str
    horizon: int
    m: int
    cuts: list[int]
    steps: int
    demand: bool  # intermittent: forecast the mean demand rate (TSB and other means), scored by squared error
    methods: list[tuple[str, int]]

    @property
    def rows(self) -> list[tuple[np.ndarray, int]]:
        """(history, steps) of the final fit then each backtest origin's."""
        return [(self.y, self.horizon)] + [(self.y[:c], self.steps) for c in self.cuts]


def _plan(history, frequency: str, horizon: int) -> _Series:
    y = np.asarray(history, dtype=np.float64)
    n = len(y)
    m, m2 = _seasons(frequency, n)
    cuts = backtest_cuts(n, horizon)
    demand = classical.intermittent(y)
    methods = [] if np.ptp(y) == 0 else classical.applicable(y[: cuts[0]] if cuts else y, m, m2, demand)
    return _Series(y, frequency, horizon, m, cuts, backtest_steps(n, horizon), demand, methods)


def combine(history, frequency: str, horizon: int, model_q: list[np.ndarray] | None = None) -> Forecast:
    """The served forecast of one regular series. model_q: the global model's quantiles in original units for the
    full history then each backtest_cuts history ([>= horizon or steps, len(QUANTILES)] each), or None."""
    return combine_many([history], [frequency], [horizon], [model_q])[0]


def combine_many(histories, frequencies, horizons, model_qs=None,
                 statics: list[dict[str, str]] | None = None) -> list[Forecast]:
    """combine() of many series at once: the classical fits of every series and backtest origin run together (the
    smoothing recursion over all rows of one window length at a time), which is what makes a batch cheap.
    statics: a panel's static categoricals per series; series sharing a category pool their backtest scores where
    the panel's backtest says it helps (pooling.py; each Forecast's `static` says what was done)."""
    plans, per_series, model_qs = _fit_all(histories, frequencies, horizons, model_qs)
    if not statics or not any(statics):
        return [_weigh(plan, fit, mq) for plan, fit, mq in zip(plans, per_series, model_qs)]
    scored = [_score(plan, fit, mq) for plan, fit, mq in zip(plans, per_series, model_qs)]
    poolable = [sc if sc is not None and not plan.demand else None for sc, plan in zip(scored, plans)]
    key, report = pooling.choose([sc.by_origin if sc else None for sc in poolable],
                                 [sc.errors if sc else None for sc in poolable],
                                 [sc.scale if sc else 1.0 for sc in poolable], statics, weights_of)
    groups = [s.get(key) if key is not None else None for s in statics]
    blended = pooling.pooled([sc.scores if sc else None for sc in poolable], groups)
    out = []
    for plan, fit, mq, sc, pool, group in zip(plans, per_series, model_qs, scored, blended, groups):
        fc = _weigh(plan, fit, mq, sc, pool)
        fc.static = StaticUse(pool is not None, key if pool is not None else None,
                              groups.count(group) if pool is not None else None, report)
        out.append(fc)
    return out


def _fit_all(histories, frequencies, horizons, model_qs):
    """Every series' plan, its methods' fits (final, then each origin; all series' fitted together) and its model
    quantiles (None per series where there are none)."""
    plans = [_plan(h, f, hz) for h, f, hz in zip(histories, frequencies, horizons)]
    model_qs = list(model_qs) if model_qs is not None else [None] * len(plans)
    for plan, mq in zip(plans, model_qs):
        if mq is not None and len(mq) != 1 + len(plan.cuts):
            raise ValueError(f"model_q holds {len(mq)} forecasts; expected {1 + len(plan.cuts)}")
    rows = [(h, st, plan.methods) for plan in plans for h, st in plan.rows]
    fitted = classical.forecasts([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    per_series, at = [], 0
    for plan in plans:
        per_series.append(fitted[at: at + 1 + len(plan.cuts)])
        at += 1 + len(plan.cuts)
    return plans, per_series, model_qs


def candidates_many(histories, frequencies, horizons, model_qs) -> list[Candidates | None]:
    """Each series' candidates as the weighing sees them, before any combination (None: nothing is weighed, a
    constant or too short to backtest): what scripts/forecast/fit_trust.py fits the prior trust on."""
    plans, per_series, model_qs = _fit_all(histories, frequencies, horizons, model_qs)
    out: list[Candidates | None] = []
    for plan, fit, mq in zip(plans, per_series, model_qs):
        sc = _score(plan, fit, mq)
        out.append(None if sc is None else Candidates(sc.final, sc.scores, plan.demand, bool(np.all(plan.y >= 0))))
    return out


@dataclass
class Candidates:
    """One series' methods: final point forecasts, backtest scores (prior trust applied), whether it is intermittent
    demand (scored by squared error, the trust not applied) and whether its forecast is clipped at 0."""

    final: dict[str, np.ndarray]
    scores: dict[str, float]
    demand: bool
    non_negative: bool


@dataclass
class _Scored:
    """One backtested series' candidates: the final fits, each method's backtest errors [origins, steps] and their
    scaled scores (the lower the better), overall and per origin (pooling, pooling.py, reads those)."""

    final: dict[str, np.ndarray]
    errors: dict[str, np.ndarray]
    scale: float
    scores: dict[str, float]
    by_origin: dict[str, np.ndarray]


def _score(plan: _Series, fitted: list[dict[str, np.ndarray]], model_q: list[np.ndarray] | None) -> _Scored | None:
    """The backtest scores of one series' methods; None when there is nothing to weigh (a constant, no origin)."""
    y, steps, demand = plan.y, plan.steps, plan.demand
    if np.ptp(y) == 0 or not plan.cuts:
        return None
    final = fitted[0]
    if model_q is not None:
        final["global"] = _model_point(model_q[0], plan.horizon, demand)
        for j, past in enumerate(fitted[1:]):
            past["global"] = _model_point(model_q[1 + j], steps, demand)
    scale = _scale(y, plan.m)
    targets = np.stack([y[c: c + steps] for c in plan.cuts])  # [origins, steps]
    errors = {name: targets - np.stack([past[name] for past in fitted[1:]]) for name in final}  # [origins, steps]
    ok = [name for name, e in errors.items() if np.all(np.isfinite(e)) and np.all(np.isfinite(final[name]))]
    if demand:
        by_origin = {name: np.sqrt(np.mean(errors[name] ** 2, axis=1)) / scale for name in ok}
        scores = {name: float(np.sqrt(np.mean(errors[name] ** 2))) / scale for name in ok}
    else:
        by_origin = {name: np.mean(np.abs(errors[name]), axis=1) / scale for name in ok}
        scores = {name: float(np.mean(v)) for name, v in by_origin.items()}
        for name, prior in trust.of(plan.frequency).items():  # (demand: the model's mean is an approximation)
            if name in scores:
                scores[name] *= prior
                by_origin[name] = by_origin[name] * prior
    return _Scored(final, errors, scale, scores, by_origin)


def weights_of(scores: dict[str, float]) -> dict[str, float]:
    """The TOP_K best methods by score, weighted 1 / score^POWER (negligible weights dropped), summing to 1."""
    best = sorted(scores, key=lambda k: (scores[k], k))[:TOP_K]
    inv = {k: 1.0 / max(scores[k], 1e-12) ** POWER for k in best}
    kept = {k: v for k, v in inv.items() if v >= 1e-6 * sum(inv.values())}
    return {k: v / sum(kept.values()) for k, v in kept.items()}


def _weigh(plan: _Series, fitted: list[dict[str, np.ndarray]], model_q: list[np.ndarray] | None,
           scored: _Scored | None = None, scores: dict[str, float] | None = None) -> Forecast:
    """One series' forecast from its methods' fits (final, then each origin) and the model's quantiles; `scores`
    replaces the series' own backtest scores (a panel's pooled scores, pooling.py)."""
    y, horizon, cuts, steps = plan.y, plan.horizon, plan.cuts, plan.steps
    if np.ptp(y) == 0:  # a constant: every method agrees; no spread
        return Forecast(np.full((horizon, len(QUANTILES)), y[-1]), "naive", {"naive": 1.0}, 0.0 if cuts else None,
                        len(cuts), "conformal" if cuts else "model")
    if not cuts:  # too short to backtest: the model if there is one, else drift
        final = fitted[0]
        name = "global" if model_q is not None else "drift"
        point = _model_point(model_q[0], horizon, plan.demand) if model_q is not None else final[name]
        q = (np.asarray(model_q[0], np.float64)[:horizon] if model_q is not None
             else np.repeat(point[:, None], len(QUANTILES), axis=1))
        return _finish(y, q - q[:, MEDIAN_INDEX:MEDIAN_INDEX + 1] + point[:, None], name, {name: 1.0}, None, 0,
                       "model")
    scored = scored or _score(plan, fitted, model_q)
    assert scored is not None
    final, errors, scale = scored.final, scored.errors, scored.scale
    weights = weights_of(scored.scores if scores is None else scores)
    point = np.sum([v * final[k] for k, v in weights.items()], axis=0)
    combined = np.sum([v * errors[k] for k, v in weights.items()], axis=0)
    mase = float(np.mean(np.abs(combined))) / scale

    # intervals: the model's quantile shape around the combined point, scaled by the backtest (log-shrunk), or
    # without a model, split-conformal quantiles of the errors normalised by sqrt(step)
    floor = 1e-12 * max(float(np.mean(np.abs(y))), 1e-300)
    if model_q is not None:
        own = np.asarray(model_q[0], np.float64)[:horizon]
        shape = own - own[:, MEDIAN_INDEX:MEDIAN_INDEX + 1]
        half50 = np.stack([_half50(np.asarray(model_q[1 + j], np.float64)[:steps]) for j in range(len(cuts))])
        ratio = np.abs(combined) / np.maximum(half50, floor)  # about 1 in median where the model's spread is right
        w = ratio.size / (ratio.size + PRIOR_WEIGHT)
        factor = float(np.exp(w * np.log(max(float(np.median(ratio)), 1e-3))))
        q = point[:, None] + shape * factor * intervals.factors(plan.frequency)[None, :]
    else:
        steps_ahead = np.sqrt(np.arange(1, horizon + 1)) * scale
        z = np.sort((np.abs(combined) / np.maximum(np.sqrt(np.arange(1, steps + 1)) * scale, floor)).ravel())
        half = np.array([_conformal(z, c) for c in _CENTRAL]) * _WIDEN
        q = point[:, None] + np.sign(np.array(QUANTILES) - 0.5)[None, :] * half[None, :] * steps_ahead[:, None]
    method = "+".join(sorted(weights, key=lambda k: -weights[k]))
    return _finish(y, q, method, weights, mase, len(cuts), "conformal")


def _half50(q: np.ndarray) -> np.ndarray:
    """Half the 25-75 % width per step of a model quantile forecast."""
    return (q[:, QUANTILES.index(0.75)] - q[:, QUANTILES.index(0.25)]) / 2


def _model_point(q, steps: int, demand: bool) -> np.ndarray:
    """The global model's point: its median, or for intermittent demand the mean of its quantiles (the median of a
    demand that is zero most of the time is zero; the mean rate is what a demand forecast states)."""
    q = np.asarray(q, np.float64)[:steps]
    return q.mean(axis=1) if demand else q[:, MEDIAN_INDEX]


def _conformal(z: np.ndarray, coverage: float) -> float:
    """The split-conformal quantile of sorted scores z for `coverage`: the ceil((N + 1) c)-th smallest (the largest
    when that exceeds N)."""
    if coverage == 0:
        return 0.0
    k = min(len(z), math.ceil((len(z) + 1) * coverage))
    return float(z[k - 1])


def _finish(y: np.ndarray, q: np.ndarray, method: str, weights: dict[str, float], mase: float | None,
            origins: int, calibration: str) -> Forecast:
    q = np.sort(q, axis=1)
    if np.all(y >= 0):
        q = np.maximum(q, 0.0)
    return Forecast(q, method, weights, mase, origins, calibration)
