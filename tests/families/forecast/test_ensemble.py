"""The served forecaster (families/forecast/ensemble.py): per-series backtest, weights, conformal intervals."""
from __future__ import annotations

import numpy as np
import pytest

from triserve.families.forecast import classical
from triserve.families.forecast.ensemble import backtest_cuts, backtest_steps, combine
from triserve.families.forecast.features import MEDIAN_INDEX, QUANTILES


def bent_model(y: np.ndarray, frequency: str, horizon: int, pull: float = 0.5) -> list[np.ndarray]:
    """A stand-in global model that bends every forecast halfway back to the history's mean (the defect the issue
    reports): quantiles for the full history and each backtest cut, as the runner would return them."""
    out = []
    for k, c in enumerate([len(y), *backtest_cuts(len(y), horizon)]):
        h = y[:c]
        steps = horizon if k == 0 else backtest_steps(len(y), horizon)
        point = np.full(steps, (1 - pull) * h[-1] + pull * h.mean())
        spread = np.std(h) + 1e-9
        out.append(point[:, None] + spread * np.linspace(-1, 1, len(QUANTILES))[None, :])
    return out


def median(fc) -> np.ndarray:
    return fc.quantiles[:, MEDIAN_INDEX]


@pytest.mark.parametrize("frequency", ["YS", "QS", "MS", "W", "D", "h"])
def test_straight_line_is_continued_exactly_even_when_the_model_bends(frequency):
    y = 10.0 * np.arange(1, 31)  # the case: 10, 20, ..., 300
    fc = combine(y, frequency, 6, bent_model(y, frequency, 6))
    assert np.allclose(median(fc), [310, 320, 330, 340, 350, 360], rtol=1e-9)
    assert fc.weights.get("global", 0.0) < 1e-6 and fc.backtest_mase == pytest.approx(0.0, abs=1e-9)
    assert "drift" in fc.method and fc.calibration == "conformal" and fc.origins == 3


def test_the_model_keeps_its_weight_where_it_is_better():
    """A noisy series the stand-in model forecasts perfectly on the backtest: it takes (almost) all the weight."""
    rng = np.random.default_rng(0)
    y = 100 + rng.normal(0, 5, 80)
    horizon = 12
    cuts = backtest_cuts(len(y), horizon)
    steps = backtest_steps(len(y), horizon)
    perfect = [np.repeat(y[c: c + steps, None], len(QUANTILES), 1) + np.linspace(-5, 5, len(QUANTILES))
               for c in cuts]
    final = np.full((horizon, len(QUANTILES)), 100.0) + np.linspace(-8, 8, len(QUANTILES))
    fc = combine(y, "MS", horizon, [final, *perfect])
    assert fc.method.startswith("global") and fc.weights["global"] > 0.99
    assert np.allclose(median(fc), 100.0, atol=0.1)


def test_constant_and_short_and_non_negative():
    fc = combine(np.full(20, 7.5), "D", 5)
    assert np.all(fc.quantiles == 7.5) and fc.method == "naive"
    short = combine(np.array([1.0, 2.0, 3.0]), "QS", 4)  # three points: one origin, one step, still a backtest
    assert np.allclose(median(short), [4, 5, 6, 7]) and short.backtest_mase == 0.0 and short.origins == 1
    two = combine(np.array([1.0, 2.0]), "QS", 4)  # too short for a backtest: drift, named as such
    assert np.allclose(median(two), [3, 4, 5, 6]) and two.backtest_mase is None and two.method == "drift"
    counts = np.array([0, 0, 3, 0, 0, 0, 2, 0, 0, 5, 0, 0, 0, 1, 0, 0, 4, 0, 0, 0] * 3, dtype=float)
    fc = combine(counts, "D", 14)
    assert np.all(fc.quantiles >= 0)  # a non-negative history is never forecast below zero


def test_quantiles_ordered_and_intervals_nest():
    rng = np.random.default_rng(1)
    t = np.arange(120)
    y = 50 + 0.3 * t + 8 * np.sin(2 * np.pi * t / 12) + rng.normal(0, 2, t.size)
    fc = combine(y, "MS", 24, bent_model(y, "MS", 24))
    assert np.all(np.diff(fc.quantiles, axis=1) >= 0)
    assert abs(sum(fc.weights.values()) - 1) < 1e-9


def test_conformal_intervals_cover_on_random_walks():
    """90 % intervals from the backtest errors cover about 90 % of the next points of seeded random walks (a shape
    none of the methods forecasts exactly): between 80 % and 98 % over 200 series."""
    rng = np.random.default_rng(7)
    hits90, hits50, total = 0, 0, 0
    for _ in range(200):
        walk = np.cumsum(rng.normal(0, 1, 60 + 6)) + 100
        y, future = walk[:60], walk[60:]
        fc = combine(y, "YS", 6)
        q = fc.quantiles
        hits90 += int(np.sum((future >= q[:, 0]) & (future <= q[:, -1])))
        hits50 += int(np.sum((future >= q[:, 2]) & (future <= q[:, 4])))
        total += len(future)
    assert 0.80 <= hits90 / total <= 0.98, hits90 / total
    assert 0.35 <= hits50 / total <= 0.65, hits50 / total


def test_backtest_cuts_leave_targets_and_history():
    assert backtest_cuts(30, 14) == [16, 18, 20]  # 10 steps scored, origins 2 apart
    assert backtest_cuts(3, 14) == [2] and backtest_cuts(2, 14) == []  # never fewer than MIN_FIT points
    for n in (5, 30, 144, 768):
        cuts = backtest_cuts(n, 24)
        assert cuts == sorted(cuts) and all(c + backtest_steps(n, 24) <= n for c in cuts)


def test_applicable_depends_on_shape():
    y = np.arange(1.0, 50.0)
    names = {name for name, _ in classical.applicable(y, 12, 12)}
    assert {"naive", "drift", "log_drift", "seasonal_naive", "seasonal_drift"} <= names and "tsb" not in names
    names = {name for name, _ in classical.applicable(-y, 24, 168)}
    assert "log_drift" not in names and "seasonal_naive2" not in names
