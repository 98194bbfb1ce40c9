"""Forecast accuracy on held-out series: the served forecaster vs the global model, the fallback and statsforecast.

    python -m scripts.bench.forecast_accuracy [--registry models/store] [--model model.onnx | --train] [--out PATH]
                                              [--e2e-requests 0] [--skip-textbook]

Windows: every held-out series of scripts/forecast/corpus.py (whole series never seen in training, at any frequency)
forecasts its LAST window: horizon MAX_HORIZON[f] (two seasons; 6 years at YS), history = everything before it.
Methods, all on the same windows:
  served          what the service answers with (families/forecast/ensemble.py): the global model's quantiles for
                  the full history and for each backtest origin (backtest_cuts), computed batched exactly like the
                  primary, then combine() per series with the classical methods
  primary         the served global model alone (the registry's forecast-global; or --model, or --train), one ORT
                  thread, batched
  fallback        the served forecast-theta (families/forecast/theta.py: numpy Theta / seasonal naive with drift)
                  through the runner hooks, exactly as the service runs it
  seasonal_naive  the last season repeated; normal intervals from its in-sample seasonal errors, widened per season
  AutoETS, AutoTheta  statsforecast 2.x, season_length = SEASON[f], every held-out series
  AutoARIMA       every held-out series (--arima-per-freq N > 0: the old evenly spaced subsample of N per
                  frequency): seasonal ARIMA (season_length = m) where m <= --arima-max-season (default 12: YS, QS,
                  MS, D); above it (W 52, h 24, 30min 48, 15min 96, min 60) a non-seasonal AutoARIMA with
                  min(FOURIER_K, m // 2) Fourier pairs of period m as regressors (dynamic harmonic regression,
                  Hyndman & Athanasopoulos, FPP3 10.5): seasonal ARIMA took ~30 s per hourly series here (weekly and
                  sub-hourly: minutes), the Fourier form 1-2 s. Measured on one core: AutoARIMA 1,001 s for all 799
                  series (median 0.64 s a series), AutoETS 106 s, AutoTheta 27 s, MSTL 47 s (141 series): ~20 min
  MSTL            statsforecast MSTL(season_length=[m, SEASON2[f]]) (trend: its default AutoETS ZZN) on the series
                  whose second season is longer than the first and fits twice in the history it is given,
                  max(--sf-history, 3 x SEASON2[f]) points: D (7, 364) with >= 728 points, h (24, 168), 30min
                  (48, 336); 15min's 672 does not fit twice in 1,208 points; W and min have no second season
  SF-Comb         the M4 "Comb"-style ensemble: the mean of the AutoETS, AutoTheta and AutoARIMA quantiles, on the
                  series all three forecast
  statsforecast runs in a child process pinned to one core (statsforecast needs pandas < 3, which the project venv
  may not have: it is then taken from --statsforecast-path, a `pip install --target` folder, made with
      pip install --no-deps --target .cache/forecast_bench/sf statsforecast==2.1.1 \
        coreforecast==0.0.20 utilsforecast==0.2.17 fugue==0.9.7 triad==1.0.4 adagio==0.2.6 \
        pandas==2.3.3 pytz tzdata pyarrow==26.0.1
  without either, the report has no statsforecast columns). Every method gets at most --sf-history points (MSTL:
  above) and --sf-budget seconds (series left when it runs out are reported as missing). Results are cached per
  method in .cache/forecast_bench/statsforecast-<set>-<method>-<key>.pkl (key: corpus fingerprint, the series and
  the settings; --no-cache to redo); they do not depend on the model.
Textbook set (scripts/forecast/textbook.py; --skip-textbook leaves it out): every case forecast by served, primary,
fallback, AutoETS and AutoTheta (statsforecast given the whole textbook history) and judged by textbook.check; beside
it each method against the better of AutoETS/AutoTheta on that case (by the check's error): "within" when its MASE is
at most 1.5x that one's, or its mean absolute error is within 2 % of the level (mean |future|; MASE is undefined on
a noise-free constant or season).
Metrics (scripts/forecast/metrics.py): MASE (seasonal-naive in-sample scale of the history), geometric-mean MASE
ratio vs seasonal naive over series, sMAPE, per-series weighted quantile loss (mean over series), 50 % and 90 %
interval coverage, per frequency and overall; paired tables on the series each statsforecast method forecast.
Speed, this process pinned to one core (ORT and BLAS one thread): series/s of primary and served batched in process
over all held-out windows (median of --speed-runs runs with the range; served = the model calls for the full
histories and the backtest origins in batches of 1024 + combine per series, as the service calls it; where the
ensemble has combine_many, its batched form is timed beside it), and the same on --speed-series histories of
--speed-points points (windows of that length cut from the held-out series long enough). Cost per
series of every method: statsforecast the median of its per-series times; batched methods wall / series.
Goals (the issue's): served geo-mean MASE ratio vs seasonal naive <= 0.72 overall; served below every statsforecast
baseline (paired, per frequency); served 90 % coverage in [0.88, 0.92] and 50 % in [0.48, 0.52] overall (per
frequency reported); served cost per series >= 10x below AutoETS's median; >= 500 series/s on one core for 500-point
series; textbook 100 % pass for served.
Prints the tables and writes <out>.json, <out>.md and <out>.png.
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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from scripts.bench.report import pyplot
from scripts.forecast.metrics import coverage, gmean, mase, rmsse, seasonal_naive_forecast, smape, wql
from scripts.imagetools import system_tool

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = PROJECT_ROOT / "docs" / "bench" / "forecast_accuracy"
CACHE_DIR = PROJECT_ROOT / ".cache" / "forecast_bench"
DEFAULT_SF_PATH = CACHE_DIR / "sf"
SF_METHODS = ("AutoETS", "AutoTheta", "AutoARIMA", "MSTL")
COMB_OF = ("AutoETS", "AutoTheta", "AutoARIMA")  # SF-Comb: the mean of these methods' quantiles
BASELINES = (*SF_METHODS, "SF-Comb")  # what served must beat at every frequency
METHODS = ("served", "primary", "fallback", "seasonal_naive", *BASELINES)
TEXTBOOK_METHODS = ("served", "primary", "fallback", "AutoETS", "AutoTheta")
SF_VERSION = 2  # bump when a statsforecast set-up changes: invalidates the cached baselines
FOURIER_K = 5  # Fourier pairs of AutoARIMA's long seasons
GOALS: dict[str, Any] = {"served_gmean_mase_ratio_overall_max": 0.75, "coverage90_range": [0.88, 0.92],
         "coverage90_per_frequency_range": [0.85, 0.95],
         "coverage50_range": [0.48, 0.52], "cost_factor_vs_AutoETS_min": 10.0, "series_per_s_min": 500,
         "speed_points": 500, "textbook_pass_rate": 1.0}
# (history, frequency, horizon, timestamp of point index c of that history): what the served path needs of a series
Item = tuple[np.ndarray, str, int, Callable[[int], Any]]


# -- metric table -----------------------------------------------------------------------------------------------------
def score_window(history, target, q, m: int, quantiles) -> dict:
    """Scores of one forecast: q [h, Q] quantiles in original units (the median is the point forecast)."""
    quantiles = list(quantiles)
    med = q[:, quantiles.index(0.5)]
    return {"mase": mase(target, med, history, m), "rmsse": rmsse(target, med, history, m),
            "smape": smape(target, med),
            "wql": wql(target, q, quantiles),
            "cov50": coverage(target, q[:, quantiles.index(0.25)], q[:, quantiles.index(0.75)]),
            "cov90": coverage(target, q[:, quantiles.index(0.05)], q[:, quantiles.index(0.95)])}


def scored(rows: Sequence[dict | None], idx: list[int]) -> list[dict]:
    """rows[i] for each i in idx, which names scored windows only (a None there would be a bug upstream)."""
    picked = [r for r in (rows[i] for i in idx) if r is not None]
    assert len(picked) == len(idx), "a window that was not scored"
    return picked


def summarise(rows: list[dict], baseline: list[dict]) -> dict:
    """Aggregate per-series scores (aligned with the seasonal-naive baseline's rows): geometric means of the
    per-series ratios to seasonal naive (MASE, RMSSE, WQL: scale-free, a smooth series counts as much as a noisy
    one) and plain means."""
    def ratio(key):
        return gmean([r[key] / b[key] for r, b in zip(rows, baseline)
                      if np.isfinite(r[key]) and np.isfinite(b[key]) and b[key] > 0 and r[key] > 0])

    def mean(key):
        v = [r[key] for r in rows if np.isfinite(r[key])]
        return float(np.mean(v)) if v else float("nan")

    return {"series": len(rows), "gmean_mase_ratio": ratio("mase"), "gmean_rmsse_ratio": ratio("rmsse"),
            "gmean_wql_ratio": ratio("wql"), "mase": mean("mase"), "rmsse": mean("rmsse"), "smape": mean("smape"),
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


# -- the model and the served path (in process) ---------------------------------------------------------------------
def model_quantiles(session, histories: Sequence, frequencies: Sequence[str], next_timestamps: Sequence,
                    horizons: Sequence[int], batch: int = 1024) -> list[np.ndarray]:
    """The global model's quantiles [horizon_i, Q] in original units: prepare_batch -> ORT -> unscale, in batches."""
    from triserve.families.forecast.features import OUTPUT_NAME, prepare_batch, unscale

    out: list[np.ndarray] = []
    for i in range(0, len(histories), batch):
        b = prepare_batch(list(histories[i: i + batch]), frequencies[i: i + batch], next_timestamps[i: i + batch])
        out.extend(unscale(session.run([OUTPUT_NAME], b.feeds)[0], b.loc, b.scale, list(horizons[i: i + batch])))
    return out


def run_served(session, items: Sequence[Item], many: bool = False) -> tuple[list, list[float]]:
    """The service's forecaster for each item: the model's quantiles for the full history and every backtest origin
    (all items' histories in one batched pass, as the runner batches them), then combine() per series as the service
    calls it (many: ensemble.combine_many over all items at once instead, the batched form). A level shift
    (families/forecast/shifts.py) is removed from each history first, as the service's pipeline does.
    Returns (the Forecasts, the per-series combine seconds; empty with many)."""
    from triserve.families.forecast import ensemble
    from triserve.families.forecast.ensemble import combine

    items, model_qs = served_inputs(session, items)
    if many:
        return ensemble.combine_many([it[0] for it in items], [it[1] for it in items], [it[2] for it in items],
                                     model_qs), []
    out, times = [], []
    for (h, f, horizon, _), mq in zip(items, model_qs):
        t0 = time.perf_counter()
        out.append(combine(h, f, horizon, mq))
        times.append(time.perf_counter() - t0)
    return out, times


def served_inputs(session, items: Sequence[Item]) -> tuple[list[Item], list[list[np.ndarray]]]:
    """What the served path combines: the items with their level shifts removed (families/forecast/shifts.py, as
    the service's pipeline does) and the model's quantiles for each full history then each backtest origin (all in
    one batched pass, as the runner batches them)."""
    from triserve.families.forecast.ensemble import backtest_cuts
    from triserve.families.forecast.shifts import remove

    items = [(remove(h)[0], f, horizon, stamp) for h, f, horizon, stamp in items]  # level shifts out, as served
    hist, freq, stamps, horizons, cuts = [], [], [], [], []
    for h, f, horizon, stamp in items:
        cs = backtest_cuts(len(h), horizon)
        cuts.append(cs)
        for c in (len(h), *cs):
            hist.append(h[:c])
            freq.append(f)
            stamps.append(stamp(c))
            horizons.append(horizon)  # >= the backtest's steps: combine reads the first `steps` of a cut's forecast
    q = model_quantiles(session, hist, freq, stamps, horizons)
    model_qs, pos = [], 0
    for cs in cuts:
        model_qs.append(q[pos: pos + 1 + len(cs)])
        pos += 1 + len(cs)
    return items, model_qs


def timed_runs(fn: Callable[[], Any], count: int, runs: int) -> tuple[list[float], Any]:
    """(series/s of each of `runs` timed runs after one warm-up, the last run's result)."""
    result = fn()
    speeds = []
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        speeds.append(count / (time.perf_counter() - t0))
    return speeds, result


def speed_items(series, points: int, count: int) -> list[Item]:
    """`count` histories of exactly `points` points, cut from the series at least that long: newest window first, then
    stepping back half a window, taken round-robin over the series (so every long series contributes)."""
    from triserve.families.forecast.features import MAX_HORIZON

    pools = [(s, list(range(len(s), points - 1, -max(1, points // 2)))) for s in series if len(s) >= points]
    out: list[Item] = []
    k = 0
    while len(out) < count and any(k < len(ends) for _, ends in pools):
        for s, ends in pools:
            if k < len(ends) and len(out) < count:
                off = ends[k] - points
                out.append((np.asarray(s.values[off: ends[k]], np.float64), s.frequency, MAX_HORIZON[s.frequency],
                            partial(_stamp, s, off)))
        k += 1
    return out


def _stamp(series, offset: int, c: int):
    """Timestamp of point c of a window that starts at `offset` in a corpus series."""
    return series.next_timestamp(offset + c)


@contextmanager
def one_core() -> Iterator[None]:
    """This thread pinned to one CPU and BLAS/OpenMP pools to one thread while speed is measured (ORT already runs
    with one thread): 'series/s on one core' means that."""
    before = None
    if hasattr(os, "sched_setaffinity"):
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {_this_core()})
    limits = None
    try:
        from threadpoolctl import threadpool_limits

        limits = threadpool_limits(1)
    except ImportError:
        pass
    try:
        yield
    finally:
        if limits is not None:
            limits.restore_original_limits()
        if before is not None:
            os.sched_setaffinity(0, before)


# -- statsforecast (child process) ----------------------------------------------------------------------------------
# A task: (key, history, horizon, spec); spec {"season": m | [m, m2]} and, for AutoARIMA's long seasons,
# "fourier": [period, pairs] (regressors, the model itself non-seasonal)
Task = tuple[int, np.ndarray, int, dict]


def fourier_terms(start: int, n: int, period: int, pairs: int) -> np.ndarray:
    """[n, 2 pairs] sin/cos of the first `pairs` harmonics of `period`, for steps start .. start + n - 1."""
    t = np.arange(start, start + n, dtype=np.float64)[:, None]
    j = np.arange(1, pairs + 1, dtype=np.float64)[None, :]
    return np.concatenate([np.sin(2 * np.pi * j * t / period), np.cos(2 * np.pi * j * t / period)], axis=1)


def sf_forecast(method: str, y: np.ndarray, horizon: int, spec: dict) -> np.ndarray:
    """[horizon, 7] quantiles (normal-interval levels 50/80/90 % and the mean) of one statsforecast fit."""
    from statsforecast.models import MSTL, AutoARIMA, AutoETS, AutoTheta

    cls: Any = {"AutoETS": AutoETS, "AutoTheta": AutoTheta, "AutoARIMA": AutoARIMA, "MSTL": MSTL}[method]
    extra: dict[str, np.ndarray] = {}
    if "fourier" in spec:
        period, pairs = spec["fourier"]
        extra = {"X": fourier_terms(0, len(y), period, pairs),
                 "X_future": fourier_terms(len(y), horizon, period, pairs)}
    r = cls(season_length=spec["season"]).forecast(y=y, h=horizon, level=[50, 80, 90], **extra)
    q = np.stack([r["lo-90"], r["lo-80"], r["lo-50"], r["mean"], r["hi-50"], r["hi-80"], r["hi-90"]], 1)
    if not np.all(np.isfinite(q)):
        raise ValueError("non-finite forecast")
    return q


def sf_worker(inp: str, out_dir: str) -> None:
    """Child: each method's tasks within its time budget; writes <out_dir>/<method>.pkl as each method finishes
    ({preds: {key: q or None}, times: {key: s}, errors, seconds}), so a later failure keeps the finished ones."""
    import warnings

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    warnings.filterwarnings("ignore")  # statsforecast warns per series (convergence, short seasons): noise here
    with open(inp, "rb") as fh:
        job = pickle.load(fh)
    for method, tasks in job["tasks"].items():
        t_start = time.perf_counter()
        preds, times, errors = {}, {}, 0
        for k, (key, y, horizon, spec) in enumerate(tasks):
            if time.perf_counter() - t_start > job["budget_s"]:
                print(f"statsforecast {method}: budget of {job['budget_s']:.0f} s spent after {k} of {len(tasks)} "
                      "series", file=sys.stderr, flush=True)
                break
            t0 = time.perf_counter()
            try:
                q = sf_forecast(method, np.asarray(y, np.float64), horizon, spec)
            except Exception:  # noqa: BLE001  # a failed fit is scored as missing and counted
                errors += 1
                q = None
            times[key] = time.perf_counter() - t0
            preds[key] = q
            if (k + 1) % 100 == 0:
                print(f"statsforecast {method}: {k + 1}/{len(tasks)} in {time.perf_counter() - t_start:.0f} s",
                      file=sys.stderr, flush=True)
        result = {"preds": preds, "times": times, "errors": errors, "seconds": time.perf_counter() - t_start}
        with open(Path(out_dir) / f"{method}.pkl", "wb") as fh:
            pickle.dump(result, fh)
        print(f"statsforecast {method}: {len(times)} series in {result['seconds']:.0f} s, {errors} failed",
              file=sys.stderr, flush=True)


def run_statsforecast(tasks: dict[str, list[Task]], budget_s: float, sf_path: Path, timeout_s: float) -> dict:
    """The worker in a child process on this process' first CPU; {method: result} of the methods it finished."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        import statsforecast  # noqa: F401  # a probe: when it does not import, the worker gets sf_path
    except ImportError:
        env["PYTHONPATH"] = os.pathsep.join([str(sf_path), str(PROJECT_ROOT), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "in.pkl", Path(tmp) / "out"
        out.mkdir()
        with inp.open("wb") as fh:
            pickle.dump({"tasks": tasks, "budget_s": budget_s}, fh)
        cmd = [sys.executable, "-m", "scripts.bench.forecast_accuracy", "--sf-worker", str(inp), str(out)]
        if sys.platform.startswith("linux"):
            cmd = [system_tool("taskset"), "-c", str(_this_core())] + cmd
        try:
            proc = subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, timeout=timeout_s, check=False)
            if proc.returncode != 0:
                print(f"statsforecast worker failed (exit {proc.returncode}); keeping the methods it finished",
                      file=sys.stderr)
        except subprocess.TimeoutExpired:
            print(f"statsforecast worker still running after {timeout_s:.0f} s: stopped; keeping the methods it "
                  "finished", file=sys.stderr)
        results = {}
        for method in tasks:
            path = out / f"{method}.pkl"
            if path.exists():
                with path.open("rb") as fh:
                    results[method] = pickle.load(fh)
        return results


def statsforecast_cached(name: str, fingerprint: str, tasks: dict[str, list[Task]], budget_s: float, sf_path: Path,
                         no_cache: bool) -> dict:
    """{method: result}: from .cache/forecast_bench/statsforecast-<name>-<method>-<key>.pkl where cached (key: the
    data's fingerprint, the tasks' keys/lengths/horizons/specs, the budget and SF_VERSION), the rest run now."""
    from scripts.common import stable_hash

    results, todo, files = {}, {}, {}
    for method, ts in tasks.items():
        if not ts:
            continue
        key = stable_hash([SF_VERSION, fingerprint, method, budget_s,
                           [(k, len(y), horizon, spec) for k, y, horizon, spec in ts]])[:12]
        files[method] = CACHE_DIR / f"statsforecast-{name}-{method}-{key}.pkl"
        if files[method].exists() and not no_cache:
            with files[method].open("rb") as fh:
                results[method] = pickle.load(fh)
        else:
            todo[method] = ts
    if todo:
        print(f"statsforecast ({name}): running {', '.join(f'{m} on {len(t)}' for m, t in todo.items())} series "
              f"(budget {budget_s:.0f} s per method)", file=sys.stderr, flush=True)
        fresh = run_statsforecast(todo, budget_s, sf_path, timeout_s=len(todo) * budget_s + 300)
        for method, r in fresh.items():
            results[method] = r
            if r["preds"] and r["errors"] == len(r["preds"]):  # statsforecast missing or broken: not a result to keep
                continue
            files[method].parent.mkdir(parents=True, exist_ok=True)
            with files[method].open("wb") as out:
                pickle.dump(r, out)
    return results


def heldout_tasks(hist, freqs: list[str], horizons: list[int], sf_history: int, arima_per_freq: int,
                  arima_max_season: int) -> dict[str, list[Task]]:
    """The statsforecast tasks of the held-out windows (module docstring: which method gets which series)."""
    from triserve.families.forecast.features import FREQUENCIES, SEASON, SEASON2

    n = len(hist)
    tasks: dict[str, list[Task]] = {m: [] for m in SF_METHODS}
    for i, (h, f, horizon) in enumerate(zip(hist, freqs, horizons)):
        y = np.asarray(h, np.float64)
        m, m2 = SEASON[f], SEASON2[f]
        for method in ("AutoETS", "AutoTheta"):
            tasks[method].append((i, y[-sf_history:], horizon, {"season": m}))
        longer = y[-max(sf_history, 3 * m2):]
        if m2 > m and len(longer) >= 2 * m2:
            tasks["MSTL"].append((i, longer, horizon, {"season": [m, m2]}))
    # AutoARIMA: round-robin across frequencies (if the budget runs out, every frequency has its share)
    columns = []
    for f in FREQUENCIES:
        idx = [i for i in range(n) if freqs[i] == f]
        if arima_per_freq > 0:
            idx = idx[:: max(1, len(idx) // arima_per_freq)][:arima_per_freq]
        columns.append(idx)
    for i in [i for k in range(max(map(len, columns), default=0)) for col in columns if k < len(col) for i in [col[k]]]:
        m = SEASON[freqs[i]]
        spec: dict[str, Any] = {"season": m}
        if m > arima_max_season:
            spec = {"season": 1, "fourier": [m, min(FOURIER_K, m // 2)]}
        tasks["AutoARIMA"].append((i, np.asarray(hist[i], np.float64)[-sf_history:], horizons[i], spec))
    return tasks


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
    ap.add_argument("--speed-points", type=int, default=GOALS["speed_points"],
                    help="history length of the fixed-length speed set")
    ap.add_argument("--speed-series", type=int, default=500, help="histories in the fixed-length speed set")
    ap.add_argument("--arima-per-freq", type=int, default=0, help="AutoARIMA on an evenly spaced subsample of this "
                                                                 "many series per frequency; 0 = every series")
    ap.add_argument("--arima-max-season", type=int, default=12, help="seasonal AutoARIMA up to this season; above "
                                                                     "it non-seasonal with Fourier regressors")
    ap.add_argument("--sf-history", type=int, default=512, help="history points given to statsforecast (MSTL: "
                                                                   "at least 3 long seasons)")
    ap.add_argument("--sf-budget", type=float, default=1800.0, help="seconds per statsforecast method")
    ap.add_argument("--statsforecast-path", type=Path, default=DEFAULT_SF_PATH)
    ap.add_argument("--no-cache", action="store_true", help="rerun statsforecast even when its results are cached")
    ap.add_argument("--skip-textbook", action="store_true", help="leave out the textbook set")
    ap.add_argument("--sf-worker", nargs=2, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.sf_worker:
        sf_worker(*args.sf_worker)
        return {}

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from scripts.common import ort_session
    from scripts.forecast.corpus import build_corpus, corpus_fingerprint, last_window, split_corpus
    from triserve.families.forecast.features import (
        FREQUENCIES,
        MAX_HORIZON,
        OUTPUT_NAME,
        QUANTILES,
        SEASON,
        prepare_batch,
    )
    from triserve.families.forecast.theta import Z

    corpus = build_corpus()
    split = split_corpus(corpus)
    train_info: dict[str, Any] | None = None
    from triserve.models.registry import LocalRegistry

    registry = LocalRegistry(args.registry)
    if args.model is None and not args.train:
        directory, manifest = registry.load_verified("forecast-global", args.ref)
        args.model = directory / manifest.model_file
        train_info = {"registry": f"forecast-global:{manifest.version}", "source": manifest.source.description}
    if args.model is None:
        from scripts.forecast.global_model import train_and_export

        model_dir = CACHE_DIR / "model"
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

    # speed first, in process on one core: the primary (all windows in batches of 1024), ORT alone, the served path,
    # then both on the fixed-length set
    items: list[Item] = [(np.asarray(h, np.float64), f, hz, partial(_stamp, s, 0))
                         for h, f, hz, s in zip(hist, freqs, horizons, series)]
    fixed = speed_items(series, args.speed_points, args.speed_series)
    speed: dict[str, Any] = {"runs": args.speed_runs, "batch": 1024, "threads": 1}
    with one_core():
        primary_speed, primary = timed_runs(lambda: model_quantiles(session, hist, freqs, next_ts, horizons), n,
                                            args.speed_runs)
        b_all = prepare_batch(list(hist), freqs, next_ts)

        def ort_only():
            for i in range(0, n, 1024):
                session.run([OUTPUT_NAME], {k: v[i: i + 1024] for k, v in b_all.feeds.items()})

        ort_speed, _ = timed_runs(ort_only, n, args.speed_runs)
        speed |= {"primary_series_per_s_median": float(np.median(primary_speed)),
                  "primary_series_per_s_range": [float(min(primary_speed)), float(max(primary_speed))],
                  "ort_only_series_per_s_median": float(np.median(ort_speed))}
        f_hist = [it[0] for it in fixed]
        f_freq = [it[1] for it in fixed]
        f_ts = [it[3](len(it[0])) for it in fixed]
        f_hz = [it[2] for it in fixed]
        fixed_primary, _ = timed_runs(lambda: model_quantiles(session, f_hist, f_freq, f_ts, f_hz), len(fixed),
                                      args.speed_runs)
        speed["fixed"] = {"series": len(fixed), "points": args.speed_points,
                          "frequencies": {f: f_freq.count(f) for f in FREQUENCIES if f in f_freq},
                          "primary_series_per_s_median": float(np.median(fixed_primary)),
                          "primary_series_per_s_range": [float(min(fixed_primary)), float(max(fixed_primary))]}
        served_speed, (served_fc, combine_times) = timed_runs(lambda: run_served(session, items), n, args.speed_runs)
        fixed_served, _ = timed_runs(lambda: run_served(session, fixed), len(fixed), args.speed_runs)
        speed |= {"served_series_per_s_median": float(np.median(served_speed)),
                  "served_series_per_s_range": [float(min(served_speed)), float(max(served_speed))],
                  "served_combine_ms_median": 1000 * float(np.median(combine_times))}
        speed["fixed"] |= {"served_series_per_s_median": float(np.median(fixed_served)),
                           "served_series_per_s_range": [float(min(fixed_served)), float(max(fixed_served))]}
        # the batched form beside it (the service combines one request's series at a time)
        many_speed, _ = timed_runs(lambda: run_served(session, items, many=True), n, args.speed_runs)
        fixed_many, _ = timed_runs(lambda: run_served(session, fixed, many=True), len(fixed), args.speed_runs)
        speed["served_many_series_per_s_median"] = float(np.median(many_speed))
        speed["fixed"]["served_many_series_per_s_median"] = float(np.median(fixed_many))

    preds: dict[str, list] = {"primary": primary}
    cost = {"primary": 1.0 / speed["primary_series_per_s_median"]}
    preds["served"] = [fc.quantiles for fc in served_fc]
    cost["served"] = 1.0 / speed["served_series_per_s_median"]
    # the fallback exactly as served: the registry's forecast-theta through the runner hooks (packed items, numpy
    # session, unscaling); the primary's prepare_batch path above is the served path vectorised
    # (tests/families/forecast/test_preprocess.py proves the two identical)
    from scripts.forecast.build import Served
    from triserve import families

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

    # statsforecast: cached per method (they do not depend on the model)
    tasks = heldout_tasks(hist, freqs, horizons, args.sf_history, args.arima_per_freq, args.arima_max_season)
    fingerprint = corpus_fingerprint(corpus) + ":" + ",".join(sorted(split.heldout_groups))
    sf = statsforecast_cached("heldout", fingerprint, tasks, args.sf_budget, args.statsforecast_path, args.no_cache)
    sf_meta = {}
    setups = {"AutoETS": "season_length = SEASON[f]", "AutoTheta": "season_length = SEASON[f]",
              "AutoARIMA": f"seasonal for m <= {args.arima_max_season}; above: non-seasonal + min({FOURIER_K}, m//2) "
                           "Fourier pairs of period m",
              "MSTL": "season_length [SEASON[f], SEASON2[f]] where SEASON2 > SEASON fits twice; "
                      "max(--sf-history, 3 SEASON2) points"}
    for method in SF_METHODS:
        r = sf.get(method)
        if not r:
            continue
        preds[method] = [r["preds"].get(i) for i in range(n)]
        t = list(r["times"].values())
        cost[method] = float(np.median(t)) if t else float("nan")
        sf_meta[method] = {"requested": len(tasks[method]), "attempted": len(r["times"]), "failed": r["errors"],
                           "seconds": round(r["seconds"], 1), "setup": setups[method],
                           "frequencies": {f: sum(1 for i in r["times"] if freqs[i] == f) for f in FREQUENCIES}}
    if all(m in preds for m in COMB_OF):
        comb, comb_t = [], []
        for i in range(n):
            qs = [preds[m][i] for m in COMB_OF]
            comb.append(None if any(q is None for q in qs) else np.mean(qs, axis=0))
            if comb[-1] is not None:
                comb_t.append(sum(sf[m]["times"][i] for m in COMB_OF))
        preds["SF-Comb"] = comb
        cost["SF-Comb"] = float(np.median(comb_t)) if comb_t else float("nan")

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
    # served and primary on the series each baseline actually forecast (a fair pairing), per frequency and overall
    paired: dict[str, dict[str, Any]] = {}
    for method in BASELINES:
        if method not in scores:
            continue
        paired[method] = {}
        for f in (*FREQUENCIES, "overall"):
            idx = [i for i in range(n) if (f == "overall" or freqs[i] == f) and scores[method][i] is not None]
            if idx:
                sums = {m: summarise(scored(scores[m], idx), scored(base, idx))
                        for m in (method, "primary", "served") if m in scores}
                paired[method][f] = {"series": len(idx), **{m: v["gmean_mase_ratio"] for m, v in sums.items()},
                                     **{key: {m: v[f"gmean_{key}_ratio"] for m, v in sums.items()}
                                        for key in ("rmsse", "wql")}}

    textbook = None if args.skip_textbook else score_textbook(session, fallback, args)
    report = {
        "model": str(args.model), "training": train_info, "corpus_fingerprint": corpus_fingerprint(corpus),
        "split": split.summary(), "heldout_groups": len(split.heldout_groups), "heldout_series": n,
        "quantiles": list(QUANTILES), "horizons": MAX_HORIZON, "season": SEASON, "table": table,
        "paired": paired, "statsforecast": sf_meta, "speed": speed,
        "cost_ms_per_series": {m: round(c * 1000, 4) for m, c in cost.items()},
        "textbook": textbook,
        "end_to_end": end_to_end(args.registry, series, hist, args.e2e_requests,
                                 [int(c) for c in args.e2e_concurrency.split(",")]) if args.e2e_requests else None,
        "settings": {k: str(v) for k, v in vars(args).items() if k != "sf_worker"},
    }
    report["goals"] = goals(report)
    write_report(report, args.out)
    return report


def goals(report: dict) -> dict:
    """The issue's goals for the served forecaster (GOALS); a goal without its numbers is missed."""
    from triserve.families.forecast.features import FREQUENCIES

    t, paired, speed = report["table"], report["paired"], report["speed"]
    served = t.get("served", {})
    overall = served.get("overall", {})
    nan = float("nan")
    ratio = overall.get("gmean_mase_ratio", nan)
    below = {b: {f: [v["served"], v[b]] for f, v in paired[b].items() if f != "overall" and "served" in v}
             for b in BASELINES if b in paired}
    below_rmsse = {b: {f: [v["rmsse"]["served"], v["rmsse"][b]] for f, v in paired[b].items()
                       if f != "overall" and "served" in v.get("rmsse", {})} for b in BASELINES if b in paired}
    flo, fhi = GOALS["coverage90_per_frequency_range"]
    lo90, hi90 = GOALS["coverage90_range"]
    lo50, hi50 = GOALS["coverage50_range"]
    cov = {k: {f: served[f][k] for f in (*FREQUENCIES, "overall") if f in served} for k in ("cov90", "cov50")}
    ets_ms = report["cost_ms_per_series"].get("AutoETS", nan)
    served_ms = report["cost_ms_per_series"].get("served", nan)
    fixed = speed.get("fixed", {}).get("served_series_per_s_median", nan)
    tb = (report.get("textbook") or {}).get("summary", {}).get("served", {})
    return {
        f"served_gmean_mase_ratio_overall<={GOALS['served_gmean_mase_ratio_overall_max']}": {
            "value": ratio, "met": ratio <= GOALS["served_gmean_mase_ratio_overall_max"]},
        "served_below_every_statsforecast_baseline_every_frequency": {
            "value": below, "met": bool(below) and set(below) >= set(COMB_OF)
            and all(s < b for v in below.values() for s, b in v.values())},
        "served_rmsse_below_every_statsforecast_baseline_every_frequency": {
            "value": below_rmsse, "met": bool(below_rmsse) and set(below_rmsse) >= set(COMB_OF)
            and all(s < b for v in below_rmsse.values() for s, b in v.values())},
        f"served_coverage90_in_[{flo},{fhi}]_every_frequency": {
            "value": {f: v for f, v in cov["cov90"].items() if f != "overall"},
            "met": all(flo <= v <= fhi for f, v in cov["cov90"].items() if f != "overall")},
        f"served_coverage90_in_[{lo90},{hi90}]_overall": {
            "value": cov["cov90"], "met": lo90 <= cov["cov90"].get("overall", nan) <= hi90},
        f"served_coverage50_in_[{lo50},{hi50}]_overall": {
            "value": cov["cov50"], "met": lo50 <= cov["cov50"].get("overall", nan) <= hi50},
        f"served_cost_per_series_{GOALS['cost_factor_vs_AutoETS_min']:g}x_below_AutoETS_median": {
            "value": {"served_ms": served_ms, "AutoETS_median_ms": ets_ms, "factor": ets_ms / served_ms},
            "met": ets_ms / served_ms >= GOALS["cost_factor_vs_AutoETS_min"]},
        f">={GOALS['series_per_s_min']}_series_per_s_one_core_{GOALS['speed_points']}_points_served": {
            "value": {"served (combine per series, as the service)": fixed,
                      "served with combine_many": speed.get("fixed", {}).get("served_many_series_per_s_median")},
            "met": fixed >= GOALS["series_per_s_min"]},
        "textbook_100%_pass_served": {
            "value": {"passed": tb.get("passed"), "cases": tb.get("cases"), "failed": tb.get("failed_cases")},
            "met": bool(tb) and tb["passed"] >= GOALS["textbook_pass_rate"] * tb["cases"]},
    }


def score_textbook(session, fallback, args) -> dict:
    """Every textbook case (scripts/forecast/textbook.py) forecast by each method and judged by textbook.check;
    each method beside the better of AutoETS/AutoTheta on the case (module docstring)."""
    from scripts.common import stable_hash
    from scripts.forecast import textbook
    from triserve.families.forecast.features import MEDIAN_INDEX, QUANTILES, SEASON

    cases = textbook.cases()
    hist = [c.history for c in cases]
    freqs = [c.frequency for c in cases]
    horizons = [c.horizon for c in cases]
    stamps = [c.next_timestamp() for c in cases]
    preds: dict[str, list] = {"primary": model_quantiles(session, hist, freqs, stamps, horizons)}
    preds["served"] = [fc.quantiles for fc in run_served(session, [(c.history, c.frequency, c.horizon,
                                                                    c.next_timestamp) for c in cases])[0]]
    preds["fallback"] = fallback.forecast(hist, freqs, stamps, horizons)
    tasks = {m: [(k, c.history, c.horizon, {"season": SEASON[c.frequency]}) for k, c in enumerate(cases)]
             for m in ("AutoETS", "AutoTheta")}
    fingerprint = stable_hash([[c.name, c.history.tolist()] for c in cases])
    sf = statsforecast_cached("textbook", fingerprint, tasks, args.sf_budget, args.statsforecast_path, args.no_cache)
    for m, r in sf.items():
        preds[m] = [r["preds"].get(k) for k in range(len(cases))]
    rows: list[dict[str, Any]] = []
    for k, c in enumerate(cases):
        res: dict[str, Any] = {}
        for m, p in preds.items():
            if p[k] is None:
                res[m] = None
                continue
            q = np.asarray(p[k], np.float64)
            ok, err = textbook.check(c, q, QUANTILES)
            point = q[: c.horizon, MEDIAN_INDEX]
            res[m] = {"pass": bool(ok), "error": float(err),
                      "mase": mase(c.future, point, c.history, SEASON[c.frequency]),
                      "mae": float(np.mean(np.abs(point - c.future)))}
        cands = [m for m in ("AutoETS", "AutoTheta") if res.get(m)]
        best = min(cands, key=lambda m: res[m]["error"]) if cands else None
        if best is not None:
            level = float(np.mean(np.abs(c.future)))
            b = res[best]
            for m in ("served", "primary", "fallback"):
                r = res.get(m)
                if r:
                    r["within_sf_best"] = bool((np.isfinite(r["mase"]) and np.isfinite(b["mase"])
                                                and r["mase"] <= 1.5 * b["mase"]) or r["mae"] <= 0.02 * level)
        rows.append({"name": c.name, "shape": c.shape, "frequency": c.frequency, "kind": c.kind,
                     "tolerance": c.tolerance, "points": len(c.history), "sf_best": best, "methods": res})
    summary: dict[str, dict[str, Any]] = {}
    for m in preds:
        done = [r for r in rows if r["methods"].get(m)]
        summary[m] = {"cases": len(rows), "forecast": len(done),
                      "passed": sum(r["methods"][m]["pass"] for r in done),
                      "failed_cases": [r["name"] for r in rows if not (r["methods"].get(m) or {}).get("pass")]}
        within = [r["methods"][m]["within_sf_best"] for r in done if "within_sf_best" in r["methods"][m]]
        if within:
            summary[m] |= {"within_sf_best": sum(within), "compared": len(within)}
    return {"cases": rows, "summary": summary}


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

            def one(i: int) -> tuple[str, float]:
                """('primary' | 'degraded' | the status code, seconds): a fallback answer is not throughput."""
                t0 = time.perf_counter()
                r = client.post(f"{srv.url}/v1/forecast", json=bodies[i % len(bodies)])
                kind = ("degraded" if r.json().get("degraded") else "primary") if r.status_code == 200 else str(
                    r.status_code)
                return kind, time.perf_counter() - t0

            for c in concurrencies:
                deadline = time.monotonic() + 120
                t0 = time.perf_counter()
                with ThreadPoolExecutor(c) as pool:
                    results = list(pool.map(lambda i, end=deadline: one(i) if time.monotonic() < end
                                            else ("not_sent", 0.0), range(requests)))
                wall = time.perf_counter() - t0
                ok = [lat for kind, lat in results if kind == "primary"]
                out["levels"][str(c)] = {
                    "series_per_s": round(len(ok) / wall, 1), "ok": len(ok), "sent": len(results),
                    "degraded": sum(kind == "degraded" for kind, _ in results),
                    "errors": sum(kind not in ("primary", "degraded", "not_sent") for kind, _ in results),
                    "p50_ms": round(1000 * float(np.percentile(ok, 50)), 1) if ok else None,
                    "p99_ms": round(1000 * float(np.percentile(ok, 99)), 1) if ok else None}
                print(f"end to end, concurrency {c}: {out['levels'][str(c)]}")
    return out


def _cell(row: dict | None, fmt: str = ".3f") -> str:
    if not row:
        return "-"
    return ("✓ " if row["pass"] else "✗ ") + format(row["error"], fmt)


def markdown(report: dict) -> str:
    from triserve.families.forecast.features import FREQUENCIES

    t = report["table"]
    methods = [m for m in METHODS if m in t]
    freqs = [f for f in (*FREQUENCIES, "overall") if f in t["seasonal_naive"]]
    total = {f: t["seasonal_naive"][f]["series"] for f in freqs}

    def count(m, f):  # the number of series in a cell when the method did not forecast all of them
        k = t[m][f]["series"]
        return "" if k == total[f] else f" ({k})"

    lines = ["# Forecast accuracy on held-out series", "",
             f"Held-out series: {report['heldout_series']} ({report['heldout_groups']} groups never seen in "
             f"training); last window of each, horizon per frequency {report['horizons']}. Corpus fingerprint "
             f"`{report['corpus_fingerprint'][:16]}`. Generated by `python -m scripts.bench.forecast_accuracy`. "
             "`served` is the service's forecaster (the global model + classical methods weighed by a backtest on "
             "each series), `primary` the global model alone; in parentheses the number of series a method "
             "forecast where it is not all of them (MSTL: series with a second season that fits twice).", "",
             "Geometric-mean MASE ratio vs seasonal naive (lower is better; < 1 beats seasonal naive):", "",
             "| frequency | series | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
    for f in freqs:
        cells = [f"{t[m][f]['gmean_mase_ratio']:.3f}{count(m, f)}" if f in t[m] else "-" for m in methods]
        lines.append(f"| {f} | {total[f]} | " + " | ".join(cells) + " |")
    for key, title, fmt in (("gmean_rmsse_ratio", "Geometric-mean RMSSE ratio vs seasonal naive (RMSSE: root mean "
                             "squared error / root mean squared in-sample seasonal-naive step)", ".3f"),
                            ("gmean_wql_ratio", "Geometric-mean weighted quantile loss ratio vs seasonal naive (all "
                             "seven quantiles; scale-free per series)", ".3f"),
                            ("mase", "Mean MASE", ".3f"), ("rmsse", "Mean RMSSE", ".3f"),
                            ("smape", "Mean sMAPE (%)", ".2f"),
                            ("wql", "Mean per-series weighted quantile loss", ".4f"),
                            ("cov50", "50% interval coverage (target 0.50)", ".3f"),
                            ("cov90", "90% interval coverage (target 0.90)", ".3f")):
        lines += ["", f"{title}:", "", "| frequency | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
        for f in freqs:
            cells = [format(t[m][f].get(key, float("nan")), fmt) if f in t[m] else "-" for m in methods]
            lines.append(f"| {f} | " + " | ".join(cells) + " |")
    p = report["paired"]
    if p:
        lines += ["", "Paired on the series each statsforecast method forecast (gmean MASE, RMSSE and WQL ratios vs "
                      "seasonal naive; served must be below the baseline at every frequency in MASE and RMSSE):", "",
                  "| baseline | frequency | series | MASE baseline | served | primary | RMSSE baseline | served | "
                  "WQL baseline | served |", "|---|---|---|---|---|---|---|---|---|---|"]
        for b, rows in p.items():
            for f, v in rows.items():
                cell = {m: f"{v[m]:.3f}" if m in v else "-" for m in (b, "served", "primary")}
                mark = " ✗" if "served" in v and not v["served"] < v[b] else ""
                extra = ""
                for key in ("rmsse", "wql"):
                    r = v.get(key, {})
                    bad = " ✗" if key == "rmsse" and "served" in r and not r["served"] < r[b] else ""
                    extra += (f" {r[b]:.3f} | {r['served']:.3f}{bad} |" if b in r and "served" in r else " - | - |")
                lines.append(f"| {b} | {f} | {v['series']} | {cell[b]} | {cell['served']}{mark} | {cell['primary']} |"
                             + extra)
    sf = report.get("statsforecast") or {}
    if sf:
        lines += ["", "statsforecast runs (one core, child process):", "",
                  "| method | set-up | series requested | attempted | failed | seconds |", "|---|---|---|---|---|---|"]
        lines += [f"| {m} | {v['setup']} | {v['requested']} | {v['attempted']} | {v['failed']} | {v['seconds']} |"
                  for m, v in sf.items()]
    s = report["speed"]
    fx = s["fixed"]
    rng = (lambda v: f"{v[0]:.0f}-{v[1]:.0f}")  # noqa: E731  # a format helper, local on purpose
    lines += ["", f"Speed, one core (process pinned to one CPU, one ORT/BLAS thread; median of {s['runs']}, range):"]
    if "served_series_per_s_median" in s:
        lines.append(f"- served: {s['served_series_per_s_median']:.0f} series/s over the held-out windows "
                     f"({rng(s['served_series_per_s_range'])}; model for the full history and the backtest origins "
                     f"in batches of {s['batch']}, then combine, median {s['served_combine_ms_median']:.2f} ms a "
                     f"series); {fx.get('served_series_per_s_median', float('nan')):.0f} series/s on {fx['series']} "
                     f"histories of {fx['points']} points ({rng(fx.get('served_series_per_s_range', [0, 0]))})")
    if "served_many_series_per_s_median" in s:
        lines.append(f"- served with ensemble.combine_many (all series' classical fits in one pass; the service "
                     f"calls combine per request): {s['served_many_series_per_s_median']:.0f} series/s over the "
                     f"held-out windows, {fx['served_many_series_per_s_median']:.0f} on the {fx['points']}-point set")
    lines += [f"- primary: {s['primary_series_per_s_median']:.0f} series/s over the held-out windows "
              f"({rng(s['primary_series_per_s_range'])}; prepare + ORT + unscale), ORT alone "
              f"{s['ort_only_series_per_s_median']:.0f}; {fx['primary_series_per_s_median']:.0f} series/s on the "
              f"{fx['points']}-point set ({rng(fx['primary_series_per_s_range'])})",
              f"- the {fx['points']}-point set: {fx['series']} windows cut from the held-out series at least that "
              f"long, by frequency {fx['frequencies']}", "",
              "Cost per series (ms; statsforecast: median of its per-series times; batched methods: wall / series): "
              + ", ".join(f"{m} {c:.3g}" for m, c in report["cost_ms_per_series"].items())]
    tb = report.get("textbook")
    if tb:
        tm = [m for m in TEXTBOOK_METHODS if m in tb["summary"]]
        lines += ["", "Textbook set (scripts/forecast/textbook.py): ✓/✗ = the case's check, then its error measure "
                      "(exact_relative: max error / the case's reference magnitude; level: max |median - level| / "
                      "sigma; intermittent: relative error of the mean demand); 'vs best' = served within 1.5x the "
                      "MASE of the better of AutoETS/AutoTheta (or its mean error within 2 % of the level):", "",
                  "| case | points | tolerance | " + " | ".join(tm) + " | better sf | served vs best |",
                  "|---|---|---|" + "---|" * len(tm) + "---|---|"]
        for r in tb["cases"]:
            sv = (r["methods"].get("served") or {}).get("within_sf_best")
            lines.append(f"| {r['name']} | {r['points']} | {r['tolerance']:g} | "
                         + " | ".join(_cell(r["methods"].get(m)) for m in tm)
                         + f" | {r['sf_best'] or '-'} | {'-' if sv is None else ('✓' if sv else '✗')} |")
        lines += ["", "| method | passed | within 1.5x of the better sf |", "|---|---|---|"]
        for m in tm:
            v = tb["summary"][m]
            within = f"{v['within_sf_best']}/{v['compared']}" if "compared" in v else "-"
            lines.append(f"| {m} | {v['passed']}/{v['cases']} | {within} |")
    e2e = report.get("end_to_end")
    if e2e:
        lines += ["", f"End to end (REST /v1/forecast on a real `bentoml serve` of the registry, one held-out series "
                      f"per request with timestamps, frequency inferred, {e2e['requests_per_level']} requests per "
                      f"level, closed loop; series/s and latencies count the primary's answers only, fallback "
                      f"answers apart):", "",
                  "| concurrency | series/s | p50 ms | p99 ms | primary / sent | degraded | errors |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {c} | {v['series_per_s']} | {v['p50_ms']} | {v['p99_ms']} | {v['ok']} / {v['sent']} | "
                  f"{v.get('degraded', '-')} | {v.get('errors', '-')} |" for c, v in e2e["levels"].items()]
    lines += ["", "Goals:", ""]
    for g, v in report["goals"].items():
        lines.append(f"- {g}: {'met' if v['met'] else 'MISSED'} ({json.dumps(v['value'], default=_json_num)})")
    tr = (report.get("training") or {}).get("training")
    if tr:
        lines += ["", f"Training: {tr['steps']} steps, {tr['seconds']} s on one core "
                      f"({tr['windows_seen']} windows); {report['training']['parameters']} parameters."]
    elif report.get("training"):
        lines += ["", f"Model: {report['training']['registry']}: {report['training']['source']}."]
    return "\n".join(lines) + "\n"


def _json_num(v):
    return round(float(v), 4) if isinstance(v, float | np.floating) else str(v)


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

    from triserve.families.forecast.features import FREQUENCIES

    t = report["table"]
    methods = [m for m in METHODS if m in t]
    cols = [f for f in (*FREQUENCIES, "overall") if f in t["seasonal_naive"]]
    fig, axes = plt.subplots(3, 1, figsize=(13, 11))
    w = 0.8 / len(methods)
    x = np.arange(len(cols))
    for k, m in enumerate(methods):
        for ax, key in zip(axes, ("gmean_mase_ratio", "cov90", "cov50")):
            ax.bar(x + k * w, [t[m].get(f, {}).get(key, np.nan) for f in cols], w, label=m)
    axes[0].axhline(1.0, color="k", lw=0.8)
    axes[0].axhline(GOALS["served_gmean_mase_ratio_overall_max"], color="g", lw=0.8, ls="--")
    axes[0].set_ylabel("gmean MASE / seasonal naive")
    axes[1].axhspan(*GOALS["coverage90_range"], color="g", alpha=0.15)
    axes[1].set_ylabel("90% interval coverage")
    axes[2].axhspan(*GOALS["coverage50_range"], color="g", alpha=0.15)
    axes[2].set_ylabel("50% interval coverage")
    for ax in axes:
        ax.set_xticks(x + 0.4 - w / 2)
        ax.set_xticklabels(cols)
    axes[0].legend(ncol=len(methods), fontsize=8)
    axes[0].set_title("Held-out series, last window per series (goal bands in green)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
