"""Forecast accuracy on held-out series: the global model vs the fallback and classical baselines.

    python -m scripts.bench.forecast_accuracy [--registry models/store] [--model model.onnx | --train] [--out PATH]

Windows: every held-out series of scripts/forecast/corpus.py (whole series never seen in training, at any frequency)
forecasts its LAST window: horizon MAX_HORIZON[f] (two seasons; 6 years at YS), history = everything before it.
Methods, all on the same windows:
  primary         the served global model (the registry's forecast-global; or --model, or --train), one ORT
                  thread, batched
  fallback        the served forecast-theta (families/forecast/theta.py: numpy Theta / seasonal naive with drift)
                  through the runner hooks, exactly as the service runs it
  seasonal_naive  the last season repeated; normal intervals from its in-sample seasonal errors, widened per season
  AutoETS, AutoTheta, AutoARIMA   statsforecast 2.x, season_length = SEASON[f], intervals at 50/80/90 %; run in a
                  child process (statsforecast needs pandas < 3, which the project venv may not have: it is then
                  taken from --statsforecast-path, a `pip install --target` folder, made with
                      pip install --no-deps --target .cache/forecast_bench/sf statsforecast==2.1.1 \
                        coreforecast==0.0.20 utilsforecast==0.2.17 fugue==0.9.7 triad==1.0.4 adagio==0.2.6 \
                        pandas==2.3.3 pytz tzdata pyarrow==26.0.1
                  without either, the report has no statsforecast columns). AutoARIMA is slow (seconds per
                  series), so it runs on a per-frequency subsample (--arima-per-freq; only where the season
                  m <= --arima-max-season, default 24: weekly m = 52 took minutes per series) and the report compares
                  the primary on that same subsample; every statsforecast method gets at most --sf-history points of
                  history and --sf-budget seconds per method (series left when it runs out are reported as missing).
Metrics (scripts/forecast/metrics.py): MASE (seasonal-naive in-sample scale of the history), geometric-mean MASE
ratio vs seasonal naive over series, sMAPE, per-series weighted quantile loss (mean over series), 50 % and 90 %
interval coverage. Speed: series/s of the primary batched in process on one core (prepare + ORT + unscale over all
held-out windows; median of --speed-runs runs with the range), and per-series cost of every method.
Prints the table and writes <out>.json, <out>.md and <out>.png.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from scripts.bench.report import pyplot
from scripts.forecast.metrics import coverage, gmean, mase, seasonal_naive_forecast, smape, wql
from scripts.imagetools import system_tool

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = PROJECT_ROOT / "docs" / "bench" / "forecast_accuracy"
DEFAULT_SF_PATH = PROJECT_ROOT / ".cache" / "forecast_bench" / "sf"
SF_METHODS = ("AutoETS", "AutoTheta", "AutoARIMA")
GOALS = {"gmean_mase_ratio_overall_max": 0.80, "gmean_mase_ratio_per_freq_max": 1.0, "coverage90_range": [0.85, 0.95],
         "series_per_s_min": 2000}


# -- metric table -----------------------------------------------------------------------------------------------------
def score_window(history, target, q, m: int, quantiles) -> dict:
    """Scores of one forecast: q [h, Q] quantiles in original units (the median is the point forecast)."""
    quantiles = list(quantiles)
    med = q[:, quantiles.index(0.5)]
    return {"mase": mase(target, med, history, m), "smape": smape(target, med),
            "wql": wql(target, q, quantiles),
            "cov50": coverage(target, q[:, quantiles.index(0.25)], q[:, quantiles.index(0.75)]),
            "cov90": coverage(target, q[:, quantiles.index(0.05)], q[:, quantiles.index(0.95)])}


def scored(rows: Sequence[dict | None], idx: list[int]) -> list[dict]:
    """rows[i] for each i in idx, which names scored windows only (a None there would be a bug upstream)."""
    picked = [r for r in (rows[i] for i in idx) if r is not None]
    assert len(picked) == len(idx), "a window that was not scored"
    return picked


def summarise(rows: list[dict], baseline: list[dict]) -> dict:
    """Aggregate per-series scores (aligned with the seasonal-naive baseline's rows)."""
    ratios = [r["mase"] / b["mase"] for r, b in zip(rows, baseline)
              if np.isfinite(r["mase"]) and np.isfinite(b["mase"]) and b["mase"] > 0 and r["mase"] > 0]

    def mean(key):
        v = [r[key] for r in rows if np.isfinite(r[key])]
        return float(np.mean(v)) if v else float("nan")

    return {"series": len(rows), "gmean_mase_ratio": gmean(ratios), "mase": mean("mase"), "smape": mean("smape"),
            "wql": mean("wql"), "cov50": mean("cov50"), "cov90": mean("cov90")}


def seasonal_naive_quantiles(history, horizon: int, m: int, z: np.ndarray) -> np.ndarray:
    """Seasonal naive with normal intervals: sigma of the in-sample seasonal errors, * sqrt(seasons ahead)."""
    h = np.asarray(history, np.float64)
    lag = m if len(h) > m else 1
    point = seasonal_naive_forecast(h, horizon, m)
    resid = h[lag:] - h[:-lag]
    sigma = float(np.sqrt(np.mean(resid ** 2))) if len(resid) else 0.0
    spread = sigma * np.sqrt(np.arange(horizon) // lag + 1)
    return point[:, None] + spread[:, None] * z[None, :]


# -- statsforecast (child process) ----------------------------------------------------------------------------------
def sf_worker(inp: str, out: str) -> None:
    """Child: forecasts for each requested method within its time budget; writes {method: [q or None], times}."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from statsforecast.models import AutoARIMA, AutoETS, AutoTheta

    with open(inp, "rb") as fh:
        job = pickle.load(fh)
    classes = {"AutoETS": AutoETS, "AutoTheta": AutoTheta, "AutoARIMA": AutoARIMA}
    results = {}
    for method, indices in job["methods"].items():
        t_start = time.perf_counter()
        preds, times, errors = {}, {}, 0
        for i in indices:
            if time.perf_counter() - t_start > job["budget_s"]:
                break
            hist, horizon, m = job["windows"][i]
            hist = np.asarray(hist, np.float64)[-job["history"]:]
            t0 = time.perf_counter()
            try:
                r = classes[method](season_length=m).forecast(y=hist, h=horizon, level=[50, 80, 90])
                q = np.stack([r["lo-90"], r["lo-80"], r["lo-50"], r["mean"], r["hi-50"], r["hi-80"], r["hi-90"]], 1)
                if not np.all(np.isfinite(q)):
                    raise ValueError("non-finite forecast")
            except Exception:  # noqa: BLE001  # a failed fit is scored as missing and counted
                errors += 1
                q = None
            times[i] = time.perf_counter() - t0
            preds[i] = q
        results[method] = {"preds": preds, "times": times, "errors": errors,
                           "seconds": time.perf_counter() - t_start}
    with open(out, "wb") as fh:
        pickle.dump(results, fh)


def run_statsforecast(windows, methods: dict[str, list[int]], history: int, budget_s: float, sf_path: Path,
                      timeout_s: float) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        import statsforecast  # noqa: F401  # a probe: when it does not import, the worker gets sf_path
    except ImportError:
        env["PYTHONPATH"] = os.pathsep.join([str(sf_path), str(PROJECT_ROOT), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "in.pkl", Path(tmp) / "out.pkl"
        with inp.open("wb") as fh:
            pickle.dump({"windows": windows, "methods": methods, "history": history, "budget_s": budget_s}, fh)
        cmd = [sys.executable, "-m", "scripts.bench.forecast_accuracy", "--sf-worker", str(inp), str(out)]
        if sys.platform.startswith("linux"):
            cmd = [system_tool("taskset"), "-c", str(_this_core())] + cmd
        try:
            proc = subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout_s,
                                  check=False)
        except subprocess.TimeoutExpired:
            print(f"statsforecast worker still running after {timeout_s:.0f} s: baselines skipped", file=sys.stderr)
            return {}
        if proc.returncode != 0 or not out.exists():
            print("statsforecast worker failed:", proc.stderr[-2000:], file=sys.stderr)
            return {}
        with out.open("rb") as fh:
            return pickle.load(fh)


def _this_core() -> int:
    try:
        return sorted(os.sched_getaffinity(0))[0]
    except AttributeError:
        return 0


# -- the benchmark ----------------------------------------------------------------------------------------------------
def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--registry", type=Path, default=PROJECT_ROOT / "models" / "store",
                    help="scores the served pair forecast-global + forecast-theta at --ref from this registry "
                         "(`make models` builds them)")
    ap.add_argument("--ref", default="stable")
    ap.add_argument("--model", type=Path, help="score this exported global model instead of the registry's")
    ap.add_argument("--train", action="store_true", help="train a model now (--train-seconds) instead")
    ap.add_argument("--train-seconds", type=float, default=170.0)
    ap.add_argument("--e2e-requests", type=int, default=600, help="end-to-end: requests (one series each) sent to "
                                                                  "a real `bentoml serve` of the registry; 0 = skip")
    ap.add_argument("--e2e-concurrency", default="1,8,32")
    ap.add_argument("--seed", type=int, default=20261203)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--speed-runs", type=int, default=5)
    ap.add_argument("--arima-per-freq", type=int, default=8)
    ap.add_argument("--arima-max-season", type=int, default=24)
    ap.add_argument("--sf-history", type=int, default=512, help="history points given to statsforecast (the "
                                                                   "model's context length)")
    ap.add_argument("--sf-budget", type=float, default=300.0, help="seconds per statsforecast method")
    ap.add_argument("--statsforecast-path", type=Path, default=DEFAULT_SF_PATH)
    ap.add_argument("--no-cache", action="store_true", help="rerun statsforecast even when its results are cached")
    ap.add_argument("--sf-worker", nargs=2, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.sf_worker:
        sf_worker(*args.sf_worker)
        return {}

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from families.forecast.features import (
        FREQUENCIES,
        MAX_HORIZON,
        OUTPUT_NAME,
        QUANTILES,
        SEASON,
        prepare_batch,
        unscale,
    )
    from families.forecast.theta import Z
    from scripts.common import ort_session, stable_hash
    from scripts.forecast.corpus import build_corpus, corpus_fingerprint, last_window, split_corpus

    corpus = build_corpus()
    split = split_corpus(corpus)
    train_info: dict[str, Any] | None = None
    from models.registry import LocalRegistry

    registry = LocalRegistry(args.registry)
    if args.model is None and not args.train:
        directory, manifest = registry.load_verified("forecast-global", args.ref)
        args.model = directory / manifest.model_file
        train_info = {"registry": f"forecast-global:{manifest.version}", "source": manifest.source.description}
    if args.model is None:
        from scripts.forecast.global_model import train_and_export

        model_dir = PROJECT_ROOT / ".cache" / "forecast_bench" / "model"
        t0 = time.perf_counter()
        train_info = train_and_export(model_dir, split, seconds_budget=args.train_seconds, seed=args.seed)
        train_info["wall_seconds_incl_export_and_parity"] = round(time.perf_counter() - t0, 1)
        args.model = model_dir / "model.onnx"
    session = ort_session(args.model, threads=1)

    series = split.heldout
    hist, tgt = zip(*(last_window(s) for s in series))
    freqs = [s.frequency for s in series]
    next_ts = [s.next_timestamp(len(h)) for s, h in zip(series, hist)]
    horizons = [MAX_HORIZON[f] for f in freqs]
    n = len(series)
    print(f"{n} held-out series; corpus {len(corpus)} series, fingerprint {corpus_fingerprint(corpus)[:16]}")

    # primary: speed first (all windows in batches of 1024), then the forecasts
    def run_primary(batch=1024):
        out = []
        for i in range(0, n, batch):
            b = prepare_batch(list(hist[i: i + batch]), freqs[i: i + batch], next_ts[i: i + batch])
            out.extend(unscale(session.run([OUTPUT_NAME], b.feeds)[0], b.loc, b.scale,
                               horizons[i: i + batch]))
        return out

    run_primary()
    speed = []
    for _ in range(args.speed_runs):
        t0 = time.perf_counter()
        primary = run_primary()
        speed.append(n / (time.perf_counter() - t0))
    b_all = prepare_batch(list(hist), freqs, next_ts)
    ort_only = []
    for _ in range(args.speed_runs):
        t0 = time.perf_counter()
        for i in range(0, n, 1024):
            session.run([OUTPUT_NAME], {k: v[i: i + 1024] for k, v in b_all.feeds.items()})
        ort_only.append(n / (time.perf_counter() - t0))

    preds = {"primary": primary}
    cost = {"primary": 1.0 / float(np.median(speed))}
    # the fallback exactly as served: the registry's forecast-theta through the runner hooks (packed items, numpy
    # session, unscaling); the primary's prepare_batch path above is the served path vectorised
    # (tests/families/forecast/test_preprocess.py proves the two identical)
    import families
    from scripts.forecast.build import Served

    fb_dir, fb_manifest = registry.load_verified("forecast-theta", args.ref)
    fallback = Served(fb_manifest, families.runtime("forecast").numpy_session(fb_manifest,
                                                                              fb_dir / fb_manifest.model_file),
                      [i.name for i in fb_manifest.inputs])
    t0 = time.perf_counter()
    preds["fallback"] = fallback.forecast(list(hist), freqs, next_ts, horizons)
    cost["fallback"] = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    preds["seasonal_naive"] = [seasonal_naive_quantiles(h, hz, SEASON[f], Z) for h, f, hz in zip(hist, freqs, horizons)]
    cost["seasonal_naive"] = (time.perf_counter() - t0) / n

    # statsforecast: ETS and Theta on everything, ARIMA on a per-frequency subsample (evenly spaced)
    windows = [(np.asarray(h), hz, SEASON[f]) for h, f, hz in zip(hist, freqs, horizons)]
    # AutoARIMA: an evenly spaced subsample per frequency, taken round-robin across frequencies so a slow
    # frequency cannot eat the whole budget; seasonal ARIMA with m > --arima-max-season (weekly data, m = 52; the
    # 30/15-minute and minute data) takes minutes per series here and is not run
    per_freq = []
    for f in FREQUENCIES:
        idx = [i for i in range(n) if freqs[i] == f]
        if idx and SEASON[f] <= args.arima_max_season:
            step = max(1, len(idx) // args.arima_per_freq)
            per_freq.append(idx[::step][: args.arima_per_freq])
    arima_idx = [i for k in range(args.arima_per_freq) for col in per_freq if k < len(col) for i in [col[k]]]
    # the baselines do not depend on the model: cached by corpus fingerprint and settings (--no-cache to redo)
    key = corpus_fingerprint(corpus)[:16] + "-" + stable_hash(
        [args.sf_history, args.sf_budget, arima_idx, sorted(split.heldout_groups)])[:12]
    cache = PROJECT_ROOT / ".cache" / "forecast_bench" / f"statsforecast-{key}.pkl"
    if cache.exists() and not args.no_cache:
        with cache.open("rb") as fh:
            sf = pickle.load(fh)
    else:
        sf = run_statsforecast(windows, {"AutoETS": list(range(n)), "AutoTheta": list(range(n)),
                                         "AutoARIMA": arima_idx},
                               args.sf_history, args.sf_budget, args.statsforecast_path,
                               timeout_s=4 * args.sf_budget + 300)
        if sf:
            cache.parent.mkdir(parents=True, exist_ok=True)
            with cache.open("wb") as out:
                pickle.dump(sf, out)
    sf_meta = {}
    for method in SF_METHODS:
        r = sf.get(method)
        if not r:
            continue
        preds[method] = [r["preds"].get(i) for i in range(n)]
        t = list(r["times"].values())
        cost[method] = float(np.median(t)) if t else float("nan")
        sf_meta[method] = {"attempted": len(r["times"]), "failed": r["errors"], "seconds": round(r["seconds"], 1),
                           "requested": len(arima_idx) if method == "AutoARIMA" else n}

    # scores
    scores = {m: [None if p[i] is None else score_window(hist[i], tgt[i], p[i], SEASON[freqs[i]], QUANTILES)
                  for i in range(n)] for m, p in preds.items()}
    base = scores["seasonal_naive"]
    table: dict[str, dict[str, dict]] = {}
    for m, rows in scores.items():
        table[m] = {}
        for f in (*FREQUENCIES, "overall"):
            idx = [i for i in range(n) if (f == "overall" or freqs[i] == f) and rows[i] is not None]
            if idx:
                table[m][f] = summarise(scored(rows, idx), scored(base, idx))
    # the primary on the AutoARIMA subsample that was actually forecast (a fair pairing)
    paired: dict[str, dict[str, Any]] = {}
    for method in ("AutoARIMA", "AutoETS", "AutoTheta"):
        if method in scores:
            idx = [i for i in range(n) if scores[method][i] is not None]
            paired[method] = {"series": len(idx),
                              method: summarise(scored(scores[method], idx), scored(base, idx)),
                              "primary": summarise(scored(scores["primary"], idx), scored(base, idx))}

    overall = table["primary"]["overall"]
    ratio_per_freq = {f: table["primary"][f]["gmean_mase_ratio"] for f in FREQUENCIES if f in table["primary"]}
    ets = table.get("AutoETS", {}).get("overall")
    goals = {
        "gmean_mase_ratio_overall<=0.80": {"value": overall["gmean_mase_ratio"],
                                           "met": overall["gmean_mase_ratio"] <= 0.80},
        "gmean_mase_ratio<1.0_every_frequency": {"value": ratio_per_freq,
                                                 "met": all(v < 1.0 for v in ratio_per_freq.values())},
        "better_than_AutoETS_overall": {
            "value": {"primary": overall["gmean_mase_ratio"], "AutoETS": ets["gmean_mase_ratio"] if ets else None,
                      "paired_series": paired.get("AutoETS", {}).get("series")},
            "met": bool(ets) and paired["AutoETS"]["primary"]["gmean_mase_ratio"]
            < paired["AutoETS"]["AutoETS"]["gmean_mase_ratio"]},
        "coverage90_in_[0.85,0.95]": {"value": overall["cov90"], "met": 0.85 <= overall["cov90"] <= 0.95},
        ">=2000_series_per_s_one_core": {"value": float(np.median(speed)),
                                         "met": float(np.median(speed)) >= 2000},
    }
    report = {
        "model": str(args.model), "training": train_info, "corpus_fingerprint": corpus_fingerprint(corpus),
        "split": split.summary(), "heldout_groups": len(split.heldout_groups), "heldout_series": n,
        "quantiles": list(QUANTILES), "horizons": MAX_HORIZON, "season": SEASON, "table": table,
        "paired_with_primary": paired, "statsforecast": sf_meta,
        "speed": {"primary_series_per_s_median": float(np.median(speed)),
                  "primary_series_per_s_range": [float(min(speed)), float(max(speed))],
                  "ort_only_series_per_s_median": float(np.median(ort_only)),
                  "runs": args.speed_runs, "batch": 1024, "threads": 1},
        "cost_ms_per_series": {m: round(c * 1000, 4) for m, c in cost.items()},
        "end_to_end": end_to_end(args.registry, series, hist, args.e2e_requests,
                                 [int(c) for c in args.e2e_concurrency.split(",")]) if args.e2e_requests else None,
        "goals": goals,
        "settings": {k: str(v) for k, v in vars(args).items() if k != "sf_worker"},
    }
    write_report(report, args.out)
    return report


def end_to_end(registry: Path, series, hist, requests: int, concurrencies: list[int]) -> dict:
    """Series/s through a real `bentoml serve` of the registry (REST /v1/forecast, one held-out series per request,
    timestamps + inferred frequency, the default horizon): closed loop at each concurrency, 127.0.0.1 only, bounded
    in count (`requests`) and time (120 s per level)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from scripts.drills.server import Server

    bodies = []
    for s, h in zip(series, hist):
        ts = [str(t) for t in s.timestamps[: len(h)]]
        bodies.append({"values": [float(v) for v in h], "timestamps": ts})
    env = {"TRISERVE_ACCESS__RATE_PER_S": "100000", "TRISERVE_ACCESS__DEPLOYMENT_RATE_PER_S": "{}"}
    out: dict = {"requests_per_level": requests, "levels": {}}
    with Server(registry, env=env, log_path=PROJECT_ROOT / ".cache" / "forecast_bench" / "e2e-serve.log") as srv:
        out["ready_s"] = round(srv.wait_ready(), 1)
        with httpx.Client(timeout=60) as client:
            for b in bodies[:20]:  # warm-up
                client.post(f"{srv.url}/v1/forecast", json=b)

            def one(i: int) -> tuple[int, float]:
                t0 = time.perf_counter()
                r = client.post(f"{srv.url}/v1/forecast", json=bodies[i % len(bodies)])
                return r.status_code, time.perf_counter() - t0

            for c in concurrencies:
                deadline = time.monotonic() + 120
                t0 = time.perf_counter()
                with ThreadPoolExecutor(c) as pool:
                    results = list(pool.map(lambda i, end=deadline: one(i) if time.monotonic() < end else (0, 0.0),
                                            range(requests)))
                wall = time.perf_counter() - t0
                ok = [lat for code, lat in results if code == 200]
                out["levels"][str(c)] = {
                    "series_per_s": round(len(ok) / wall, 1), "ok": len(ok), "sent": len(results),
                    "p50_ms": round(1000 * float(np.percentile(ok, 50)), 1) if ok else None,
                    "p99_ms": round(1000 * float(np.percentile(ok, 99)), 1) if ok else None}
                print(f"end to end, concurrency {c}: {out['levels'][str(c)]}")
    return out


def markdown(report: dict) -> str:
    from families.forecast.features import FREQUENCIES

    t = report["table"]
    methods = [m for m in ("primary", "fallback", "seasonal_naive", "AutoETS", "AutoTheta", "AutoARIMA") if m in t]
    lines = ["# Forecast accuracy on held-out series", "",
             f"Held-out series: {report['heldout_series']} ({report['heldout_groups']} groups never seen in "
             f"training); last window of each, horizon per frequency {report['horizons']}. Corpus fingerprint "
             f"`{report['corpus_fingerprint'][:16]}`. Generated by `python -m scripts.bench.forecast_accuracy`.", "",
             "Geometric-mean MASE ratio vs seasonal naive (lower is better; < 1 beats seasonal naive); in "
             "parentheses the number of series AutoARIMA forecast (a subsample, see the paired table):", "",
             "| frequency | series | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
    for f in (*FREQUENCIES, "overall"):
        if f not in t["primary"]:
            continue
        cells = [f"{t[m][f]['gmean_mase_ratio']:.3f}" if f in t[m] else "-" for m in methods]
        extra = f" ({t['AutoARIMA'][f]['series']})" if "AutoARIMA" in t and f in t["AutoARIMA"] else ""
        lines.append(f"| {f} | {t['primary'][f]['series']}{extra} | " + " | ".join(cells) + " |")
    for key, title, fmt in (("mase", "Mean MASE", ".3f"), ("smape", "Mean sMAPE (%)", ".2f"),
                            ("wql", "Mean per-series weighted quantile loss", ".4f"),
                            ("cov50", "50% interval coverage (target 0.50)", ".3f"),
                            ("cov90", "90% interval coverage (target 0.90)", ".3f")):
        lines += ["", f"{title}:", "", "| frequency | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
        for f in (*FREQUENCIES, "overall"):
            if f not in t["primary"]:
                continue
            cells = [format(t[m][f][key], fmt) if f in t[m] else "-" for m in methods]
            lines.append(f"| {f} | " + " | ".join(cells) + " |")
    p = report["paired_with_primary"]
    if p:
        lines += ["", "Paired on the series each statsforecast method actually forecast (gmean MASE ratio):", "",
                  "| method | series | method | primary on the same series |", "|---|---|---|---|"]
        for m, v in p.items():
            lines.append(f"| {m} | {v['series']} | {v[m]['gmean_mase_ratio']:.3f} | "
                         f"{v['primary']['gmean_mase_ratio']:.3f} |")
    s = report["speed"]
    lines += ["", f"Speed, one core: primary {s['primary_series_per_s_median']:.0f} series/s batched in process "
                  f"(prepare + ORT + unscale, median of {s['runs']}, range {s['primary_series_per_s_range'][0]:.0f}"
                  f"-{s['primary_series_per_s_range'][1]:.0f}); ORT alone {s['ort_only_series_per_s_median']:.0f} "
                  "series/s.", "", "Cost per series (ms): " + ", ".join(
                      f"{m} {c:.3g}" for m, c in report["cost_ms_per_series"].items()), "", "Goals:", ""]
    e2e = report.get("end_to_end")
    if e2e:
        lines[-3:-3] = ["", f"End to end (REST /v1/forecast on a real `bentoml serve` of the registry, one held-out "
                            f"series per request with timestamps, frequency inferred, {e2e['requests_per_level']} "
                            f"requests per level, closed loop):", "",
                        "| concurrency | series/s | p50 ms | p99 ms | ok / sent |", "|---|---|---|---|---|"] + [
            f"| {c} | {v['series_per_s']} | {v['p50_ms']} | {v['p99_ms']} | {v['ok']} / {v['sent']} |"
            for c, v in e2e["levels"].items()]
    for g, v in report["goals"].items():
        lines.append(f"- {g}: {'met' if v['met'] else 'MISSED'} ({json.dumps(v['value'], default=str)})")
    tr = (report.get("training") or {}).get("training")
    if tr:
        lines += ["", f"Training: {tr['steps']} steps, {tr['seconds']} s on one core "
                      f"({tr['windows_seen']} windows); {report['training']['parameters']} parameters."]
    elif report.get("training"):
        lines += ["", f"Model: {report['training']['registry']}: {report['training']['source']}."]
    return "\n".join(lines) + "\n"


def write_report(report: dict, out: Path) -> None:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2, default=float))
    md = markdown(report)
    out.with_suffix(".md").write_text(md)
    print(md)
    try:
        plot(report, out.with_suffix(".png"))
    except Exception as exc:  # noqa: BLE001  # the numbers are the report; the plot is a convenience
        print(f"plot skipped: {exc}", file=sys.stderr)


def plot(report: dict, path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return None

    from families.forecast.features import FREQUENCIES

    t = report["table"]
    methods = [m for m in ("primary", "fallback", "seasonal_naive", "AutoETS", "AutoTheta", "AutoARIMA") if m in t]
    cols = [f for f in (*FREQUENCIES, "overall") if f in t["primary"]]
    fig, axes = plt.subplots(2, 1, figsize=(12, 8))
    w = 0.8 / len(methods)
    x = np.arange(len(cols))
    for k, m in enumerate(methods):
        axes[0].bar(x + k * w, [t[m].get(f, {}).get("gmean_mase_ratio", np.nan) for f in cols], w, label=m)
        axes[1].bar(x + k * w, [t[m].get(f, {}).get("cov90", np.nan) for f in cols], w, label=m)
    axes[0].axhline(1.0, color="k", lw=0.8)
    axes[0].axhline(0.8, color="g", lw=0.8, ls="--")
    axes[0].set_ylabel("gmean MASE / seasonal naive")
    axes[1].axhspan(0.85, 0.95, color="g", alpha=0.1)
    axes[1].set_ylabel("90% interval coverage")
    for ax in axes:
        ax.set_xticks(x + 0.4 - w / 2)
        ax.set_xticklabels(cols)
    axes[0].legend(ncol=len(methods), fontsize=8)
    axes[0].set_title("Held-out series, last window per series")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
