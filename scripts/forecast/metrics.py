"""Point and probabilistic forecast metrics (numpy), one series at a time; used by the benchmark and training checks.

Conventions (M4 / GluonTS):
  MASE   mean |y - yhat| over the horizon / in-sample seasonal-naive MAE of the history (lag m; lag 1 when the
         history has m points or fewer). Undefined (nan) when that denominator is 0.
  RMSSE  root mean squared error over the horizon / root in-sample mean squared seasonal-naive step of the
         history (lag as MASE; M5's RMSSE with the seasonal lag, so it reads like MASE but punishes large misses)
  sMAPE  mean of 200 |y - yhat| / (|y| + |yhat|) in percent, a step where both are 0 counts 0.
  WQL    weighted quantile loss of one series: sum over quantiles and steps of 2 * pinball_q / sum |y|, averaged over
         the quantiles (nan when sum |y| is 0).
  coverage  share of target points inside [q_lo, q_hi] (inclusive).
"""
from __future__ import annotations

import numpy as np


def seasonal_naive_scale(history, m: int) -> float:
    h = np.asarray(history, dtype=np.float64)
    lag = m if len(h) > m else 1
    if len(h) <= lag:
        return float("nan")
    return float(np.mean(np.abs(h[lag:] - h[:-lag])))


def mase(y, yhat, history, m: int) -> float:
    d = seasonal_naive_scale(history, m)
    if not np.isfinite(d) or d <= 0:
        return float("nan")
    return float(np.mean(np.abs(np.asarray(y, np.float64) - np.asarray(yhat, np.float64))) / d)


def rmsse(y, yhat, history, m: int) -> float:
    h = np.asarray(history, dtype=np.float64)
    lag = m if len(h) > m else 1
    if len(h) <= lag:
        return float("nan")
    d = float(np.mean((h[lag:] - h[:-lag]) ** 2))
    if d <= 0:
        return float("nan")
    err = np.asarray(y, np.float64) - np.asarray(yhat, np.float64)
    return float(np.sqrt(np.mean(err * err) / d))


def smape(y, yhat) -> float:
    y = np.asarray(y, np.float64)
    yhat = np.asarray(yhat, np.float64)
    den = np.abs(y) + np.abs(yhat)
    return float(np.mean(np.divide(200.0 * np.abs(y - yhat), den, out=np.zeros_like(den), where=den > 0)))


def pinball_loss(y, q_pred, q: float) -> np.ndarray:
    diff = np.asarray(y, np.float64) - np.asarray(q_pred, np.float64)
    return np.maximum(q * diff, (q - 1.0) * diff)


def wql(y, quantile_preds, quantiles) -> float:
    """quantile_preds [h, Q] in original units."""
    y = np.asarray(y, np.float64)
    qp = np.asarray(quantile_preds, np.float64)
    denom = np.abs(y).sum()
    if denom <= 0:
        return float("nan")
    losses = [2.0 * pinball_loss(y, qp[:, j], q).sum() / denom for j, q in enumerate(quantiles)]
    return float(np.mean(losses))


def coverage(y, lower, upper) -> float:
    y = np.asarray(y, np.float64)
    return float(np.mean((y >= np.asarray(lower)) & (y <= np.asarray(upper))))


def seasonal_naive_forecast(history, horizon: int, m: int) -> np.ndarray:
    """The last season repeated (the last value when the history is shorter than one season)."""
    h = np.asarray(history, np.float64)
    if len(h) < m or m <= 1:
        return np.full(horizon, h[-1])
    return h[len(h) - m + np.arange(horizon) % m]


def gmean(values) -> float:
    v = np.asarray([x for x in values if np.isfinite(x) and x > 0], dtype=np.float64)
    return float(np.exp(np.mean(np.log(v)))) if v.size else float("nan")
