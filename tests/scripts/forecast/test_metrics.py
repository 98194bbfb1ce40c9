"""The benchmark's metric functions on hand-computed examples."""
import numpy as np
import pytest

from scripts.bench.forecast_accuracy import score_window, summarise
from scripts.forecast.metrics import coverage, gmean, mase, rmsse, seasonal_naive_forecast, smape, wql


def test_mase_hand_computed():
    history = np.array([1.0, 2.0, 3.0, 5.0])  # lag-1 in-sample MAE = (1 + 1 + 2) / 3 = 4/3
    assert mase([6.0, 7.0], [5.0, 5.0], history, 1) == pytest.approx((1 + 2) / 2 / (4 / 3))
    # lag m when the history has more than m points; lag 1 otherwise
    # lag-2 errors of [0, 2, 0, 2, 1]: 0, 0, 1 -> scale 1/3
    assert mase([0.0], [1.0], [0.0, 2.0, 0.0, 2.0, 1.0], 2) == pytest.approx(3.0)
    assert mase([0.0], [1.0], [0.0, 2.0], 2) == pytest.approx(0.5)  # 2 points <= m: lag 1
    assert np.isnan(mase([1.0], [1.0], [3.0, 3.0, 3.0], 1))


def test_rmsse_hand_computed():
    history = np.array([1.0, 2.0, 3.0, 5.0])  # lag-1 in-sample mean squared step = (1 + 1 + 4) / 3 = 2
    assert rmsse([6.0, 7.0], [5.0, 5.0], history, 1) == pytest.approx(np.sqrt((1 + 4) / 2 / 2))
    assert rmsse([0.0], [1.0], [0.0, 2.0, 0.0, 2.0, 1.0], 2) == pytest.approx(np.sqrt(1 / (1 / 3)))  # lag 2
    assert np.isnan(rmsse([1.0], [1.0], [3.0, 3.0, 3.0], 1))


def test_smape_hand_computed():
    assert smape([100.0, 0.0], [110.0, 0.0]) == pytest.approx((200 * 10 / 210 + 0) / 2)


def test_wql_hand_computed():
    y = np.array([10.0, 20.0])
    q = np.array([[8.0, 10.0, 12.0], [18.0, 25.0, 30.0]])
    qs = [0.1, 0.5, 0.9]
    # pinball: q=0.1: 0.1*2 + 0.1*2 = 0.4; q=0.5: 0 + 0.5*5 = 2.5; q=0.9: 0.1*2 + 0.1*10 = 1.2
    expected = np.mean([2 * 0.4 / 30, 2 * 2.5 / 30, 2 * 1.2 / 30])
    assert wql(y, q, qs) == pytest.approx(expected)


def test_coverage_and_seasonal_naive():
    assert coverage([1, 2, 3, 4], [0, 2.5, 3, 0], [1, 3, 3, 3]) == pytest.approx(0.5)
    np.testing.assert_array_equal(seasonal_naive_forecast([1, 2, 3, 4, 5, 6], 5, 3), [4, 5, 6, 4, 5])
    np.testing.assert_array_equal(seasonal_naive_forecast([1, 2], 2, 3), [2, 2])
    assert gmean([1.0, 4.0, np.nan, 0.0]) == pytest.approx(2.0)


def test_score_and_summary():
    qs = [0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95]
    hist = np.array([1.0, 2.0, 1.0, 2.0])
    y = np.array([1.0, 2.0])
    perfect = np.repeat(y[:, None], len(qs), axis=1)
    s = score_window(hist, y, perfect, 1, qs)
    assert s["mase"] == 0 and s["rmsse"] == 0 and s["smape"] == 0 and s["wql"] == 0
    assert s["cov90"] == 1 and s["cov50"] == 1
    naive = score_window(hist, y, np.repeat(np.array([[2.0], [2.0]]), len(qs), axis=1), 1, qs)
    better = score_window(hist, y, np.repeat(np.array([[1.5], [2.0]]), len(qs), axis=1), 1, qs)
    summ = summarise([better], [naive])
    assert summ["gmean_mase_ratio"] == pytest.approx(0.5)
    assert summ["gmean_rmsse_ratio"] == pytest.approx(0.5)  # squared errors (0.25, 0) vs (1, 0)
