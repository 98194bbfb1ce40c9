"""The short ARIMA candidate (families/forecast/arima.py) and the two-season profile (classical.mstl)."""
from __future__ import annotations

import numpy as np
import pytest

from triserve.families.forecast import arima, classical


def test_kpss_differences_a_random_walk_and_leaves_noise_alone():
    rng = np.random.default_rng(0)
    assert arima.ndiffs(rng.normal(0, 1, 120)) == 0
    assert arima.ndiffs(np.cumsum(rng.normal(0.5, 1, 120))) >= 1
    assert arima.kpss(np.full(30, 4.0)) == 0.0


def test_a_persistent_growth_rate_beats_drift_and_a_quadratic_is_exact():
    """Steps that follow an AR(1) around a drift: the one-step forecast is nearer the true conditional mean than
    drift's (every seed); an accelerating series (second differences constant) is continued exactly."""
    for seed in range(5):
        rng = np.random.default_rng(seed)
        d = [1.0]
        for _ in range(59):
            d.append(1.0 + 0.8 * (d[-1] - 1.0) + rng.normal(0, 0.5))
        y = np.concatenate([[100.0], 100.0 + np.cumsum(d)])
        truth = y[-1] + 1.0 + 0.8 * (d[-1] - 1.0)
        assert abs(arima.forecast(y, 1)[0] - truth) < abs(classical.drift(y, 1, 1)[0] - truth)
    t = np.arange(40.0)
    np.testing.assert_allclose(arima.forecast(3 + 0.5 * t ** 2, 3), 3 + 0.5 * np.arange(40.0, 43.0) ** 2, rtol=1e-9)


def test_a_stationary_cycle_reverts_and_a_line_is_continued():
    t = np.arange(80.0)
    line = 3.0 + 2.0 * t
    np.testing.assert_allclose(arima.forecast(line, 5), 3.0 + 2.0 * np.arange(80, 85), rtol=1e-9)
    rng = np.random.default_rng(1)
    x = [0.0, 0.0]
    for _ in range(118):
        x.append(1.5 * x[-1] - 0.8 * x[-2] + rng.normal())
    cycle = 50 + np.array(x)
    f = arima.forecast(cycle, 40)
    assert abs(f[-1] - cycle.mean()) < 3 * np.std(cycle) and np.all(np.isfinite(f))


def test_arima_is_a_candidate_from_eight_points():
    assert ("arima", 1) in classical.applicable(np.arange(1.0, 9.0), 1, 1)
    assert all(name != "arima" for name, _ in classical.applicable(np.arange(1.0, 8.0), 1, 1))


@pytest.mark.parametrize("m, m2", [(24, 168), (48, 336)])
def test_mstl_continues_a_daily_by_weekly_season_exactly(m, m2):
    def shape(t):
        return 100 + 10 * np.sin(2 * np.pi * t / m) + 6.0 * (t // m % 7 == 5) - 3.0 * (t // m % 7 == 6)

    t = np.arange(5 * m2 + 7)
    np.testing.assert_allclose(classical.mstl(shape(t), 2 * m, m, m2), shape(np.arange(len(t), len(t) + 2 * m)),
                               atol=1e-9)
    names = {name for name, _ in classical.applicable(shape(t), m, m2)}
    assert "mstl" in names
    assert "mstl" not in {name for name, _ in classical.applicable(np.arange(1.0, 800.0), 7, 364)}  # D: not weekly
