"""Level shifts: a series that steps from one level to another and stays there is forecast from the new level.

Why: the classical methods and the global model read the whole history. After a step (a price change, a new store)
the backtest's origins straddle it, so the methods that fit the jump as a trend (drift, damped Holt) win the backtest
and the forecast keeps climbing, while the global model, scaled on the mean of both levels, bends back toward it
(10 ... 10, 30 ... 30 was forecast 28.1 at D, 30.9 rising to 38 at MS). Intervention analysis removes the step from
the history before anything is fitted: the points before it are moved by the shift, so every method and the model see
one level (and any trend) continuing to the end, and forecast from where the series is now.

A step is detected conservatively, on the first differences around their median (the median slope, so a step on a
trend is still a step):
  * one jump stands out: larger than JUMP_SIGMAS robust noise sigmas (MAD) of the other differences, and larger than
    UNIQUE times every other difference (a season, an intermittent demand or a volatile series has many jumps of
    that size and is left alone; a spike that returns is two opposite jumps, so it is no shift);
  * it persists: at least MIN_AFTER points after it, each within half the jump of the new level, and the step of a
    least-squares fit of level + trend + step agrees with the jump within half of it (that fit's step is the size:
    the noise of one difference averaged out);
  * at least MIN_BEFORE points before it.
numpy only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_BEFORE = 2
MIN_AFTER = 3
JUMP_SIGMAS = 6.0
UNIQUE = 2.0  # the jump exceeds UNIQUE x every other (median-centred) difference


@dataclass(frozen=True)
class LevelShift:
    at: int  # index of the first point at the new level
    size: float  # the shift (new level - old level), in the series' units


def detect(y: np.ndarray) -> LevelShift | None:
    """The one persistent step of a regular series, or None (module docstring: the rule)."""
    y = np.asarray(y, np.float64)
    n = len(y)
    if n < MIN_BEFORE + MIN_AFTER:
        return None
    d = np.diff(y)
    slope = float(np.median(d))
    e = d - slope
    j = int(np.argmax(np.abs(e)))
    jump, at = float(e[j]), j + 1
    if at < MIN_BEFORE or n - at < MIN_AFTER:
        return None
    if abs(jump) <= 1e-6 * max(float(np.max(np.abs(y))), 1e-300):  # float noise of a straight line or a constant
        return None
    others = np.abs(np.delete(e, j))
    sigma = 1.4826 * float(np.median(others)) if others.size else 0.0
    if abs(jump) <= JUMP_SIGMAS * sigma or (others.size and abs(jump) <= UNIQUE * float(np.max(others))):
        return None
    t = np.arange(n, dtype=np.float64)
    design = np.stack([np.ones(n), t, (t >= at).astype(np.float64)], axis=1)  # level, trend, the step
    coef = np.linalg.lstsq(design, y, rcond=None)[0]
    size = float(coef[2])
    if np.sign(size) != np.sign(jump) or abs(size - jump) > 0.5 * abs(jump):
        return None
    after = y[at:] - coef[0] - coef[1] * t[at:] - size
    if np.any(np.abs(after) >= 0.5 * abs(jump)):  # it returned (part of the way) or moved on
        return None
    return LevelShift(at, size)


def remove(y: np.ndarray) -> tuple[np.ndarray, LevelShift | None]:
    """(the history with the points before a detected step moved by its size, the step or None). The last level is
    untouched: the forecast of the adjusted history is the forecast of the series at its new level."""
    y = np.asarray(y, np.float64)
    shift = detect(y)
    if shift is None:
        return y, None
    adjusted = y.copy()
    adjusted[: shift.at] += shift.size
    return adjusted, shift
