"""Per-frequency interval factors (families/forecast/intervals.py) as the served forecaster applies them."""
from __future__ import annotations

import numpy as np
import pytest

from triserve.families.forecast import intervals
from triserve.families.forecast.ensemble import backtest_cuts, backtest_steps, combine
from triserve.families.forecast.features import MEDIAN_INDEX, QUANTILES


def noisy_model(y: np.ndarray, horizon: int) -> list[np.ndarray]:
    """A stand-in global model: the last value with a fixed symmetric spread, for the full history and each cut."""
    out = []
    for k, c in enumerate([len(y), *backtest_cuts(len(y), horizon)]):
        steps = horizon if k == 0 else backtest_steps(len(y), horizon)
        out.append(np.full(steps, y[c - 1])[:, None] + np.linspace(-3, 3, len(QUANTILES))[None, :])
    return out


def half_widths(fc) -> np.ndarray:
    """Each quantile's distance from the median, per step."""
    return fc.quantiles - fc.quantiles[:, MEDIAN_INDEX:MEDIAN_INDEX + 1]


@pytest.fixture
def series() -> np.ndarray:
    return 100 + np.random.default_rng(3).normal(0, 2, 60)


def test_a_frequency_with_its_own_factors_uses_them_and_another_the_global_ones(series, monkeypatch):
    monkeypatch.setattr(intervals, "GLOBAL", {0.5: 1.0, 0.8: 1.0, 0.9: 1.0})
    monkeypatch.setattr(intervals, "BY_FREQUENCY", {})
    plain = {f: combine(series, f, 8, noisy_model(series, 8)) for f in ("W", "MS")}  # every factor 1
    monkeypatch.setattr(intervals, "BY_FREQUENCY", {"W": {0.5: 2.0, 0.8: 3.0, 0.9: 4.0}})
    weekly = combine(series, "W", 8, noisy_model(series, 8))
    monthly = combine(series, "MS", 8, noisy_model(series, 8))  # no table of its own: the global factors
    assert intervals.source("W") == "frequency" and intervals.source("MS") == "global"
    per_level = np.array([4.0, 3.0, 2.0, 1.0, 2.0, 3.0, 4.0])
    assert np.allclose(half_widths(weekly), per_level[None, :] * half_widths(plain["W"]))
    assert np.allclose(weekly.quantiles[:, MEDIAN_INDEX], plain["W"].quantiles[:, MEDIAN_INDEX])  # the point is kept
    assert np.array_equal(monthly.quantiles, plain["MS"].quantiles)
    monkeypatch.setattr(intervals, "GLOBAL", {0.5: 2.0, 0.8: 2.0, 0.9: 2.0})  # and the global table is what MS reads
    assert np.allclose(half_widths(combine(series, "MS", 8, noisy_model(series, 8))), 2.0 * half_widths(plain["MS"]))


def test_factors_follow_the_levels_of_each_quantile(monkeypatch):
    monkeypatch.setattr(intervals, "BY_FREQUENCY", {"h": {0.5: 1.5, 0.8: 1.6, 0.9: 1.7}})
    expect = {0.05: 1.7, 0.1: 1.6, 0.25: 1.5, 0.5: 1.0, 0.75: 1.5, 0.9: 1.6, 0.95: 1.7}
    assert intervals.factors("h").tolist() == [expect[q] for q in QUANTILES]
    assert intervals.factors("30min").tolist() == intervals.factors(None).tolist()


def test_the_shipped_table_covers_every_level_and_only_known_frequencies():
    from triserve.families.forecast.features import FREQUENCIES

    for f, table in intervals.BY_FREQUENCY.items():
        assert f in FREQUENCIES and set(table) == set(intervals.LEVELS)
        assert intervals.WINDOWS[f] >= intervals.MIN_WINDOWS
        assert all(0.3 < v < 4 for v in table.values())
