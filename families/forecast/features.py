"""Pre- and post-processing of the global forecaster: the ONE implementation shared by training, export, the benchmark
and the service. numpy only (the serving path imports it; torch, pandas and onnx stay out of it).

What the caller does around one ONNX call (contract in docs/forecasting_model.md):

    batch = prepare_batch(histories, frequencies, next_timestamps)   # float64 history -> scaled float32 feeds
    out = session.run(["quantiles"], batch.feeds)[0]                  # [batch, H_MAX, N_QUANTILES], scaled units
    forecasts = unscale(out, batch.loc, batch.scale, horizons)        # float64, original units, cut to horizon

Scaling (per series, from the context only, never from the targets):
    loc   = mean of the observed context points (mask == 1)
    scale = mean absolute deviation of those points from loc, floored at max(SCALE_REL_FLOOR * |loc|, SCALE_ABS_FLOOR)
    context_scaled = (x - loc) / scale,  0 where masked (left padding), clipped to +-CLIP
The model is therefore invariant to affine changes of the input (a series at 1e-6 and the same series * 1e18 + 7 get
the same scaled context and the same forecast in their own units). A constant series has scale = its floor: the
scaled context is all zeros and the forecast is the constant (plus a spread of ~1e-10 of its level).

Context: the last CONTEXT_BY_FREQ[f] (<= CONTEXT) points, LEFT-padded with zeros and mask 0 when the history is
shorter (down to MIN_HISTORY points); interior missing points may also be passed as NaN: they get mask 0 (and 0, i.e.
loc, as value).
Features [batch, N_FEATURES]: sin/cos of two calendar phases of the first forecast step (calendar_features), the
observed fraction of the context and log10(scale / (|loc| + scale)) / 4 clipped to [-1.5, 0.5] (series_features).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# -- the contract ------------------------------------------------------------------------------------------------------
FREQUENCIES = ("YS", "QS", "MS", "W", "D", "h", "30min", "15min", "min")
FREQ_INDEX = {f: i for i, f in enumerate(FREQUENCIES)}
# Primary seasonal period per frequency (seasonal naive, MASE denominator, the graph's seasonal skip).
SEASON = {"YS": 1, "QS": 4, "MS": 12, "W": 52, "D": 7, "h": 24, "30min": 48, "15min": 96, "min": 60}
# Longest horizon the model is trained for at each frequency: two seasons (YS: 6 years, the M4 yearly horizon;
# min: two hours).
MAX_HORIZON = {"YS": 6, "QS": 8, "MS": 24, "W": 104, "D": 14, "h": 48, "30min": 96, "15min": 192, "min": 120}
CONTEXT = 768  # C: fixed context length (left-padded + mask when shorter); 8 days of 15-minute data
# Secondary (weekly or yearly) period where the context holds it: the graph also forms this seasonal naive and learns,
# per frequency and step, how far to move from the primary one toward it (scheduled traffic repeats weekly).
SEASON2 = {"YS": 1, "QS": 4, "MS": 12, "W": 52, "D": 364, "h": 168, "30min": 336, "15min": 672, "min": 60}
# Points of history actually used per frequency (<= CONTEXT). Yearly: the last 30 years. Long yearly series in the
# corpus are mostly stationary cycles (sunspots, lynx, tree rings, lake levels) while the 50-60-year ones are growth
# series (GDP, population): with full histories the model learned "long yearly history => mean reversion" and bent
# the trend of a 50-year population series; 30 years is ample for a 6-year horizon and removes that shortcut.
CONTEXT_BY_FREQ = {f: CONTEXT for f in ("W", "D", "h", "30min", "15min", "min")} | {"YS": 30, "QS": 48, "MS": 144}
H_MAX = 192  # output length of the graph; callers cut to their horizon (<= MAX_HORIZON[frequency])
QUANTILES = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)
MEDIAN_INDEX = QUANTILES.index(0.5)
MIN_HISTORY = 3  # shortest history forecast by the model (shorter: refuse, or use the fallback)
N_FEATURES = 6  # see calendar_features / prepare_batch
CLIP = 50.0  # scaled context values are clipped to +-CLIP (a 50-MAD spike carries no more information than that)
SCALE_REL_FLOOR = 1e-10
SCALE_ABS_FLOOR = 1e-300

INPUT_NAMES = ("context", "mask", "freq", "features")
OUTPUT_NAME = "quantiles"

_FIXED_STEP = {"W": np.timedelta64(7, "D"), "D": np.timedelta64(1, "D"), "h": np.timedelta64(1, "h"),
               "30min": np.timedelta64(30, "m"), "15min": np.timedelta64(15, "m"), "min": np.timedelta64(1, "m")}
_MONTHS = {"YS": 12, "QS": 3, "MS": 1}


def seasonal_index_table(season: dict | None = None) -> np.ndarray:
    """[len(FREQUENCIES), H_MAX] int64: context position copied by seasonal naive for step k: C - m + (k mod m)."""
    season = season or SEASON
    k = np.arange(H_MAX)
    return np.stack([CONTEXT - season[f] + k % season[f] for f in FREQUENCIES]).astype(np.int64)


# -- timestamps --------------------------------------------------------------------------------------------------------
def step_timestamps(start, frequency: str, n: int, offset: int = 0) -> np.ndarray:
    """datetime64[s] of the points start + (offset .. offset + n - 1) steps (calendar months for YS/QS/MS)."""
    start = np.datetime64(start, "s")
    k = np.arange(offset, offset + n)
    if frequency in _MONTHS:
        m0 = start.astype("datetime64[M]")
        return (m0 + k * _MONTHS[frequency]).astype("datetime64[s]")
    return start + k * _FIXED_STEP[frequency]


def infer_frequency(timestamps) -> str:
    """The frequency whose step best matches the median spacing of the timestamps (at least two)."""
    ts = np.sort(np.asarray(timestamps, dtype="datetime64[s]"))
    if ts.size < 2:
        raise ValueError("need at least two timestamps to infer a frequency")
    step = float(np.median(np.diff(ts).astype(np.float64)))  # seconds
    nominal = {"YS": 365.2425 * 86400, "QS": 91.31 * 86400, "MS": 30.44 * 86400, "W": 7 * 86400, "D": 86400,
               "h": 3600, "30min": 1800, "15min": 900, "min": 60}
    return min(nominal, key=lambda f: abs(np.log(max(step, 1.0) / nominal[f])))


def _phase(ts: np.ndarray, frequency: str) -> tuple[np.ndarray, np.ndarray]:
    """Two calendar phases in [0, 1) of each timestamp (0 where a frequency has no such cycle)."""
    ts = np.asarray(ts, dtype="datetime64[s]")
    zero = np.zeros(ts.shape)
    if frequency == "YS":
        return zero, zero
    months = ts.astype("datetime64[M]").astype(np.int64) % 12  # 0 = January
    if frequency == "QS":
        return (months // 3) / 4.0, zero
    if frequency == "MS":
        return months / 12.0, zero
    secs = ts.astype(np.int64)
    day_of_week = ((secs // 86400) + 3) % 7  # 1970-01-01 was a Thursday -> Monday = 0
    year_start = ts.astype("datetime64[Y]").astype("datetime64[s]").astype(np.int64)
    day_of_year = ((secs - year_start) / 86400.0) / 365.25
    sec_of_day = secs % 86400
    if frequency == "W":
        return day_of_year, zero
    if frequency == "D":
        return day_of_week / 7.0, day_of_year
    if frequency in ("h", "30min", "15min"):
        return sec_of_day / 86400.0, (day_of_week + sec_of_day / 86400.0) / 7.0
    if frequency == "min":
        return (sec_of_day % 3600) / 3600.0, sec_of_day / 86400.0
    raise ValueError(f"unknown frequency {frequency!r}")


def calendar_features(next_timestamps, frequencies) -> np.ndarray:
    """[batch, 4] float32: sin/cos of the two calendar phases of each series' FIRST forecast step."""
    out = np.zeros((len(frequencies), 4), dtype=np.float64)
    ts = np.asarray(next_timestamps, dtype="datetime64[s]")
    for f in set(frequencies):
        rows = np.array([i for i, g in enumerate(frequencies) if g == f])
        p1, p2 = _phase(ts[rows], f)
        out[rows] = np.stack([np.sin(2 * np.pi * p1), np.cos(2 * np.pi * p1),
                              np.sin(2 * np.pi * p2), np.cos(2 * np.pi * p2)], axis=1)
    if "YS" in frequencies:
        out[[i for i, g in enumerate(frequencies) if g == "YS"]] = 0.0
    return out.astype(np.float32)


# -- scaling -----------------------------------------------------------------------------------------------------------
def scaling_stats(context: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """([batch] loc, [batch] scale) in float64 from the observed points of raw contexts [batch, C]."""
    x = np.asarray(context, dtype=np.float64)
    m = np.asarray(mask, dtype=np.float64)
    n = np.maximum(m.sum(axis=1), 1.0)
    xm = np.where(m > 0, x, 0.0)
    loc = xm.sum(axis=1) / n
    scale = (np.abs(xm - loc[:, None]) * m).sum(axis=1) / n
    floor = np.maximum(SCALE_REL_FLOOR * np.abs(loc), SCALE_ABS_FLOOR)
    return loc, np.maximum(scale, floor)


def left_pad(histories, context: int = CONTEXT) -> tuple[np.ndarray, np.ndarray]:
    """Ragged 1-D histories -> (raw [batch, C] float64, mask [batch, C] float64): last C points, left-padded.

    NaN points inside the kept window get mask 0 (the caller decides how many it accepts).
    """
    b = len(histories)
    raw = np.zeros((b, context), dtype=np.float64)
    mask = np.zeros((b, context), dtype=np.float64)
    for i, h in enumerate(histories):
        h = np.asarray(h, dtype=np.float64)[-context:]
        raw[i, context - len(h):] = h
        mask[i, context - len(h):] = 1.0
    nan = np.isnan(raw)
    raw[nan] = 0.0
    mask[nan] = 0.0
    return raw, mask


def scale_context(raw: np.ndarray, mask: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """(raw - loc) / scale, 0 where masked, clipped to +-CLIP, float32."""
    z = (np.asarray(raw, np.float64) - loc[:, None]) / scale[:, None]
    z = np.where(mask > 0, np.clip(z, -CLIP, CLIP), 0.0)
    return z.astype(np.float32)


def series_features(mask: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """[batch, 2] float32: observed fraction of the context, and log10 of the scale relative to the level
    (coefficient-of-variation-like, clipped to [-6, 2] and divided by 4): scale-free, tells additive from
    multiplicative-looking series."""
    obs = np.asarray(mask, np.float64).mean(axis=1)
    rel = np.log10(scale / (np.abs(loc) + scale))
    return np.stack([obs, np.clip(rel, -6.0, 2.0) / 4.0], axis=1).astype(np.float32)


@dataclass
class Batch:
    """Model feeds plus what unscale needs."""

    feeds: dict[str, np.ndarray]  # context float32 [b, C], mask float32 [b, C], freq int64 [b], features f32 [b, F]
    loc: np.ndarray  # [b] float64
    scale: np.ndarray  # [b] float64
    raw: np.ndarray  # [b, C] float64: the kept history, left-padded with 0 (what a numpy method reads)


def prepare_batch(histories, frequencies, next_timestamps, context: int = CONTEXT,
                  context_by_freq: dict[str, int] | None = None) -> Batch:
    """Raw histories (each the series up to its last observation) -> feeds of the ONNX graph.

    next_timestamps: the timestamp of each series' first forecast step (for the calendar features);
    context_by_freq: history points read per frequency (default CONTEXT_BY_FREQ; a manifest states its own).
    """
    frequencies = list(frequencies)
    if len(frequencies) != len(histories) or len(next_timestamps) != len(histories):
        raise ValueError("histories, frequencies and next_timestamps must have the same length")
    unknown = sorted(set(frequencies) - set(FREQUENCIES))
    if unknown:
        raise ValueError(f"unsupported frequencies {unknown}")
    read = CONTEXT_BY_FREQ if context_by_freq is None else context_by_freq
    histories = [np.asarray(h, dtype=np.float64)[-min(context, read.get(f, context)):]
                 for h, f in zip(histories, frequencies)]
    raw, mask = left_pad(histories, context)
    loc, scale = scaling_stats(raw, mask)
    features = np.concatenate([calendar_features(next_timestamps, frequencies),
                               series_features(mask, loc, scale)], axis=1)
    feeds = {"context": scale_context(raw, mask, loc, scale), "mask": mask.astype(np.float32),
             "freq": np.array([FREQ_INDEX[f] for f in frequencies], dtype=np.int64), "features": features}
    return Batch(feeds=feeds, loc=loc, scale=scale, raw=raw)


def scale_targets(targets: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Targets [batch, h] in the scaled space of their contexts (training only)."""
    with np.errstate(over="ignore"):  # targets far beyond a constant context's floor scale: clipped below
        z = (np.asarray(targets, np.float64) - loc[:, None]) / scale[:, None]
    return np.clip(z, -1e30, 1e30).astype(np.float32)


def unscale(quantiles: np.ndarray, loc: np.ndarray, scale: np.ndarray,
            horizons: int | np.integer | Sequence[int] | np.ndarray | None = None) -> np.ndarray | list:
    """Scaled [batch, H_MAX, Q] -> original units (float64). With `horizons` (int or one per row): cut to them
    (a list of [h_i, Q] arrays when they differ)."""
    q = np.asarray(quantiles, np.float64) * scale[:, None, None] + loc[:, None, None]
    if horizons is None:
        return q
    if isinstance(horizons, int | float | np.number):  # one horizon for every row
        return q[:, : int(horizons)]
    return [q[i, : int(h)] for i, h in enumerate(horizons)]
