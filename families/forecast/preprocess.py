"""A client's series -> one regular series -> the item a forecast model reads (per its contract).

Request policy (docs/families/forecast.md "Input policy"):
  * points are sorted by timestamp; each is assigned to the frequency bucket holding it (YS: its calendar year, QS:
    its calendar quarter, MS: its month; fixed steps W/D/h/30min/15min/min: steps from the first timestamp);
    several points in one bucket (duplicates) are averaged;
  * buckets with no point (gaps) and null/NaN values are imputed by linear interpolation between known neighbours
    (edges: nearest known value); more than `max_gap_fraction` imputed points is refused (too_many_missing);
  * +/-inf is refused (non_finite_value); any finite scale is accepted (the global model is scale-free, see
    features.py), a constant series too.
Items are float64 vectors (the runner casts to the graph's dtypes): float64 keeps the per-series location and scale
of a series at 1e12 exact.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from triserve.families.forecast.features import FREQUENCIES, N_FEATURES, prepare_batch, scaling_stats, step_timestamps
from triserve.families.forecast.manifest import ForecastPreprocess

_MONTHS_PER_STEP = {"YS": 12, "QS": 3, "MS": 1}
_FIXED_STEPS = {"W": np.timedelta64(7, "D"), "D": np.timedelta64(1, "D"), "h": np.timedelta64(1, "h"),
                "30min": np.timedelta64(30, "m"), "15min": np.timedelta64(15, "m"), "min": np.timedelta64(1, "m")}


class SeriesError(ValueError):
    """A series that cannot be forecast; `code` and `details` go to the client as a 422."""

    def __init__(self, code: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.details = code, details or {}


def _buckets(ts: np.ndarray, frequency: str) -> tuple[np.ndarray, np.datetime64]:
    """datetime64[s] -> (integer bucket index from the first bucket, start of the first bucket)."""
    if frequency in _MONTHS_PER_STEP:
        k = _MONTHS_PER_STEP[frequency]
        steps = ts.astype("datetime64[M]").astype(np.int64) // k
        first = int(steps.min())
        return steps - first, np.datetime64(first * k, "M").astype("datetime64[s]")
    origin = ts.min()
    return ((ts - origin) // _FIXED_STEPS[frequency]).astype(np.int64), origin


def future_timestamps(last_bucket_start: np.datetime64, frequency: str, horizon: int) -> np.ndarray:
    """The `horizon` bucket starts after the last observed one."""
    return step_timestamps(last_bucket_start, frequency, horizon, offset=1)


def past_timestamp(last_ts: np.datetime64, frequency: str, cut: int, n: int) -> np.datetime64:
    """The timestamp of point `cut` of an n-point regular series whose last point is at last_ts: the first step a
    history cut to `cut` points forecasts (a backtest origin's next timestamp)."""
    return step_timestamps(last_ts, frequency, 1, offset=cut - (n - 1))[0]


def series_timestamps(start: np.datetime64, frequency: str, n: int) -> np.ndarray:
    """Timestamps of n regular points from `start` (a request that gives start + frequency instead of timestamps)."""
    return step_timestamps(start, frequency, n)


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
    with np.errstate(over="ignore", invalid="ignore"):  # two values near 1.8e308 in one bucket overflow: refused
        np.add.at(sums, idx[known], values[known])
    np.add.at(counts, idx[known], 1)
    occupied = np.bincount(idx, minlength=length)
    duplicates = int((occupied[occupied > 1] - 1).sum())
    have = counts > 0
    if not have.any():
        raise SeriesError("no_values", "series has no finite values")
    regular = np.full(length, np.nan)
    regular[have] = sums[have] / counts[have]
    if not np.isfinite(regular[have]).all():
        raise SeriesError("non_finite_value", "values too large to average (beyond float64 range)")
    missing = ~have
    imputed = int(missing.sum())
    if imputed / length > max_gap_fraction:
        raise SeriesError("too_many_missing", f"{imputed} of {length} points are missing or null",
                          {"missing": imputed, "length": length, "max_fraction": max_gap_fraction})
    if imputed:
        positions = np.arange(length)
        regular[missing] = np.interp(positions[missing], positions[have], regular[have])
    last = step_timestamps(first, frequency, 1, offset=length - 1)[0]
    report = {"sorted": not was_sorted, "duplicates_merged": duplicates, "imputed": imputed, "points": length}
    return regular, last, report


# --- model items ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Item:
    """One series prepared for one model: the runner item, and what undoes the scaling of the model's output."""

    x: np.ndarray  # float64 vector (layout: pack_global / the window)
    loc: float
    scale: float
    used: int  # history points the model reads
    padded: int  # positions of left padding (global contract)


def pack_global(context: np.ndarray, mask: np.ndarray, freq: int, features: np.ndarray, loc: float,
                scale: float, history: np.ndarray | None = None) -> np.ndarray:
    """[context C | mask C | freq | features F | loc | scale (| history C)]: the graph inputs plus what a numpy
    method reads to work in original units (loc/scale, and the raw left-padded history when it asks for it)."""
    parts: list[np.ndarray | list[float]] = [context, mask, [float(freq)], features, [loc, scale]]
    if history is not None:
        parts.append(history)
    return np.concatenate(parts).astype(np.float64)


def unpack_global(rows: np.ndarray, context: int) -> dict[str, np.ndarray]:
    """[n, 2C + F + 3 (+ C)] -> the global feeds, "scaling" [n, 2] (loc, scale) and, when packed, "history" [n, C]
    (raw values, float64)."""
    c, f = context, N_FEATURES
    feeds: dict[str, np.ndarray] = {
        "context": rows[:, :c].astype(np.float32), "mask": rows[:, c: 2 * c].astype(np.float32),
        "freq": rows[:, 2 * c].astype(np.int64),
        "features": rows[:, 2 * c + 1: 2 * c + 1 + f].astype(np.float32),
        "scaling": rows[:, 2 * c + 1 + f: 2 * c + 3 + f]}
    if rows.shape[1] == 3 * c + f + 3:
        feeds["history"] = rows[:, 2 * c + 3 + f:]
    return feeds


def reads_history(input_names) -> bool:
    """A model that declares a "history" input (the numpy Theta fallback) gets the raw values packed too."""
    return "history" in input_names


def model_item(pre: ForecastPreprocess, history: np.ndarray, frequency: str, next_timestamp: np.datetime64,
               raw_history: bool = False) -> Item:
    """The runner item of one regular history for a model with this contract (raw_history: reads_history)."""
    history = np.asarray(history, dtype=np.float64)
    if pre.contract == "window":
        window = history[-pre.context:]
        loc, scale = _window_scaling(window, pre.scaling)
        return Item(x=(window - loc) / scale, loc=loc, scale=scale, used=len(window), padded=0)
    b = prepare_batch([history], [frequency], [next_timestamp], pre.context, pre.context_by_frequency or None)
    f = b.feeds
    x = pack_global(f["context"][0], f["mask"][0], int(f["freq"][0]), f["features"][0], float(b.loc[0]),
                    float(b.scale[0]), b.raw[0] if raw_history else None)
    used = min(len(history), pre.context, pre.context_by_frequency.get(frequency, pre.context))
    return Item(x=x, loc=float(b.loc[0]), scale=float(b.scale[0]), used=used, padded=pre.context - used)


def _window_scaling(window: np.ndarray, scaling: str) -> tuple[float, float]:
    if scaling == "none":
        return 0.0, 1.0
    loc, scale = scaling_stats(window[None, :], np.ones((1, len(window))))
    return float(loc[0]), float(scale[0])
