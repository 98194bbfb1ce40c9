"""Windowing and scaling for the forecaster: the one implementation used by training, export and serving.

Convention (seed 001 §2.1, the off-by-one that cost two weeks): a window ending at index t is CLOSED on both ends,
series[t - context + 1 : t + 1], i.e. it includes the observation at t; its targets are series[t + 1 : t + 1 + horizon].
Scaling is per window: (x - mean(window)) / scale, with the global `scale` taken from the training split.
"""
from __future__ import annotations

import numpy as np


def last_window(values: np.ndarray, context: int) -> np.ndarray:
    """The model input for forecasting after the last observation: the final `context` points."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError("series must be 1-D")
    if len(values) < context:
        raise ValueError(f"need at least {context} points, got {len(values)}")
    return values[len(values) - context:]


def training_windows(series: np.ndarray, context: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """All (window, target) pairs: for every t with a full window and full target, X=series[t-c+1:t+1], Y=series[t+1:t+1+h]."""
    series = np.asarray(series, dtype=np.float64)
    n = len(series) - context - horizon + 1
    if n <= 0:
        raise ValueError(f"series of {len(series)} points is too short for context {context} + horizon {horizon}")
    ends = np.arange(context - 1, context - 1 + n)  # t: index of the window's last point
    x = np.stack([series[t - context + 1: t + 1] for t in ends])
    y = np.stack([series[t + 1: t + 1 + horizon] for t in ends])
    return x, y


def scale_windows(windows: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """[n, context] raw -> ([n, context] float32 scaled, [n] levels). Works on a single window too (n=1)."""
    w = np.atleast_2d(np.asarray(windows, dtype=np.float64))
    level = w.mean(axis=1)
    return ((w - level[:, None]) / scale).astype(np.float32), level


def scale_targets(targets: np.ndarray, levels: np.ndarray, scale: float) -> np.ndarray:
    """Targets in the scaled space of their windows (what the model learns to output)."""
    return ((np.atleast_2d(targets) - np.asarray(levels)[:, None]) / scale).astype(np.float32)


def unscale(predictions: np.ndarray, levels: np.ndarray, scale: float) -> np.ndarray:
    """Scaled model output [n, horizon] -> original units."""
    return np.atleast_2d(predictions).astype(np.float64) * scale + np.asarray(levels, dtype=np.float64)[:, None]
