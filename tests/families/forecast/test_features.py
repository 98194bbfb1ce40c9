"""The shared pre/post-processing of the global forecaster: scale-free round trips, constant and short series."""
import numpy as np
import pytest

from triserve.families.forecast.features import (
    CONTEXT,
    FREQUENCIES,
    H_MAX,
    N_FEATURES,
    QUANTILES,
    calendar_features,
    infer_frequency,
    prepare_batch,
    step_timestamps,
    unscale,
)

T0 = np.datetime64("2024-01-01T00:00:00", "s")


def _series(n, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 10 + np.sin(2 * np.pi * t / 12) * 3 + rng.standard_normal(n) * 0.5


@pytest.mark.parametrize("scale", [1e-6, 1e-3, 1.0, 1e3, 1e6, 1e9, 1e12])
def test_scaled_context_is_scale_free_and_round_trips(scale):
    base = _series(200)
    ref = prepare_batch([base], ["MS"], [T0])
    b = prepare_batch([base * scale + 7 * scale], ["MS"], [T0])
    # the graph sees the same context whatever the unit and offset, and the same features whatever the unit
    np.testing.assert_allclose(b.feeds["context"], ref.feeds["context"], atol=1e-5)
    np.testing.assert_allclose(prepare_batch([base * scale], ["MS"], [T0]).feeds["features"], ref.feeds["features"],
                               atol=1e-6)
    # unscale(scaled context) gives the original values back (relative 1e-6: float32 in the middle)
    ctx = np.repeat(b.feeds["context"][:, -100:, None], len(QUANTILES), axis=2)  # observed part (MS keeps 144)
    back = unscale(ctx, b.loc, b.scale)[0, :, 0]
    orig = (base * scale + 7 * scale)[-100:]
    np.testing.assert_allclose(back, orig, rtol=1e-6)


def test_feed_contract():
    b = prepare_batch([_series(600), _series(20)], ["MS", "h"], [T0, T0])
    assert b.feeds["context"].shape == (2, CONTEXT) and b.feeds["context"].dtype == np.float32
    assert b.feeds["mask"].shape == (2, CONTEXT) and b.feeds["mask"].dtype == np.float32
    assert b.feeds["freq"].dtype == np.int64 and list(b.feeds["freq"]) == [FREQUENCIES.index("MS"),
                                                                          FREQUENCIES.index("h")]
    assert b.feeds["features"].shape == (2, N_FEATURES) and b.feeds["features"].dtype == np.float32


def test_constant_series_forecasts_the_constant():
    for level in (0.0, 5.0, -3e9, 1e-6):
        b = prepare_batch([np.full(50, level)], ["D"], [T0])
        assert np.all(b.feeds["context"] == 0)
        assert b.scale[0] > 0 and np.isfinite(b.scale[0])
        q = unscale(np.ones((1, H_MAX, len(QUANTILES)), np.float32), b.loc, b.scale, 14)
        np.testing.assert_allclose(q, level, rtol=1e-9, atol=1e-250)


def test_short_series_left_padded_with_mask():
    h = [1.0, 2.0, 4.0]
    b = prepare_batch([h], ["W"], [T0])
    mask = b.feeds["mask"][0]
    assert mask[:-3].sum() == 0 and np.all(mask[-3:] == 1)
    assert np.all(b.feeds["context"][0, :-3] == 0)
    # loc and scale come from the three observed points only
    assert b.loc[0] == pytest.approx(7 / 3)
    assert b.scale[0] == pytest.approx(np.mean(np.abs(np.array(h) - 7 / 3)))
    assert b.feeds["features"][0, 4] == pytest.approx(3 / CONTEXT)


def test_nan_points_are_masked():
    h = _series(30)
    h[10] = np.nan
    b = prepare_batch([h], ["MS"], [T0])
    assert b.feeds["mask"][0].sum() == 29 and np.isfinite(b.feeds["context"]).all()


def test_unscale_cuts_to_horizons():
    q = np.zeros((2, H_MAX, len(QUANTILES)), np.float32)
    out = unscale(q, np.array([1.0, 2.0]), np.array([1.0, 1.0]), [3, 5])
    assert [o.shape for o in out] == [(3, len(QUANTILES)), (5, len(QUANTILES))]


def test_calendar_features_and_timestamps():
    f = calendar_features(np.array(["2024-01-01T00:00:00", "2024-07-01T00:00:00"], dtype="datetime64[s]"),
                          ["MS", "MS"])
    assert f.shape == (2, 4) and np.allclose(f[0, :2], [0, 1], atol=1e-6) and np.allclose(f[1, :2], [0, -1], atol=1e-6)
    assert np.all(calendar_features([T0], ["YS"]) == 0)
    ts = step_timestamps("2024-11-01", "MS", 3)
    assert [str(t)[:10] for t in ts] == ["2024-11-01", "2024-12-01", "2025-01-01"]
    assert str(step_timestamps("2024-01-01", "QS", 2, offset=1)[1])[:10] == "2024-07-01"


@pytest.mark.parametrize("freq", FREQUENCIES)
def test_infer_frequency(freq):
    assert infer_frequency(step_timestamps("2020-01-01", freq, 30)) == freq
