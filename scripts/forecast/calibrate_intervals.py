"""Fit the per-frequency interval factors of families/forecast/intervals.py on the TRAINING series' validation windows.

    python -m scripts.forecast.calibrate_intervals [--registry models/store] [--ref stable] [--write]

Why a separate step: the factors widen the served forecaster's intervals (the combination's, not the model's graph),
so they are fitted from the registry's forecast-global without retraining it. The windows are the last
MAX_HORIZON[f] points of every training series of scripts/forecast/corpus.py (the model trains on the points before
them only): the served path (scripts/bench/forecast_accuracy.run_served, level shifts out, backtest, combination)
forecasts each with every factor at 1, and each target point scores s = its distance from the median over the
interval's half-width on its side (the interval widened by s just covers it). A level's factor is the split-conformal
quantile of a frequency's scores (the ceil((N + 1) c)-th smallest; every window of a frequency has the same horizon, so
each series counts equally, as in the benchmark's coverage). The held-out series are never read here: `split.heldout`
is not touched, and the test tests/scripts/forecast/test_calibrate_intervals.py checks that no held-out series reaches
the served path. --write rewrites the tables in intervals.py.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import time
from functools import partial
from pathlib import Path

import numpy as np

from scripts.common import PROJECT_ROOT
from triserve.families.forecast import intervals
from triserve.families.forecast.features import MAX_HORIZON, MEDIAN_INDEX, QUANTILES

TABLES = PROJECT_ROOT / "families" / "forecast" / "intervals.py"


def scores(q: np.ndarray, target: np.ndarray, level: float) -> np.ndarray:
    """Per target point: the factor by which the central `level` interval of q [h, Q] (around its median) must be
    widened to just cover it (0 at the median; inf where that side has no width and the point is off the median)."""
    lo, hi = q[:, QUANTILES.index(round((1 - level) / 2, 3))], q[:, QUANTILES.index(round((1 + level) / 2, 3))]
    mid = q[:, MEDIAN_INDEX]
    dist = target - mid
    half = np.where(dist >= 0, hi - mid, mid - lo)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.abs(dist) / half
    return np.where(dist == 0, 0.0, np.where(half > 0, s, np.inf))


def conformal(z: np.ndarray, coverage: float) -> float:
    """The ceil((N + 1) c)-th smallest score (the largest when that exceeds N)."""
    z = np.sort(z)
    return float(z[min(len(z), math.ceil((len(z) + 1) * coverage)) - 1])


def fit(forecasts: list[np.ndarray], targets: list[np.ndarray], frequencies: list[str]) -> dict:
    """Per-frequency factors from unwidened forecasts (frequencies with fewer than MIN_WINDOWS windows left out) and
    the global ones over every window (reported; intervals.GLOBAL stays the fallback)."""
    by_freq: dict[str, dict[float, float]] = {}
    windows = {f: frequencies.count(f) for f in dict.fromkeys(frequencies)}
    pooled: dict[float, list[np.ndarray]] = {lv: [] for lv in intervals.LEVELS}
    for f in windows:
        idx = [i for i, g in enumerate(frequencies) if g == f]
        table = {}
        for lv in intervals.LEVELS:
            z = np.concatenate([scores(forecasts[i], targets[i], lv) for i in idx])
            pooled[lv].append(z)
            table[lv] = round(conformal(z, lv), 3)
        if windows[f] >= intervals.MIN_WINDOWS:
            by_freq[f] = table
    pooled_table = {lv: round(conformal(np.concatenate(z), lv), 3) for lv, z in pooled.items()}
    return {"by_frequency": by_freq, "windows": windows, "pooled": pooled_table}


def write_tables(fitted: dict, path: Path = TABLES) -> None:
    text = path.read_text()
    body = "".join(f'    "{f}": {{{", ".join(f"{lv}: {v}" for lv, v in t.items())}}},\n'
                   for f, t in fitted["by_frequency"].items())
    text = re.sub(r"BY_FREQUENCY: dict\[str, dict\[float, float\]\] = \{.*?\n\}\n|"
                  r"BY_FREQUENCY: dict\[str, dict\[float, float\]\] = \{\}\n",
                  lambda _: f"BY_FREQUENCY: dict[str, dict[float, float]] = {{\n{body}}}\n", text, flags=re.S)
    windows = ",\n                           ".join(
        ", ".join(f'"{f}": {n}' for f, n in list(fitted["windows"].items())[i: i + 8])
        for i in range(0, len(fitted["windows"]), 8))
    text = re.sub(r"WINDOWS: dict\[str, int\] = \{.*?\}\n", lambda _: f"WINDOWS: dict[str, int] = {{{windows}}}\n",
                  text, flags=re.S)
    if "model" in fitted:
        text = re.sub(r'FITTED_FOR = "[^"]*"', lambda _: f'FITTED_FOR = "{fitted["model"]}"', text)
    path.write_text(text)


def training_windows(registry: Path, ref: str):
    """The fitting set of this script and of fit_trust.py: the TRAINING series only, each one's last MAX_HORIZON
    window as (history, target), the served path's items for them, and the registry's forecast-global session (one
    ORT thread) and manifest."""
    from scripts.bench.forecast_accuracy import _stamp
    from scripts.common import ort_session
    from scripts.forecast.corpus import build_corpus, last_window, split_corpus
    from triserve.models.registry import LocalRegistry

    series = split_corpus(build_corpus()).train
    directory, manifest = LocalRegistry(registry).load_verified("forecast-global", ref)
    session = ort_session(directory / manifest.model_file, threads=1)
    windows = [last_window(s) for s in series]
    items = [(np.asarray(h, np.float64), s.frequency, MAX_HORIZON[s.frequency], partial(_stamp, s, 0))
             for (h, _), s in zip(windows, series)]
    return series, windows, items, session, manifest


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--registry", type=Path, default=PROJECT_ROOT / "models" / "store")
    ap.add_argument("--ref", default="stable")
    ap.add_argument("--write", action="store_true", help="rewrite the tables in families/forecast/intervals.py")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from scripts.bench.forecast_accuracy import run_served

    series, windows, items, session, manifest = training_windows(args.registry, args.ref)
    saved = intervals.BY_FREQUENCY, intervals.GLOBAL
    intervals.BY_FREQUENCY, intervals.GLOBAL = {}, {lv: 1.0 for lv in intervals.LEVELS}  # unwidened
    t0 = time.perf_counter()
    try:
        forecasts, _ = run_served(session, items, many=True)
    finally:
        intervals.BY_FREQUENCY, intervals.GLOBAL = saved
    fitted = fit([fc.quantiles for fc in forecasts], [np.asarray(t, np.float64) for _, t in windows],
                 [s.frequency for s in series])
    fitted["model"] = f"forecast-global:{manifest.version}"
    print(f"{len(series)} training windows, forecast in {time.perf_counter() - t0:.1f} s "
          f"(model forecast-global:{manifest.version})")
    for f, n in fitted["windows"].items():
        own = fitted["by_frequency"].get(f)
        print(f"{f:>6} {n:5d} windows  {own if own else 'fewer than MIN_WINDOWS: global'}")
    print("pooled over every window:", fitted["pooled"], " global in use:", intervals.GLOBAL)
    if args.write:
        write_tables(fitted)
        print(f"wrote {TABLES.relative_to(PROJECT_ROOT)}")
    return fitted


if __name__ == "__main__":
    main()
