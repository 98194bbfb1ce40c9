"""The degraded-mode forecaster, numpy only: the same contract as the global model (point = median, quantiles
QUANTILES for the requested horizon, original units), no ONNX, no fitted weights, so it can answer when the model
runner cannot.

Method, by history length n and season m = SEASON[frequency]:
  n >= max(2m, 8):  the standard Theta method (Assimakopoulos & Nikolopoulos 2000; Hyndman & Billah 2003), the
                    M3 winner: a seasonality test (lag-m autocorrelation at 90 %); if seasonal, classical
                    decomposition (multiplicative when the history is positive, else additive); on the adjusted
                    series simple exponential smoothing (alpha by one-step squared error over a grid) plus half the
                    slope of the linear trend (the theta=2 / theta=0 lines combined); reseasonalised.
                    Intervals: normal, sigma from the one-step in-sample errors, widened as SES's
                    sigma^2 (1 + (h - 1) alpha^2) with h.
  m < n < 2m or n < 8: seasonal naive with drift (naive with drift when n <= m), intervals from the in-sample
                    errors of the same method, widened with sqrt(steps ahead / m) seasons.
  n < 2:            the last value, zero spread.
Only the last FIT_WINDOW(m) points are used, so the cost per series is bounded (a few milliseconds).

Why not statsforecast's AutoETS/AutoTheta in the service: it needs pandas < 3 plus fugue/pyarrow in the serving
image, and AutoETS costs ~0.2 s per monthly series on one core; statsforecast is kept as the benchmark's reference.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from triserve.families.forecast.features import QUANTILES, SEASON

# standard normal quantiles of QUANTILES (no scipy on the serving path)
_Z = {0.05: -1.6448536, 0.1: -1.2815516, 0.25: -0.6744898, 0.5: 0.0, 0.75: 0.6744898, 0.9: 1.2815516,
      0.95: 1.6448536}
Z = np.array([_Z[q] for q in QUANTILES])
_ALPHAS = np.linspace(0.02, 1.0, 50)


def fit_window(m: int) -> int:
    return max(10 * m, 120)


def _seasonal_test(y: np.ndarray, m: int) -> bool:
    """Lag-m autocorrelation significantly non-zero at 90 % (the test of the M3/M4 Theta benchmark)."""
    n = len(y)
    if m <= 1 or n < 3 * m:
        return False
    x = y - y.mean()
    den = float(np.dot(x, x))
    if den <= 0:
        return False
    acf = np.correlate(x, x, mode="full")[n: n + m] / den  # lags 1..m
    limit = 1.645 * np.sqrt((1 + 2 * np.sum(acf[:-1] ** 2)) / n)
    return bool(abs(acf[-1]) > limit)


def _seasonal_indices(y: np.ndarray, m: int, multiplicative: bool) -> np.ndarray:
    """Classical decomposition: centred moving average, then the mean ratio/difference per season position,
    normalised; returns index per position 0..m-1 aligned so position (len(y) + k) % m is step k's."""
    if m % 2 == 0:
        w = np.r_[0.5, np.ones(m - 1), 0.5] / m
    else:
        w = np.ones(m) / m
    trend = np.convolve(y, w, mode="valid")
    off = (len(w) - 1) // 2
    seg = y[off: off + len(trend)]
    detr = seg / trend if multiplicative else seg - trend
    pos = (np.arange(len(trend)) + off) % m
    counts = np.bincount(pos, minlength=m)
    sums = np.bincount(pos, weights=detr, minlength=m)
    idx = np.where(counts > 0, sums / np.maximum(counts, 1), 1.0 if multiplicative else 0.0)  # mean per position
    if multiplicative:
        idx = idx / idx.mean()
    else:
        idx = idx - idx.mean()
    return idx


def _ses(y: np.ndarray) -> tuple[float, float, np.ndarray]:
    """SES over a grid of alphas (vectorised): (alpha, final level, one-step in-sample errors of the best)."""
    level = np.full(_ALPHAS.shape, y[0])
    errors = np.zeros((len(y) - 1, len(_ALPHAS)))
    for t in range(1, len(y)):
        e = y[t] - level
        errors[t - 1] = e
        level = level + _ALPHAS * e
    best = int(np.argmin((errors ** 2).sum(axis=0)))
    return float(_ALPHAS[best]), float(level[best]), errors[:, best]


def seasonal_adjust(y: np.ndarray, m: int) -> tuple[np.ndarray, Callable[[np.ndarray, int], np.ndarray]]:
    """Classical seasonal adjustment where the lag-m autocorrelation says there is a season (multiplicative when the
    history is positive, else additive): (adjusted series, function putting the season back on a forecast whose
    first axis is `steps` long)."""
    if m <= 1 or not _seasonal_test(y, m):
        return y, lambda f, steps: f
    positive = bool(np.all(y > 0))
    idx = _seasonal_indices(y, m, positive)
    n = len(y)
    hist = idx[np.arange(n) % m]

    def future(f: np.ndarray, steps: int) -> np.ndarray:
        s = idx[(n + np.arange(steps)) % m].reshape((steps,) + (1,) * (np.ndim(f) - 1))
        return f * s if positive else f + s

    return (y / hist if positive else y - hist), future


def theta_forecast(y: np.ndarray, horizon: int, m: int) -> np.ndarray:
    """[horizon, Q] quantile forecasts by the standard Theta method (see module docstring)."""
    y = np.asarray(y, np.float64)[-fit_window(m):]
    n = len(y)
    adj, reseason = seasonal_adjust(y, m)
    alpha, level, err = _ses(adj)
    t = np.arange(n, dtype=np.float64)
    slope = float(np.polyfit(t, adj, 1)[0]) if n > 2 else 0.0
    k = np.arange(1, horizon + 1, dtype=np.float64)
    # Hyndman & Billah (2003): SES forecast + b/2 * ((h - 1) + 1/alpha - (1 - alpha)^n / alpha)
    point = level + 0.5 * slope * ((k - 1) + 1 / alpha - (1 - alpha) ** n / alpha)
    sigma = float(np.sqrt(np.mean(err ** 2))) if len(err) else 0.0
    spread = sigma * np.sqrt(1 + (k - 1) * alpha ** 2)
    return reseason(point[:, None] + spread[:, None] * Z[None, :], horizon)


def seasonal_naive_drift_forecast(y: np.ndarray, horizon: int, m: int) -> np.ndarray:
    """[horizon, Q]: last season (last value when n <= m) plus the mean change per step, normal intervals from the
    method's in-sample errors widened with the number of seasons ahead."""
    y = np.asarray(y, np.float64)
    n = len(y)
    if n < 2:
        return np.repeat(np.full((horizon, 1), y[-1]), len(QUANTILES), axis=1)
    lag = m if n > m else 1
    drift = (y[-1] - y[0]) / (n - 1)
    k = np.arange(horizon)
    base = y[n - lag + k % lag] if lag > 1 else np.full(horizon, y[-1])
    point = base + drift * (k // lag + 1) * lag
    resid = y[lag:] - y[:-lag] - drift * lag
    sigma = float(np.sqrt(np.mean(resid ** 2))) if len(resid) else 0.0
    spread = sigma * np.sqrt(k // lag + 1)
    return point[:, None] + spread[:, None] * Z[None, :]


def fallback_forecast(history, frequency: str, horizon: int) -> np.ndarray:
    """[horizon, len(QUANTILES)] float64 quantiles (original units) for one series; NaN-free input expected."""
    y = np.asarray(history, np.float64)
    if y.ndim != 1 or y.size == 0 or not np.all(np.isfinite(y)):
        raise ValueError("history must be a non-empty finite 1-D array")
    m = SEASON[frequency]
    if len(y) < 2:
        return np.repeat(np.full((horizon, 1), y[-1]), len(QUANTILES), axis=1)
    if np.ptp(y) == 0:
        return np.full((horizon, len(QUANTILES)), y[-1])
    if len(y) >= max(2 * m, 8):
        q = theta_forecast(y, horizon, m)
    else:
        q = seasonal_naive_drift_forecast(y, horizon, m)
    return np.sort(q, axis=1)  # multiplicative reseasonalising keeps order; sort guards negative indices
