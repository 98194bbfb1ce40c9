"""The textbook series: shapes a user tries first, at every frequency, with the exact answer each deserves.

Why: a forecaster that wins on the corpus average can still bend a straight line or miss a level shift, and a user
who sends `10, 20, ..., 300` judges the service by that one answer. Each case here is noise-free (or seeded) and
carries its exact continuation, so a check is a fact, not a score. The same `cases()` and `check()` serve the tests
and scripts/bench/forecast_accuracy.py. numpy only (plus the contract constants of families/forecast/features.py).

Shapes (n points of history, m = SEASON[f], horizon = MAX_HORIZON[f], two seasons; YS: 6 years):
  linear        10, 20, 30, ...                                   exact_relative, 1 % of max |future|
  trend_season  level + slope t + season (additive; the trend rises 2 season-ranges over the history)
                                                                  exact_relative, 2 % of ptp(history)
  season        a two-harmonic profile repeated                   exact_relative, 2 % of ptp(season)
  constant      42 everywhere                                     exact_relative, 1e-9 of |42|
  level_step    100, then 150 from a point that leaves 2 seasons + the backtest span + a season after it
                                                                  exact_relative, 5 % of the step (50)
  noisy_level   100 + white noise (sigma 10, seeded; the expectation is the process level 100)    level
  exponential   10 (1 + r)^t, r = 2 % per step, less where the history would grow more than 100x
                                                                  exact_relative, 5 % of max |future|
  damped_trend  50 + b (phi + phi^2 + ... + phi^t), phi = 0.97, n <= 60 (still rising at the end, visibly
                flattening)                                       exact_relative, 5 % of ptp(history)
  intermittent  seeded demand: 3 of every 10 steps non-zero, sizes 1 + Poisson(3); mean 1.2        intermittent
  double_season (h only) daily + weekly profile, 4 weeks           exact_relative, 2 % of ptp(history)
  late_step     10, then 30 for the last LATE_AFTER points (the backtest's origins straddle the step)
                                                                  exact_relative, 2 % of the step (20)
  noisy_step    late_step + white noise (sigma 1, seeded; the expectation is the new level 30)
                                                                  level, within 1.5 sigma (the old level is 20 off)
Seasonal shapes are not made at YS (m = 1: no season). Scale variants (MS and D; linear, trend_season, constant,
level_step): tiny (x 1e-6), huge (x 1e9 + 1e12), negative (shifted below zero); short histories n = 3, 5, 8 of
linear and constant at YS and MS.

Kinds (q: [horizon, len(QUANTILES)] in original units, point = the median column):
  exact_relative  error = max over steps |point - future| / ref; pass when error <= tolerance. `ref` is the
                  magnitude named above, computed on the base series and multiplied by a variant's scale factor
                  (an offset leaves it unchanged), so the rule is scale- and offset-free: a 1e12 offset does not
                  make 1 % of |future| a free pass.
  level           error = max over steps |point - level| / sigma (ref = sigma); pass when error <= tolerance (1; 1.5)
                  AND every step's 5-95 % interval contains the level AND its mean width is at most 3x the exact
                  one (2 x 1.645 sigma), so "covers" cannot be bought with an absurd interval.
  intermittent    error = |mean(point) - mean demand| / mean demand; pass when error <= tolerance (0.5) AND every
                  quantile is >= 0. (The median of a demand that is zero 70 % of the time is 0 for an honest
                  predictive distribution; the issue asks the point forecast to track the mean demand.)
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from triserve.families.forecast.features import MAX_HORIZON, QUANTILES, SEASON, step_timestamps

FREQS = ("YS", "QS", "MS", "W", "D", "h")
# History length per frequency: >= 4 seasons (W: 4 years, h: 4 weeks, which also holds the double season 3 times)
LENGTH = {"YS": 40, "QS": 48, "MS": 120, "W": 208, "D": 140, "h": 672}
# Starts: a January 1st that is a Monday (2018), so daily and hourly profiles line up with the calendar features
START = np.datetime64("2018-01-01T00:00:00", "s")
SEASONAL = ("trend_season", "season", "double_season")
SEED = 20240611
# Damped trend: phi = 0.97 (inside ETS's [0.8, 0.98]) over at most 60 points, so the end of the history still rises
# (~20 % of the total rise is still to come) while the slope has visibly fallen: neither naive nor drift passes
DAMPING, DAMPED_LENGTH = 0.97, 60
LATE_AFTER = 8  # points at the new level after a late step (fewer than any backtest spans)


@dataclass(frozen=True)
class TextbookCase:
    name: str  # shape/frequency[/variant]
    shape: str
    frequency: str
    history: np.ndarray
    future: np.ndarray  # the exact continuation; for noisy_level/intermittent the level/mean demand at every step
    horizon: int
    tolerance: float
    kind: str  # "exact_relative", "level" or "intermittent" (module docstring)
    ref: float = 1.0  # the magnitude the error is divided by (module docstring)
    start: np.datetime64 = START

    def next_timestamp(self, n: int | None = None) -> np.datetime64:
        """Timestamp of point index n (default: the first forecast step), like corpus.Series.next_timestamp."""
        return step_timestamps(self.start, self.frequency, 1, len(self.history) if n is None else n)[0]


def _profile(m: int, t: np.ndarray) -> np.ndarray:
    """A two-harmonic season of period m, range about 2 (not a plain sinusoid: the second harmonic skews it)."""
    return np.sin(2 * np.pi * t / m) + 0.5 * np.cos(4 * np.pi * t / m + 1.0)


def _level_step_at(n: int, m: int, horizon: int) -> int:
    """Where the level shifts: 60 % of the series, earlier when that would not leave 2 seasons + the backtest span
    (a horizon + half a horizon of origins) + one season of slack after it."""
    after = 2 * m + horizon + 2 * max(1, horizon // 4) + max(m, 4)
    return min(int(0.6 * n), n - after)


def _shape(shape: str, f: str, n: int, horizon: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray,
                                                                                      float, float, str]:
    """(history, future, tolerance, ref, kind) of one base shape."""
    m = SEASON[f]
    t = np.arange(n + horizon, dtype=np.float64)
    if shape == "linear":
        y = 10.0 * (t + 1)
        return y[:n], y[n:], 0.01, float(np.max(np.abs(y[n:]))), "exact_relative"
    if shape == "trend_season":
        season = 20.0 * _profile(m, t)
        y = 100.0 + 2 * np.ptp(season) * t / n + season
        return y[:n], y[n:], 0.02, float(np.ptp(y[:n])), "exact_relative"
    if shape == "season":
        y = 50.0 + 20.0 * _profile(m, t)
        return y[:n], y[n:], 0.02, float(np.ptp(y[:m])), "exact_relative"
    if shape == "constant":
        y = np.full(n + horizon, 42.0)
        return y[:n], y[n:], 1e-9, 42.0, "exact_relative"
    if shape == "level_step":
        y = np.where(t >= _level_step_at(n, m, horizon), 150.0, 100.0)
        return y[:n], y[n:], 0.05, 50.0, "exact_relative"
    if shape == "noisy_level":
        hist = 100.0 + 10.0 * rng.standard_normal(n)
        return hist, np.full(horizon, 100.0), 1.0, 10.0, "level"
    if shape == "exponential":
        r = min(0.02, 100.0 ** (1.0 / n) - 1.0)
        y = 10.0 * (1.0 + r) ** t
        return y[:n], y[n:], 0.05, float(np.max(np.abs(y[n:]))), "exact_relative"
    if shape == "damped_trend":
        b = 100.0 * (1 - DAMPING) / DAMPING  # b (phi + phi^2 + ...) -> 100
        y = 50.0 + b * np.concatenate([[0.0], np.cumsum(DAMPING ** t[1:])])  # y_t = 50 + b (phi + ... + phi^t)
        return y[:n], y[n:], 0.05, float(np.ptp(y[:n])), "exact_relative"
    if shape == "intermittent":  # 3 demands in every 10 steps (stratified: the recent past is not a lucky run)
        hist = np.zeros(n)
        hits = np.concatenate([s + rng.choice(10, size=3, replace=False) for s in range(0, n, 10)])
        hits = hits[hits < n]
        hist[hits] = 1.0 + rng.poisson(3.0, size=hits.size)
        return hist, np.full(horizon, 0.3 * 4.0), 0.5, 1.2, "intermittent"
    if shape == "double_season":
        day, week = _profile(24, t), np.where((t // 24) % 7 >= 5, -1.0, 0.4) + 0.3 * _profile(168, t)
        y = 100.0 + 20.0 * day + 15.0 * week
        return y[:n], y[n:], 0.02, float(np.ptp(y[:n])), "exact_relative"
    if shape in ("late_step", "noisy_step"):
        y = np.where(t >= n - LATE_AFTER, 30.0, 10.0)
        if shape == "late_step":
            return y[:n], y[n:], 0.02, 20.0, "exact_relative"
        return y[:n] + rng.standard_normal(n), y[n:], 1.5, 1.0, "level"
    raise ValueError(f"unknown shape {shape!r}")


SHAPES = ("linear", "trend_season", "season", "constant", "level_step", "noisy_level", "exponential", "damped_trend",
          "intermittent", "double_season", "late_step", "noisy_step")


def _base(shape: str, f: str, n: int | None = None) -> TextbookCase:
    horizon = MAX_HORIZON[f]
    n = n or LENGTH[f]
    if shape == "damped_trend":
        n = min(n, DAMPED_LENGTH)
    if shape == "level_step" and _level_step_at(n, SEASON[f], horizon) < n // 3:
        n = 2 * n + horizon  # W: 2 seasons + a 104-week backtest after the step need 520 weeks
    # one stream per (shape, frequency): adding a case does not change the others
    rng = np.random.default_rng([SEED, SHAPES.index(shape), FREQS.index(f), n])
    hist, fut, tol, ref, kind = _shape(shape, f, n, horizon, rng)
    return TextbookCase(f"{shape}/{f}", shape, f, hist, fut, horizon, tol, kind, ref)


def _variant(case: TextbookCase, variant: str) -> TextbookCase:
    """tiny: x 1e-6; huge: x 1e9 + 1e12; negative: shifted so history and future are all below zero."""
    if variant == "tiny":
        a, b = 1e-6, 0.0
    elif variant == "huge":
        a, b = 1e9, 1e12
    else:
        both = np.concatenate([case.history, case.future])
        a, b = 1.0, -(float(np.max(both)) + max(float(np.ptp(both)), 1.0))
    return replace(case, name=f"{case.name}/{variant}", history=a * case.history + b, future=a * case.future + b,
                   ref=a * case.ref)


def cases() -> list[TextbookCase]:
    """Every shape at every frequency (seasonal ones not at YS; the double season at h only), then the scale
    variants and the short histories. Deterministic: the same arrays on every call and machine."""
    out = [_base(s, f) for f in FREQS for s in SHAPES
           if not (s in SEASONAL and SEASON[f] == 1) and (s != "double_season" or f == "h")]
    out += [_variant(_base(s, f), v) for f in ("MS", "D") for s in ("linear", "trend_season", "constant", "level_step")
            for v in ("tiny", "huge", "negative")]
    out += [replace(c, name=f"{c.name}/n{n}") for f in ("YS", "MS") for s in ("linear", "constant") for n in (3, 5, 8)
            for c in [_base(s, f, n)]]
    return out


def check(case: TextbookCase, quantiles: np.ndarray, quantile_levels=QUANTILES) -> tuple[bool, float]:
    """(passed, error) of one forecast of `case` under the rule of its kind (module docstring)."""
    levels = [float(x) for x in quantile_levels]
    q = np.asarray(quantiles, dtype=np.float64)
    if q.ndim != 2 or q.shape[0] < case.horizon or not np.all(np.isfinite(q[: case.horizon])):
        return False, float("inf")
    q = q[: case.horizon]
    point = q[:, levels.index(0.5)]
    if case.kind == "exact_relative":
        err = float(np.max(np.abs(point - case.future))) / case.ref
        return err <= case.tolerance, err
    if case.kind == "level":
        err = float(np.max(np.abs(point - case.future))) / case.ref
        lo, hi = q[:, levels.index(0.05)], q[:, levels.index(0.95)]
        covers = bool(np.all((lo <= case.future) & (case.future <= hi)))
        sane = float(np.mean(hi - lo)) <= 3 * 2 * 1.6448536 * case.ref
        return err <= case.tolerance and covers and sane, err
    if case.kind == "intermittent":
        mean = float(case.future[0])
        err = abs(float(np.mean(point)) - mean) / mean
        return err <= case.tolerance and bool(np.all(q >= 0)), err
    raise ValueError(f"unknown kind {case.kind!r}")
