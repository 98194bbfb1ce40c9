"""Fit the per-frequency method trust of families/forecast/trust.py on the TRAINING series' validation windows.

    python -m scripts.forecast.fit_trust [--registry models/store] [--ref stable] [--write]

Why a separate step: the trust multiplies each method's backtest score before the served forecaster weighs the
methods (ensemble.py step 2), so it is fitted from the registry's forecast-global without retraining it. The windows
are those of scripts/forecast/calibrate_intervals.py: the last MAX_HORIZON[f] points of every training series (the
model trains on the points before them only); the held-out series are never read (tests/scripts/forecast/
test_fit_trust.py checks it). The served path (forecast_accuracy.served_inputs: level shifts out, the model's
quantiles at each origin) gives every window's candidates with their raw backtest scores once; the objective of a
frequency is the benchmark's: the geometric mean over its windows of the served point's MAE over seasonal naive's
(the MASE ratio; the scale cancels). Coordinate descent, PASSES times over METHODS, each multiplier over GRID, a
move kept only when it lowers the objective by more than MIN_GAIN (log space: noise on a few windows moves
nothing). Frequencies with fewer than trust.MIN_WINDOWS windows keep trust.DEFAULT. --write rewrites the table.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import time
from pathlib import Path

import numpy as np

from scripts.common import PROJECT_ROOT
from scripts.forecast.metrics import seasonal_naive_forecast
from triserve.families.forecast import trust
from triserve.families.forecast.ensemble import Candidates, candidates_many, weights_of
from triserve.families.forecast.features import SEASON

TABLE = PROJECT_ROOT / "families" / "forecast" / "trust.py"
METHODS = ("global", "arima", "theta", "drift", "damped_drift", "damped_holt", "ses", "naive", "log_drift",
           "seasonal_naive", "seasonal_drift", "mstl")
GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.6, 2.0)
PASSES = 2
MIN_GAIN = 0.002  # mean log ratio: 0.2 % of the geometric mean


def point(c: Candidates, prior: dict[str, float]) -> np.ndarray:
    """The served point forecast of one window's candidates under these multipliers (ensemble._weigh's point)."""
    weights = weights_of({k: v * prior.get(k, 1.0) for k, v in c.scores.items()})
    p = np.sum([w * c.final[k] for k, w in weights.items()], axis=0)
    return np.maximum(p, 0.0) if c.non_negative else p


def objective(windows: list[tuple[Candidates, np.ndarray, float]], prior: dict[str, float]) -> float:
    """Mean log of the served MAE over seasonal naive's on these windows (log of the geometric-mean MASE ratio)."""
    return float(np.mean([math.log(max(float(np.mean(np.abs(t - point(c, prior)))), 1e-12 * naive) / naive)
                          for c, t, naive in windows]))


def fit_frequency(windows: list[tuple[Candidates, np.ndarray, float]]) -> tuple[dict[str, float], float, float]:
    """(multipliers, objective at trust.DEFAULT, objective at the fit) by coordinate descent."""
    present = [m for m in METHODS if any(m in c.scores for c, _, _ in windows)]
    prior = dict(trust.DEFAULT)
    start = best = objective(windows, prior)
    for _ in range(PASSES):
        for method in present:
            current = prior.get(method, 1.0)
            for value in GRID:
                if value == current:
                    continue
                trial = objective(windows, {**prior, method: value})
                if trial < best - MIN_GAIN:
                    best, prior = trial, {**prior, method: value}
            current = prior.get(method, 1.0)
    return {k: v for k, v in sorted(prior.items()) if v != 1.0}, start, best


def seasonal_naive_mae(history: np.ndarray, target: np.ndarray, m: int) -> float:
    """The benchmark's baseline error on this window (floored relative to the level: an exact baseline)."""
    err = float(np.mean(np.abs(target - seasonal_naive_forecast(history, len(target), m))))
    return max(err, 1e-12 * max(float(np.mean(np.abs(history))), 1e-300))


def _entry(frequency: str, table: dict[str, float], width: int = 120) -> str:
    """One frequency's line of the table, wrapped under the project's line length."""
    lines, line = [], f'    "{frequency}": {{'
    for i, (k, v) in enumerate(table.items()):
        item = f'"{k}": {v}' + ("," if i < len(table) - 1 else "},")
        if len(line) + len(item) + 1 > width:
            lines.append(line.rstrip())
            line = "        "
        line += item + " "
    if not table:
        line += "},"
    return "\n".join([*lines, line.rstrip()]) + "\n"


def write_table(fitted: dict, path: Path = TABLE) -> None:
    text = path.read_text()
    body = "".join(_entry(f, t) for f, t in fitted["by_frequency"].items())
    text = re.sub(r"BY_FREQUENCY: dict\[str, dict\[str, float\]\] = \{.*?\n\}\n|"
                  r"BY_FREQUENCY: dict\[str, dict\[str, float\]\] = \{\}\n",
                  lambda _: f"BY_FREQUENCY: dict[str, dict[str, float]] = {{\n{body}}}\n", text, flags=re.S)
    text = re.sub(r'FITTED_FOR = "[^"]*"', lambda _: f'FITTED_FOR = "{fitted["model"]}"', text)
    path.write_text(text)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--registry", type=Path, default=PROJECT_ROOT / "models" / "store")
    ap.add_argument("--ref", default="stable")
    ap.add_argument("--write", action="store_true", help="rewrite the table in families/forecast/trust.py")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from scripts.bench.forecast_accuracy import served_inputs
    from scripts.forecast.calibrate_intervals import training_windows

    series, windows, items, session, manifest = training_windows(args.registry, args.ref)
    t0 = time.perf_counter()
    saved = trust.BY_FREQUENCY, trust.DEFAULT
    trust.BY_FREQUENCY, trust.DEFAULT = {}, {}  # raw backtest scores
    try:
        shifted, model_qs = served_inputs(session, items)
        cands = candidates_many([it[0] for it in shifted], [it[1] for it in shifted], [it[2] for it in shifted],
                                model_qs)
    finally:
        trust.BY_FREQUENCY, trust.DEFAULT = saved
    by_freq: dict[str, list[tuple[Candidates, np.ndarray, float]]] = {}
    for c, (h, target), s in zip(cands, windows, series):
        if c is None or c.demand:  # nothing weighed, or scored without the trust
            continue
        t = np.asarray(target, np.float64)
        naive = seasonal_naive_mae(np.asarray(h, np.float64), t, SEASON[s.frequency])
        by_freq.setdefault(s.frequency, []).append((c, t, naive))
    fitted: dict = {"by_frequency": {}, "windows": {}, "objective": {},
                    "model": f"forecast-global:{manifest.version}"}
    for f, ws in by_freq.items():
        fitted["windows"][f] = len(ws)
        if len(ws) < trust.MIN_WINDOWS:
            print(f"{f:>6} {len(ws):5d} windows: fewer than MIN_WINDOWS, keeps {trust.DEFAULT}")
            continue
        table, start, best = fit_frequency(ws)
        fitted["by_frequency"][f] = table
        fitted["objective"][f] = (round(math.exp(start), 4), round(math.exp(best), 4))
        print(f"{f:>6} {len(ws):5d} windows  geo-mean MASE ratio {math.exp(start):.4f} -> {math.exp(best):.4f}  "
              f"{table}")
    print(f"fitted in {time.perf_counter() - t0:.1f} s for {fitted['model']}")
    if args.write:
        write_table(fitted)
        print(f"wrote {TABLE.relative_to(PROJECT_ROOT)}")
    return fitted


if __name__ == "__main__":
    main()
