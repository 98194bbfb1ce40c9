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


# --- request regularisation ----------------------------------------------------------------------------------------
# Policy (documented in README "Forecasting input policy"):
#   * points are sorted by timestamp;
#   * each point is assigned to the frequency bucket containing it (monthly: its calendar month); several points in
#     one bucket (duplicates) are averaged;
#   * buckets with no point (gaps) and null/NaN values are imputed by linear interpolation between known neighbours
#     (edges: nearest known value); more than `max_gap_fraction` imputed points is refused;
#   * +/-inf is refused.
FIXED_STEPS = {"W": np.timedelta64(7, "D"), "D": np.timedelta64(1, "D"), "h": np.timedelta64(1, "h"),
               "min": np.timedelta64(1, "m")}
FREQUENCIES = ("MS", *FIXED_STEPS)


class SeriesError(ValueError):
    """A series that cannot be regularised; `code` and `details` go to the client as a 422."""

    def __init__(self, code: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.details = code, details or {}


def _buckets(ts: np.ndarray, frequency: str) -> tuple[np.ndarray, np.datetime64]:
    """datetime64[s] -> (integer bucket index from the first bucket, first bucket start)."""
    if frequency == "MS":
        months = ts.astype("datetime64[M]")
        first = months.min()
        return (months - first).astype(np.int64), first.astype("datetime64[s]")
    step = FIXED_STEPS[frequency]
    origin = ts.min()
    idx = ((ts - origin) // step).astype(np.int64)
    return idx, origin


def future_timestamps(last_bucket_start: np.datetime64, frequency: str, horizon: int) -> list[np.datetime64]:
    if frequency == "MS":
        m = np.datetime64(last_bucket_start, "M")
        return [(m + k).astype("datetime64[s]") for k in range(1, horizon + 1)]
    step = FIXED_STEPS[frequency]
    return [last_bucket_start + k * step for k in range(1, horizon + 1)]


def regularize(values: np.ndarray, timestamps: np.ndarray, frequency: str, max_points: int,
               max_gap_fraction: float) -> tuple[np.ndarray, np.datetime64, dict]:
    """Irregular (timestamps, values) -> (regular values, start of the last bucket, report of what was done)."""
    if frequency not in FREQUENCIES:
        raise SeriesError("unsupported_frequency", f"frequency {frequency!r} is not supported",
                          {"supported": list(FREQUENCIES)})
    values = np.asarray(values, dtype=np.float64)
    ts = np.asarray(timestamps, dtype="datetime64[s]")
    if values.shape != ts.shape or values.ndim != 1:
        raise SeriesError("length_mismatch", "values and timestamps must have the same length",
                          {"values": int(values.size), "timestamps": int(ts.size)})
    if np.isinf(values).any():
        raise SeriesError("non_finite_value", "series contains infinite values",
                          {"indices": np.flatnonzero(np.isinf(values))[:20].tolist()})
    order = np.argsort(ts, kind="stable")
    was_sorted = bool(np.all(order == np.arange(len(order))))
    ts, values = ts[order], values[order]
    idx, first = _buckets(ts, frequency)
    length = int(idx[-1]) + 1
    if length > max_points:
        raise SeriesError("series_too_long", f"series spans {length} {frequency} steps, above {max_points}",
                          {"limit": max_points, "span": length})
    sums = np.zeros(length)
    counts = np.zeros(length)
    known = ~np.isnan(values)
    np.add.at(sums, idx[known], values[known])
    np.add.at(counts, idx[known], 1)
    occupied = np.bincount(idx, minlength=length)
    duplicates = int((occupied[occupied > 1] - 1).sum())
    have = counts > 0
    if not have.any():
        raise SeriesError("no_values", "series has no finite values")
    regular = np.full(length, np.nan)
    regular[have] = sums[have] / counts[have]
    missing = ~have
    imputed = int(missing.sum())
    if imputed / length > max_gap_fraction:
        raise SeriesError("too_many_missing", f"{imputed} of {length} points are missing or null",
                          {"missing": imputed, "length": length, "max_fraction": max_gap_fraction})
    if imputed:
        positions = np.arange(length)
        regular[missing] = np.interp(positions[missing], positions[have], regular[have])
    if frequency == "MS":
        last = (np.datetime64(first, "M") + (length - 1)).astype("datetime64[s]")
    else:
        last = first + (length - 1) * FIXED_STEPS[frequency]
    report = {"sorted": not was_sorted, "duplicates_merged": duplicates, "imputed": imputed, "points": length}
    return regular, last, report
