"""The numpy fallback: the same output contract as the model, for long, short and constant series."""
import numpy as np
import pytest

from triserve.families.forecast.features import QUANTILES
from triserve.families.forecast.theta import fallback_forecast


@pytest.mark.parametrize("n", [1, 2, 5, 13, 30, 300])
def test_shapes_and_monotone_quantiles(n):
    rng = np.random.default_rng(n)
    y = 100 + 10 * np.sin(np.arange(n) * 2 * np.pi / 12) + rng.standard_normal(n)
    q = fallback_forecast(y, "MS", 24)
    assert q.shape == (24, len(QUANTILES)) and np.isfinite(q).all()
    assert np.all(np.diff(q, axis=1) >= 0)


def test_seasonal_series_is_followed_and_constant_is_kept():
    y = np.tile([1.0, 5.0, 3.0, 8.0], 10) + 100
    med = fallback_forecast(y, "QS", 8)[:, QUANTILES.index(0.5)]
    np.testing.assert_allclose(med, np.tile([1.0, 5.0, 3.0, 8.0], 2) + 100, atol=0.5)
    np.testing.assert_array_equal(fallback_forecast(np.full(40, 7.0), "D", 14), 7.0)
