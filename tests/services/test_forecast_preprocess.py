"""The forecast window convention against hand-computed references (families/forecast/preprocess.py).

Convention: a window ending at t is series[t - context + 1 : t + 1] (closed: it includes t); its targets are
series[t + 1 : t + 1 + horizon]; a window is scaled as (x - mean(window)) / scale.
"""
import numpy as np
import pytest

from families.forecast.preprocess import last_window, scale_targets, scale_windows, training_windows, unscale


def test_training_windows_hand_computed():
    x, y = training_windows(np.arange(10.0), context=3, horizon=2)
    # t runs over 2..7: 10 - 3 - 2 + 1 = 6 pairs
    expected_x = np.array([[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 6], [5, 6, 7]], dtype=np.float64)
    expected_y = np.array([[3, 4], [4, 5], [5, 6], [6, 7], [7, 8], [8, 9]], dtype=np.float64)
    np.testing.assert_array_equal(x, expected_x)
    np.testing.assert_array_equal(y, expected_y)
    assert x.dtype == np.float64 and y.dtype == np.float64


def test_first_and_last_window_boundaries():
    x, y = training_windows(np.arange(10.0), context=3, horizon=2)
    np.testing.assert_array_equal(x[0], [0, 1, 2])
    np.testing.assert_array_equal(y[0], [3, 4])  # the first target is the point right after the window's last
    np.testing.assert_array_equal(x[-1], [5, 6, 7])
    np.testing.assert_array_equal(y[-1], [8, 9])  # the last target is the series' last point


def test_exact_fit_gives_one_window():
    x, y = training_windows(np.arange(5.0), context=3, horizon=2)
    np.testing.assert_array_equal(x, [[0, 1, 2]])
    np.testing.assert_array_equal(y, [[3, 4]])


def test_last_window_ends_at_last_observation():
    np.testing.assert_array_equal(last_window(np.arange(10.0), 3), [7, 8, 9])
    np.testing.assert_array_equal(last_window(np.arange(3.0), 3), [0, 1, 2])
    # the serving window is the training window for the origin after the last training target
    x, _ = training_windows(np.arange(12.0), context=3, horizon=2)
    np.testing.assert_array_equal(last_window(np.arange(10.0), 3), x[-1])


def test_scale_windows_hand_computed():
    xs, levels = scale_windows(np.array([[1.0, 2.0, 3.0], [10.0, 10.0, 16.0]]), scale=2.0)
    np.testing.assert_allclose(levels, [2.0, 12.0])
    np.testing.assert_allclose(xs, [[-0.5, 0.0, 0.5], [-1.0, -1.0, 2.0]])
    assert xs.dtype == np.float32


def test_scale_single_window_and_targets():
    xs, levels = scale_windows(np.array([7.0, 8.0, 9.0]), scale=0.5)
    assert xs.shape == (1, 3)
    np.testing.assert_allclose(xs, [[-2.0, 0.0, 2.0]])
    ys = scale_targets(np.array([10.0, 11.0]), levels, scale=0.5)
    np.testing.assert_allclose(ys, [[4.0, 6.0]])
    np.testing.assert_allclose(unscale(ys, levels, 0.5), [[10.0, 11.0]])


def test_scale_unscale_round_trip():
    rng = np.random.default_rng(0)
    series = 300 + np.cumsum(rng.normal(size=60))
    x, y = training_windows(series, context=12, horizon=4)
    xs, levels = scale_windows(x, scale=1.7)
    ys = scale_targets(y, levels, scale=1.7)
    np.testing.assert_allclose(unscale(ys, levels, 1.7), y, atol=1e-4)  # float32 in the scaled space
    np.testing.assert_allclose(unscale(xs, levels, 1.7), x, atol=1e-4)
    np.testing.assert_allclose(xs.mean(axis=1), 0.0, atol=1e-5)


@pytest.mark.parametrize("length, context, horizon", [(4, 3, 2), (0, 3, 2), (2, 3, 0)])
def test_training_windows_too_short(length, context, horizon):
    with pytest.raises(ValueError):
        training_windows(np.arange(float(length)), context, horizon)


def test_last_window_errors():
    with pytest.raises(ValueError):
        last_window(np.arange(2.0), 3)
    with pytest.raises(ValueError):
        last_window(np.arange(6.0).reshape(2, 3), 3)
