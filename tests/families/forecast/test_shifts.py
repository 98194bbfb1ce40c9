"""Level shifts (families/forecast/shifts.py): a step that persists is forecast from the new level at every frequency,
with and without noise, in process (with and without a model that bends every forecast) and through a real server;
a spike that returns, a trend, a season, intermittent demand and noise are no shift."""
from __future__ import annotations

import httpx
import numpy as np
import pytest

from scripts.forecast.textbook import cases
from tests.families.forecast.test_ensemble import bent_model
from triserve.families.forecast.ensemble import combine
from triserve.families.forecast.features import MAX_HORIZON, MEDIAN_INDEX
from triserve.families.forecast.shifts import detect, remove

FREQS = ("YS", "QS", "MS", "W", "D", "h")


def step(before: int, after: int, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    y = np.r_[np.full(before, 10.0), np.full(after, 30.0)]
    return y + noise * np.random.default_rng(seed).standard_normal(len(y))


def served(y: np.ndarray, frequency: str, bent: bool) -> np.ndarray:
    """The median forecast as the service makes it: the step removed, then the ensemble (optionally with a model)."""
    adjusted, _ = remove(y)
    horizon = MAX_HORIZON[frequency]
    model = bent_model(adjusted, frequency, horizon) if bent else None
    return combine(adjusted, frequency, horizon, model).quantiles[:, MEDIAN_INDEX]


@pytest.mark.parametrize("frequency", FREQS)
@pytest.mark.parametrize("before,after", [(20, 20), (30, 10), (40, 8), (10, 30), (40, 3)])
@pytest.mark.parametrize("bent", [False, True])
def test_a_step_is_continued_at_the_new_level(frequency, before, after, bent):
    y = step(before, after)
    assert detect(y).at == before and detect(y).size == pytest.approx(20.0)
    assert np.allclose(served(y, frequency, bent), 30.0, rtol=1e-6)


@pytest.mark.parametrize("frequency", FREQS)
@pytest.mark.parametrize("before,after", [(20, 20), (40, 8), (120, 8)])
def test_a_noisy_step_is_continued_near_the_new_level(frequency, before, after):
    """Noise sigma 1 on a step of 20: the forecast stays within 2 sigma of 30 at every step (the old level and the
    trend a straddling backtest saw are 10+ sigma away)."""
    y = step(before, after, noise=1.0, seed=before + after)
    shift = detect(y)
    assert shift is not None and shift.at == before and abs(shift.size - 20.0) < 1.5
    for bent in (False, True):
        assert np.max(np.abs(served(y, frequency, bent) - 30.0)) < 2.0


def test_a_step_on_a_trend_keeps_the_trend():
    t = np.arange(60, dtype=float)
    y = 100 + 2 * t + np.where(t >= 45, 50.0, 0.0)
    shift = detect(y)
    assert shift.at == 45 and shift.size == pytest.approx(50.0)
    assert np.allclose(served(y, "MS", False)[:3], [100 + 2 * 60 + 50, 100 + 2 * 61 + 50, 100 + 2 * 62 + 50])


@pytest.mark.parametrize("spike", [
    np.r_[np.full(30, 10.0), 30.0, np.full(9, 10.0)],  # one point
    np.r_[np.full(30, 10.0), np.full(3, 30.0), np.full(7, 10.0)],  # three points that return
    np.r_[np.full(30, 10.0), np.full(3, 30.0), np.full(7, 11.0)],  # returns near the old level
    np.r_[np.full(38, 10.0), np.full(2, 30.0)],  # a jump in the last 2 points: too soon to tell (3 make a shift)
    np.r_[np.full(39, 10.0), 30.0],
])
def test_a_spike_is_no_shift(spike):
    assert detect(spike) is None
    assert remove(spike)[0] is spike or np.array_equal(remove(spike)[0], spike)


def test_a_spike_that_returned_is_forecast_at_the_level():
    y = np.r_[np.full(30, 10.0), np.full(3, 30.0), np.full(7, 10.0)]
    assert np.allclose(served(y, "YS", False), 10.0, atol=0.5)


def test_shapes_without_a_step_are_left_alone():
    """Every textbook shape but the steps (lines, seasons, exponential and damped trends, noise, intermittent demand,
    the scale variants), a seeded random walk and a season with a trend: no shift detected."""
    flagged = [c.name for c in cases() if c.shape not in ("level_step", "late_step", "noisy_step")
               and detect(c.history) is not None]
    assert not flagged
    rng = np.random.default_rng(3)
    assert detect(np.cumsum(rng.normal(0, 1, 300))) is None
    t = np.arange(120)
    assert detect(50 + 0.5 * t + 10 * np.sin(2 * np.pi * t / 12) + rng.normal(0, 1, 120)) is None


def test_every_textbook_step_is_detected_at_its_place():
    for c in cases():
        if c.shape in ("level_step", "late_step", "noisy_step"):
            shift = detect(c.history)
            assert shift is not None, c.name
            assert np.allclose(c.history[shift.at:][:3] - c.history[shift.at - 1], shift.size, rtol=0.2,
                               atol=3.0 * abs(c.ref) if c.kind == "level" else 0), c.name


@pytest.mark.parametrize("frequency", ["D", "QS"])
def test_the_issue_step_through_a_real_server(server, frequency):
    """The issue's report (10 ... 10, 30 ... 30 forecast 28.1 at D and 30.9 falling at QS): 30 at every step, and the
    answer names the shift (where, and by how much the history before it was moved)."""
    values = [10.0] * 30 + [30.0] * 10
    resp = httpx.post(f"{server.url}/v1/forecast", json={
        "values": values, "start": "2020-01-01T00:00:00", "frequency": frequency, "horizon": 6, "model": "primary"},
        timeout=60)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert np.allclose([p["point"] for p in body["forecast"]], 30.0, rtol=1e-6)
    shift = body["input"]["level_shift"]
    assert shift["size"] == pytest.approx(20.0)
    assert shift["at"].startswith("2020-01-31" if frequency == "D" else "2027-07-01")
    flat = httpx.post(f"{server.url}/v1/forecast", json={
        "values": [10.0] * 40, "start": "2020-01-01T00:00:00", "frequency": frequency, "horizon": 2}, timeout=60)
    assert flat.json()["input"]["level_shift"] is None
