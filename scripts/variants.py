"""Precision variants of the stable primaries: built from the registry, measured like their base, gated, published.

    python -m scripts.variants build      # all tasks, models/store -> docs/bench/quantization.{json,md}
    python -m scripts.variants build --tasks forecast --profile tiny --registry /tmp/reg --out /tmp/q --cache /tmp/c

For each task the `stable` primary (manifest + model.onnx, sha256-verified by LocalRegistry) is the base:

  detection  yolo-shapes-int8-qdq     static INT8, QDQ format, per-channel weights, calibrated on letterboxed TRAIN
                                      images of the model's own generated set; the Detect head's decode (DFL softmax,
                                      anchor arithmetic, final sigmoid and Concat) stays FP32, because one per-tensor
                                      scale over pixel boxes and [0, 1] scores would erase the scores
             yolo-shapes-int8-qdq-all the same with the decode quantised too: the evidence for that exclusion
             yolo-shapes-fp16         FP16 weights and activations, FP32 graph IO
  text       minilm-intent-int8       the existing fallback (MatMul-only per-channel dynamic INT8, built by
                                      scripts/text/build.py): measured and gated here, not rebuilt or republished
             minilm-intent-fp16
  forecast   forecast-global-int8-qdq static INT8 QDQ, per-channel weights, calibrated on training series' contexts
             forecast-global-fp16

Each variant is scored with the same metric code as its base's build (detection mAP50 on the test split via
families/detection/importers/evaluate.py; text top-1 agreement with the FP32 primary on the builder's evaluation
utterances; forecast held-out gmean MASE ratio and 90 % coverage as in scripts/forecast/build.py), and the base is
re-scored in the same run. CPU speed: in-process ONNX Runtime, the same thread count for every graph, base and
variants timed interleaved (rotating order) at batch 1 and batch N, median [min-max] of `repeats` samples after a
warm-up. FP16 is a GPU format: its CPU time is recorded but is not a target. INT8 is judged as a CPU format and must
also be faster than FP32 on CPU at batch N.

Promotion: every variant this script produces is published under its own model name at version
`<base version>-<8 hex of the variant recipe hash>` (hash over the base file's sha256, the method, the gates, the
profile and this code), so a re-run is a cache hit and never collides. It gets alias `stable` only when every gate
passes. A refused variant is still published, WITHOUT alias, with its failed gates in the manifest: the refusal and its
numbers stay auditable and the next run is cached rather than re-measured. Manifests keep the base's preprocessing
contract; variant="primary" (a drop-in for the primary slot: same IO, same preprocessing), precision and base in
source.recipe; parity is empty (the schema reserves it for FP32 checks), the comparison with the base is in metrics.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from scripts.common import (
    PROJECT_ROOT,
    data_fingerprint,
    git_commit,
    ort_session,
    package_versions,
    source_digest,
    stable_hash,
)
from triserve.families.detection.importers.quantize import detect_decode_nodes
from triserve.families.detection.manifest import DetectionPreprocess
from triserve.families.forecast.manifest import ForecastPreprocess
from triserve.families.text.manifest import TextPreprocess
from triserve.models.importing.graphs import io_specs, opset_of, quantize_qdq, time_interleaved
from triserve.models.manifest import Manifest, Source, TensorSpec, preprocess_as, utcnow
from triserve.models.registry import LocalRegistry

log = logging.getLogger("triserve.variants")

TASKS = ("detection", "text", "forecast")
BASES = {"detection": "yolo-shapes", "text": "minilm-intent", "forecast": "forecast-global"}
DEFAULT_OUT = PROJECT_ROOT / "docs" / "bench" / "quantization"
DEFAULT_CACHE = PROJECT_ROOT / ".cache" / "variants"
PIPELINE_CACHE = PROJECT_ROOT / ".cache" / "pipeline"  # where the builders keep generated datasets
GPU_NOTE = "not a target (GPU format; no GPU lent)"


@dataclass(frozen=True)
class Gates:
    """Promotion thresholds; a variant gets `stable` only when all of them hold (plus the sanity checks)."""

    # detection: the lite fallback may lose 0.15 mAP50 for 2x speed; a same-graph precision swap must be near-free
    max_map50_drop: float = 0.02
    # text: the bar scripts/text/build.py already sets for its INT8 fallback against the primary
    min_text_agreement: float = 0.99
    # forecast: relative increase of the held-out MASE ratio; beyond ~5 % the lead over seasonal naive erodes
    max_mase_increase: float = 0.05
    # forecast: the variant's own quantiles must still cover about as often
    max_coverage_drop: float = 0.05
    # INT8 is the CPU format here: slower than FP32 on CPU at batch N (median, interleaved) means it buys nothing.
    # FP16 has no speed gate: it is a GPU format and no GPU was lent to measure it.
    min_int8_cpu_speedup: float = 1.0
    # all tasks (always on): outputs finite, output shapes and graph IO (names, dtypes, dims) identical to the base


GATES = Gates()


@dataclass(frozen=True)
class Profile:
    """How much data and time a run spends; `tiny` is for tests on tiny registries."""

    calibration: int  # calibration samples (images / windows) for static INT8
    text_eval: int | None  # evaluation utterances; None: the text builder's n_eval
    warmup: int  # untimed calls per graph and batch before timing
    repeats: int  # timed samples per graph and batch (median [min-max] reported)
    min_sample_ms: float  # a timed sample repeats the call until it lasts about this long (short calls are noisy)
    batch: Mapping[str, int]  # the "large" batch per task


PROFILES: dict[str, Profile] = {
    "default": Profile(calibration=160, text_eval=None, warmup=3, repeats=11, min_sample_ms=20.0,
                       batch={"detection": 8, "text": 32, "forecast": 32}),
    "tiny": Profile(calibration=24, text_eval=48, warmup=1, repeats=5, min_sample_ms=2.0,
                    batch={"detection": 2, "text": 8, "forecast": 8}),
}


@dataclass(frozen=True)
class VariantSpec:
    """One variant of a task's base: how it is made (part of its recipe hash)."""

    suffix: str  # model name = <base>-<suffix>
    precision: str  # int8-qdq | int8-dynamic | fp16
    method: dict = field(default_factory=dict)
    existing: str | None = None  # an already published model measured as this variant (not rebuilt)

    @property
    def gpu_format(self) -> bool:
        return self.precision == "fp16"


_QDQ = {"tool": "onnxruntime.quantization.quantize_static", "format": "QDQ", "per_channel": True,
        "activation_type": "QUInt8", "weight_type": "QInt8", "calibrate_method": "MinMax",
        "pre_process": "quant_pre_process(skip_symbolic_shape=True)"}
_FP16 = {"tool": "onnxruntime.transformers.float16.convert_float_to_float16", "keep_io_types": True}

SPECS: dict[str, tuple[VariantSpec, ...]] = {
    "detection": (VariantSpec("int8-qdq", "int8-qdq", {**_QDQ, "calibration": "letterboxed train images",
                                                       "fp32_nodes": "Detect head decode (see detect_decode_nodes)"}),
                  # kept as evidence for the exclusion above: the gate refuses it (published without alias)
                  VariantSpec("int8-qdq-all", "int8-qdq", {**_QDQ, "calibration": "letterboxed train images",
                                                           "fp32_nodes": "none"}),
                  VariantSpec("fp16", "fp16", dict(_FP16))),
    "text": (VariantSpec("int8", "int8-dynamic", {"tool": "scripts/text/build.py quantize_fallback"},
                         existing="minilm-intent-int8"),
             VariantSpec("fp16", "fp16", dict(_FP16))),
    "forecast": (VariantSpec("int8-qdq", "int8-qdq", {**_QDQ, "calibration": "training series' scaled contexts"}),
                 VariantSpec("fp16", "fp16", dict(_FP16))),
}


# -- graph transforms -------------------------------------------------------------------------------------------------
def convert_fp16(src: Path, dst: Path) -> dict:
    """FP16 weights and activations with FP32 inputs/outputs (the service keeps sending float32)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16
    from onnxruntime.transformers.onnx_model import OnnxModel

    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    OnnxModel(model).topological_sort()  # the converter appends its IO casts at the end of the node list
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return {}


def graph_facts(path: Path) -> dict[str, float]:
    """Counts that show what a variant is: Q/DQ nodes, FP16 and FP32 initializers."""
    import onnx

    model = onnx.load(str(path))
    ops = [n.op_type for n in model.graph.node]
    types = [t.data_type for t in model.graph.initializer]
    return {"quantize_linear_nodes": float(ops.count("QuantizeLinear")),
            "dequantize_linear_nodes": float(ops.count("DequantizeLinear")),
            "fp16_initializers": float(types.count(onnx.TensorProto.FLOAT16)),
            "fp32_initializers": float(types.count(onnx.TensorProto.FLOAT))}


# -- measurement ------------------------------------------------------------------------------------------------------
@dataclass
class Evaluation:
    """What one graph scored on the task's held-out data."""

    metrics: dict[str, float]
    outputs: np.ndarray | None = None  # what a variant is compared with the base on (text probabilities)
    reference: dict = field(default_factory=dict)  # drift references for the manifest
    extra: dict = field(default_factory=dict)  # task specifics for the manifest (forecast interval quantiles)


def sanity(base: Path, variant: Path, feeds: Mapping[str, dict[str, np.ndarray]], threads: int,
           base_inputs: list[TensorSpec], base_outputs: list[TensorSpec],
           parts: Mapping[str, slice] | None = None) -> tuple[dict[str, float], list[str]]:
    """Outputs finite and shaped like the base's on the same feeds; graph IO identical to the base manifest.

    Also the max abs difference from the base, overall and per slice of the first output's axis 1 (`parts`, e.g.
    detection boxes in pixels vs class scores in [0, 1]).
    """
    problems: list[str] = []
    inputs, outputs = io_specs(variant)
    if inputs != base_inputs or outputs != base_outputs:
        problems.append(f"graph IO differs from the base: {[t.model_dump() for t in inputs + outputs]}")
    a, b = ort_session(base, threads), ort_session(variant, threads)
    diffs = {"max_abs_diff_vs_base": 0.0, **{f"{k}_max_abs_diff_vs_base": 0.0 for k in parts or {}}}
    for key, feed in feeds.items():
        ya, yb = a.run(None, feed), b.run(None, feed)
        for i, (u, v) in enumerate(zip(ya, yb)):
            if u.shape != v.shape:
                problems.append(f"{key} output {i}: shape {v.shape} != base {u.shape}")
            elif not np.all(np.isfinite(v)):
                problems.append(f"{key} output {i}: {int(np.sum(~np.isfinite(v)))} non-finite values")
            else:
                d = np.abs(u.astype(np.float64) - v.astype(np.float64))
                diffs["max_abs_diff_vs_base"] = max(diffs["max_abs_diff_vs_base"], float(d.max()))
                if i == 0 and parts:
                    for k, sl in parts.items():
                        name = f"{k}_max_abs_diff_vs_base"
                        diffs[name] = max(diffs[name], float(d[:, sl].max()))
    return diffs, problems


# -- tasks ------------------------------------------------------------------------------------------------------------
class Task:
    """The base model of one task and everything needed to make, score and describe its variants."""

    name: str
    metric: str  # the headline metric key in Evaluation.metrics / the comparison
    metric_label: str
    # slices of output 0 (axis 1) whose differences from the base are reported apart
    output_parts: ClassVar[Mapping[str, slice] | None] = None

    def __init__(self, registry: LocalRegistry, profile: Profile, threads: int):
        self.registry, self.profile, self.threads = registry, profile, threads
        self.base_name = BASES[self.name]
        self.base_version = registry.resolve(self.base_name, "stable")
        self.base_dir, self.base = registry.load_verified(self.base_name, self.base_version)
        self.base_path = self.base_dir / self.base.model_file
        self.recipe = dict(self.base.source.recipe)
        self.warnings: list[str] = []  # surprises worth a line in the report

    # hooks ------------------------------------------------------------------------------------------------------
    def calibration(self, n: int) -> list[dict[str, np.ndarray]]:
        raise NotImplementedError

    def evaluate(self, path: Path, tokenizer_file: Path | None = None, max_length: int | None = None) -> Evaluation:
        raise NotImplementedError

    def speed_feeds(self) -> dict[str, dict[str, np.ndarray]]:
        raise NotImplementedError

    def compare(self, base: Evaluation, variant: Evaluation, gates: Gates) -> tuple[dict[str, float],
                                                                                    dict[str, bool], list[str]]:
        """(comparison metrics incl. '<metric>_base' and '<metric>_delta', gate outcomes, refusal reasons)."""
        raise NotImplementedError

    def summary(self, base: Evaluation) -> str:
        """The base's own score for the table's base row."""
        return f"{self.metric_label} {base.metrics[self.metric]:.4f}"

    def preprocess_for(self, variant: Evaluation):
        return self.base.preprocess

    def extra_files(self) -> list[str]:
        return [f.path for f in self.base.files if f.path != self.base.model_file]

    # shared -----------------------------------------------------------------------------------------------------
    def make(self, spec: VariantSpec, dst: Path, work: Path) -> tuple[dict, list[np.ndarray]]:
        """Produce the variant graph at dst; returns (method facts, calibration arrays for the data fingerprint)."""
        if spec.precision == "fp16":
            return convert_fp16(self.base_path, dst), []
        if spec.precision == "int8-qdq":
            feeds = self.calibration(self.profile.calibration)
            exclude = self.name == "detection" and spec.method.get("fp32_nodes") != "none"
            facts = quantize_qdq(self.base_path, dst, feeds, work, detect_decode_nodes if exclude else None)
            return facts, [a for f in feeds for a in f.values()]
        raise ValueError(f"{self.name}: no recipe for precision {spec.precision}")


def _evenly(items: list, n: int) -> list:
    """n items spread over the whole list (deterministic), all of them when there are fewer."""
    if len(items) <= n:
        return list(items)
    return [items[int(i)] for i in np.linspace(0, len(items) - 1, n).round().astype(int)]


class DetectionTask(Task):
    name, metric, metric_label = "detection", "map50", "mAP50 (test)"
    output_parts: ClassVar[Mapping[str, slice]] = {"boxes_px": slice(0, 4), "scores": slice(4, None)}

    def __init__(self, registry: LocalRegistry, profile: Profile, threads: int, data_cache: Path = PIPELINE_CACHE):
        super().__init__(registry, profile, threads)
        from scripts.detection.build import labelled_split
        from scripts.detection.dataset import ShapesSpec, generate

        r = self.recipe
        spec = ShapesSpec(seed=r["seed"], n_train=r["n_train"], n_val=r["n_val"], n_test=r["n_test"],
                          image_size=r["image_size"], max_objects=r["max_objects"])
        # the pipeline's own dataset location: generated once, reused by the builder and here
        self.dataset = generate(data_cache / "detection" / "datasets" / stable_hash(spec.key())[:16], spec,
                                show_progress=False)
        if data_fingerprint(*self.dataset.files()) != self.base.data_fingerprint:
            self.warnings.append(f"{self.base_name}: the regenerated shapes set does not match the manifest's data "
                                 f"fingerprint (calibration and test images differ from the model's own)")
        self.test = labelled_split(self.dataset, "test")
        self.imgsz = int(preprocess_as(self.base, DetectionPreprocess).imgsz)

    def calibration(self, n: int) -> list[dict[str, np.ndarray]]:
        """Letterboxed TRAIN images (never the test split the gate scores), one per calibration step."""
        from triserve.families.vision.letterbox import preprocess_image
        from triserve.models.importing.photos import read_rgb

        name = self.base.inputs[0].name
        return [{name: preprocess_image(read_rgb(p), self.imgsz)[0][None]}
                for p in _evenly(self.dataset.images("train"), n)]

    def evaluate(self, path: Path, tokenizer_file: Path | None = None, max_length: int | None = None) -> Evaluation:
        # the builder's own evaluation settings and drift references (same code path as the base's mAP)
        from scripts.detection.build import eval_nms_params
        from triserve.families.detection.importers.evaluate import evaluate, reference_distribution

        res = evaluate(ort_session(path, self.threads), self.test, self.imgsz, eval_nms=eval_nms_params(self.recipe),
                       progress=False)
        return Evaluation({"map50": res.map50, "map50_95": res.map50_95}, reference=reference_distribution(res))

    def speed_feeds(self) -> dict[str, dict[str, np.ndarray]]:
        from triserve.families.detection.importers.export import parity_images

        name, n = self.base.inputs[0].name, self.profile.batch[self.name]
        return {"b1": {name: parity_images(1, self.imgsz, self.imgsz)},
                f"b{n}": {name: parity_images(n, self.imgsz, self.imgsz)}}

    def compare(self, base: Evaluation, variant: Evaluation, gates: Gates):
        drop = base.metrics["map50"] - variant.metrics["map50"]
        cmp = {"map50_base": base.metrics["map50"], "map50_95_base": base.metrics["map50_95"],
               "map50_delta": -drop, "map50_95_delta": variant.metrics["map50_95"] - base.metrics["map50_95"]}
        ok = {"map50_drop": drop <= gates.max_map50_drop}
        why = [] if ok["map50_drop"] else [f"mAP50 drop {drop:.4f} > {gates.max_map50_drop}"]
        return cmp, ok, why


class TextTask(Task):
    name, metric, metric_label = "text", "agreement_vs_primary", "top-1 agreement with FP32 primary"

    def __init__(self, registry: LocalRegistry, profile: Profile, threads: int, data_cache: Path = PIPELINE_CACHE):
        super().__init__(registry, profile, threads)
        from scripts.text.build import RECIPES
        from triserve.families.text.importers.utterances import evaluation_utterances

        n = profile.text_eval or int(self.recipe.get("n_eval", RECIPES["default"]["n_eval"]))
        seed = self.base.source.seed if self.base.source.seed is not None else 0
        self.texts = evaluation_utterances(n, seed=int(seed))
        self.pre = preprocess_as(self.base, TextPreprocess)
        self.tokenizer_file = self.base_dir / self.pre.tokenizer_file
        self.eval_batch = int(self.recipe.get("eval_batch", RECIPES["default"]["eval_batch"]))

    def evaluate(self, path: Path, tokenizer_file: Path | None = None, max_length: int | None = None) -> Evaluation:
        """Probabilities through the serving tokenizer (the base's unless given), pad-to-longest batches."""
        from scripts.text.build import predict
        from triserve.families.text.importers.finish import top1_references
        from triserve.families.text.preprocess import TextTokenizer

        tok = TextTokenizer(tokenizer_file or self.tokenizer_file, max_length or self.pre.max_length)
        probs = predict(ort_session(path, self.threads), tok, self.texts, self.eval_batch, f"text eval {path.name}")
        return Evaluation({"n_eval": float(len(self.texts))}, outputs=probs,
                          reference=top1_references(probs, len(self.base.labels)))

    def summary(self, base: Evaluation) -> str:
        skl = self.base.metrics.get("sklearn_agreement")
        return (f"reference for agreement ({len(self.texts)} utterances)"
                + (f"; agrees with the package's sklearn pipeline {skl:.4f} (manifest)" if skl is not None else ""))

    def speed_feeds(self) -> dict[str, dict[str, np.ndarray]]:
        """A median-length utterance alone, and the first N utterances padded to their longest."""
        from triserve.families.text.preprocess import TextTokenizer

        tok = TextTokenizer(self.tokenizer_file, self.pre.max_length)
        n = self.profile.batch[self.name]
        lengths = [len(ids) for ids in tok.encode(self.texts)]
        median_text = self.texts[int(np.argsort(lengths)[len(lengths) // 2])]
        feeds = {}
        for key, texts in (("b1", [median_text]), (f"b{n}", self.texts[:n])):
            ids, mask = tok.encode_padded(texts)
            feeds[key] = {"input_ids": ids, "attention_mask": mask}
        return feeds

    def compare(self, base: Evaluation, variant: Evaluation, gates: Gates):
        assert base.outputs is not None and variant.outputs is not None, "evaluate() keeps the probabilities"
        top_b, top_v = base.outputs.argmax(1), variant.outputs.argmax(1)
        agreement = float((top_b == top_v).mean())
        cmp = {"agreement_vs_primary": agreement, "agreement_vs_primary_base": 1.0,
               "agreement_vs_primary_delta": agreement - 1.0,
               "max_prob_abs_diff_vs_primary": float(np.abs(base.outputs - variant.outputs).max())}
        ok = {"agreement_vs_primary": agreement >= gates.min_text_agreement}
        why = [] if ok["agreement_vs_primary"] else [f"top-1 agreement {agreement:.4f} < {gates.min_text_agreement}"]
        return cmp, ok, why


class ForecastTask(Task):
    name, metric, metric_label = "forecast", "mase_ratio", "gmean MASE ratio vs seasonal naive (held-out series)"

    def __init__(self, registry: LocalRegistry, profile: Profile, threads: int, data_cache: Path = PIPELINE_CACHE):
        super().__init__(registry, profile, threads)
        from scripts.forecast.build import load_corpus
        from scripts.forecast.corpus import corpus_fingerprint, last_window, split_corpus

        self.pre = preprocess_as(self.base, ForecastPreprocess)
        r = self.recipe
        corpus = load_corpus(r)
        if corpus_fingerprint(corpus) != self.base.data_fingerprint:
            self.warnings.append(f"{self.base_name}: the corpus differs from the one the model was built on")
        split = split_corpus(corpus, r["heldout_fraction"], r["split_seed"])
        self.heldout = split.heldout
        # two contexts per training series (its last window's history and the first half of it): the calibration
        # pool outnumbers the calibration samples even on the test-size corpus
        histories = [(s, h) for s in split.train for h in (last_window(s)[0], last_window(s)[0][: len(s) // 2])]
        self.train_items = [self._item(s, h) for s, h in histories if len(h) >= self.pre.min_history]
        self.input_names = [i.name for i in self.base.inputs]
        self.output_name = self.base.outputs[0].name

    def _item(self, series, history):
        from triserve.families.forecast.preprocess import model_item

        return model_item(self.pre, history, series.frequency, series.next_timestamp(len(history))).x

    def _feeds(self, items) -> dict[str, np.ndarray]:
        from triserve import families

        return families.runtime("forecast").feeds(self.base, self.input_names, list(items))

    def calibration(self, n: int) -> list[dict[str, np.ndarray]]:
        """Training series' last contexts as the model reads them (scaled, masked), one per calibration step."""
        return [self._feeds([self.train_items[i]]) for i in _evenly(list(range(len(self.train_items))), n)]

    def evaluate(self, path: Path, tokenizer_file: Path | None = None, max_length: int | None = None) -> Evaluation:
        """scripts/forecast/build.py's held-out metrics through the serving path; outputs: scaled quantiles."""
        from scripts.forecast.build import Served, evaluate
        from scripts.forecast.corpus import last_window

        sess = ort_session(path, self.threads)
        metrics = evaluate(Served(self.base, sess, self.input_names), self.heldout)
        items = [self._item(s, last_window(s)[0]) for s in self.heldout]
        outputs = np.concatenate([sess.run([self.output_name], self._feeds(items[i: i + 512]))[0]
                                  for i in range(0, len(items), 512)])
        return Evaluation(metrics, outputs=outputs, reference=dict(self.base.reference))

    def speed_feeds(self) -> dict[str, dict[str, np.ndarray]]:
        n = self.profile.batch[self.name]
        return {"b1": self._feeds(self.train_items[:1]),
                f"b{n}": self._feeds([self.train_items[i % len(self.train_items)] for i in range(n)])}

    def compare(self, base: Evaluation, variant: Evaluation, gates: Gates):
        assert base.outputs is not None and variant.outputs is not None, "evaluate() keeps the scaled quantiles"
        b, v = base.metrics, variant.metrics
        rel = v["mase_ratio"] / b["mase_ratio"] - 1.0
        cmp = {"mase_ratio_base": b["mase_ratio"], "mase_ratio_delta": v["mase_ratio"] - b["mase_ratio"],
               "mase_ratio_relative_increase": rel, "coverage90_base": b["coverage90"],
               "coverage90_delta": v["coverage90"] - b["coverage90"],
               "max_abs_diff_scaled_vs_base": float(np.abs(base.outputs - variant.outputs).max())}
        ok = {"mase_increase": rel <= gates.max_mase_increase,
              "interval_coverage": b["coverage90"] - v["coverage90"] <= gates.max_coverage_drop}
        if b["mase_ratio"] < 1.0:  # "still beats seasonal naive": only meaningful when the base does
            ok["beats_seasonal_naive"] = v["mase_ratio"] < 1.0
        why = []
        if not ok["mase_increase"]:
            why.append(f"MASE ratio {b['mase_ratio']:.4f} -> {v['mase_ratio']:.4f} ({100 * rel:+.2f} % > "
                       f"{100 * gates.max_mase_increase:+g} %)")
        if not ok["interval_coverage"]:
            why.append(f"90 % coverage {b['coverage90']:.3f} -> {v['coverage90']:.3f}")
        if not ok.get("beats_seasonal_naive", True):
            why.append(f"MASE ratio {v['mase_ratio']:.4f} no longer beats seasonal naive")
        return cmp, ok, why

    def summary(self, base: Evaluation) -> str:
        m = base.metrics
        return f"{self.metric_label} {m['mase_ratio']:.4f}; cov90 {m['coverage90']:.3f}"

    def preprocess_for(self, variant: Evaluation):
        """The variant reads and answers exactly like its base (quantiles are model outputs, not residuals)."""
        return self.base.preprocess


# name -> Task(registry, profile, threads, data_cache)
TASK_CLASSES: dict[str, Callable[[LocalRegistry, Profile, int, Path], Task]] = {
    "detection": DetectionTask, "text": TextTask, "forecast": ForecastTask}


# -- one task ---------------------------------------------------------------------------------------------------------
def _code_paths(task: str) -> list[Path]:
    paths = [PROJECT_ROOT / "scripts" / "variants.py", PROJECT_ROOT / "scripts" / "common.py",
             PROJECT_ROOT / "models" / "manifest.py", PROJECT_ROOT / "scripts" / task,
             PROJECT_ROOT / "services" / task / "preprocess.py", PROJECT_ROOT / "services" / task / "postprocess.py"]
    return [p for p in paths if p.exists()]


@dataclass(frozen=True)
class Planned:
    """A variant with its registry name and version (derived from the base version and the recipe hash)."""

    spec: VariantSpec
    name: str
    version: str
    recipe: dict = field(default_factory=dict)  # empty for an existing model
    recipe_hash: str = ""


def plan(task: Task, gates: Gates, profile_name: str, code: str) -> list[Planned]:
    out = []
    for spec in SPECS[task.name]:
        if spec.existing:
            out.append(Planned(spec, spec.existing, task.registry.resolve(spec.existing, "stable")))
            continue
        calibration = task.profile.calibration if spec.precision == "int8-qdq" else None
        recipe = {"base": task.base_name, "base_version": task.base_version,
                  "base_sha256": task.base.file(task.base.model_file).sha256, "precision": spec.precision,
                  "method": spec.method, "calibration_samples": calibration, "gates": asdict(gates),
                  "profile": profile_name}
        rhash = stable_hash({"recipe": recipe, "code": code})
        out.append(Planned(spec, f"{task.base_name}-{spec.suffix}", f"{task.base_version}-{rhash[:8]}", recipe, rhash))
    return out


def judge(task: Task, spec: VariantSpec, base: Evaluation, variant: Evaluation, problems: list[str],
          speedup: Mapping[str, float], gates: Gates) -> tuple[dict[str, float], dict[str, bool], list[str]]:
    """(comparison metrics, gate outcomes, refusal reasons): sanity, the task's quality gates, INT8 CPU speed."""
    cmp, ok, why = task.compare(base, variant, gates)
    ok, why = {"sane": not problems, **ok}, list(problems) + why
    if spec.precision.startswith("int8") and speedup:
        n_key = list(speedup)[-1]
        ok["faster_on_cpu"] = speedup[n_key] >= gates.min_int8_cpu_speedup
        if not ok["faster_on_cpu"]:
            why.append(f"INT8 not faster on CPU at {n_key}: {speedup[n_key]:.2f}x < {gates.min_int8_cpu_speedup:g}x")
    return cmp, ok, why


def _mb(path: Path) -> float:
    return path.stat().st_size / 1e6


def _promote(registry: LocalRegistry, name: str, version: str) -> None:
    if registry.aliases(name).get("stable") != version:
        registry.set_alias(name, "stable", version, by="scripts.variants")


def _manifest(task: Task, p: Planned, ev: Evaluation, metrics: dict[str, float], gates: dict[str, bool],
              facts: dict, calibration: list[np.ndarray], path: Path) -> Manifest:
    """The base's contract (IO, preprocessing, labels) with this variant's numbers, gates and provenance."""
    base, spec = task.base, p.spec
    fingerprint = data_fingerprint(base.data_fingerprint, *calibration) if calibration else base.data_fingerprint
    desc = (f"{spec.precision} variant of {task.base_name}:{task.base_version} (model.onnx sha256 "
            f"{p.recipe['base_sha256'][:12]}) made by scripts/variants.py with {spec.method.get('tool')}"
            + (f"; calibration: {spec.method.get('calibration')} ({facts['calibration_samples']})"
               if facts.get("calibration_samples") else "")
            + (f"; {facts['excluded_nodes']} Detect-head decode nodes kept FP32" if facts.get("excluded_nodes")
               else ""))
    return Manifest(
        name=p.name, version=p.version, task=base.task, variant="primary", fallback_for=None, model_file="model.onnx",
        files=[], opset=opset_of(path), inputs=base.inputs, outputs=base.outputs, preprocess=task.preprocess_for(ev),
        labels=base.labels,
        source=Source(kind="recipe", description=desc, packages=package_versions("onnx", "onnxruntime"),
                      license=base.source.license, url=base.source.url,
                      recipe={**p.recipe, "facts": facts}, seed=base.source.seed),
        data_fingerprint=fingerprint, metrics={k: float(v) for k, v in metrics.items()}, parity=[], gates=gates,
        reference=ev.reference or base.reference, recipe_hash=p.recipe_hash, created_at=utcnow(),
        git_commit=git_commit())


def _rounded(speed: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    return {k: {s: round(v[s], 4) for s in ("median", "min", "max")} for k, v in speed.items()}


def run_task(task_name: str, registry: LocalRegistry, profile_name: str = "default", gates: Gates = GATES,
             threads: int = 1, cache_dir: Path = DEFAULT_CACHE, data_cache: Path = PIPELINE_CACHE,
             promote: bool = True, force: bool = False) -> dict:
    """Make, measure, gate and publish one task's variants; returns {"base": {...}, "rows": [...]} for the report.

    Cached as a whole: when every planned version is in the registry and this exact run (plan, profile, threads,
    gates, code) was measured before, its result is reused. A version already in the registry is measured from
    the registry's file and never republished.
    """
    started = time.monotonic()
    profile = PROFILES[profile_name]
    task = TASK_CLASSES[task_name](registry, profile, threads, data_cache)
    code = source_digest(_code_paths(task_name))
    planned = plan(task, gates, profile_name, code)
    key = stable_hash({"plan": [(p.name, p.version) for p in planned], "profile": asdict(profile),
                       "threads": threads, "gates": asdict(gates), "code": code})
    cache_file = Path(cache_dir) / "runs" / f"{task_name}-{key[:16]}.json"
    if not force and cache_file.is_file() and all(registry.has(p.name, p.version) for p in planned):
        result = json.loads(cache_file.read_text())
        for row in result["rows"]:
            if promote and row["verdict"] == "pass" and row["published"]:
                _promote(registry, row["variant"], row["version"])
            row["status"] = "cached"
            row["stable_now"] = registry.aliases(row["variant"]).get("stable")
        log.info("%s: cached (%s)", task_name, cache_file.name)
        return result

    work = Path(tempfile.mkdtemp(prefix=f"triserve-variants-{task_name}-"))
    try:
        # 1. make what the registry does not hold yet
        paths: dict[str, Path] = {"base": task.base_path}
        made: dict[str, dict] = {}
        for p in planned:
            if p.spec.existing or registry.has(p.name, p.version):
                paths[p.name] = registry.path(p.name, p.version) / "model.onnx"
                made[p.name] = {"status": "existing model" if p.spec.existing else "published earlier",
                                "facts": {}, "calibration": []}
                fb = registry.manifest(p.name, p.version)
                if p.spec.existing and (fb.fallback_for != task.base_name or p.version != task.base_version):
                    task.warnings.append(f"{p.name}:{p.version} is not the fallback built with "
                                         f"{task.base_name}:{task.base_version}")
                continue
            dst = work / p.name / "model.onnx"
            dst.parent.mkdir(parents=True)
            t0 = time.monotonic()
            facts, calibration = task.make(p.spec, dst, work / f"{p.name}-scratch")
            log.info("%s: made %s in %.1fs %s", task_name, p.name, time.monotonic() - t0, facts)
            paths[p.name] = dst
            made[p.name] = {"status": "built", "facts": facts, "calibration": calibration}

        # 2. score every graph (base included) with the builder's metric code, then sanity and interleaved timing
        t0 = time.monotonic()
        evals = {label: task.evaluate(path) for label, path in paths.items()}
        served: dict[str, Evaluation] = {}
        for p in planned:  # an existing text model is also scored through its own served tokenizer
            if p.spec.existing and task_name == "text":
                pre = preprocess_as(registry.manifest(p.name, p.version), TextPreprocess)
                served[p.name] = task.evaluate(paths[p.name], paths[p.name].parent / pre.tokenizer_file,
                                               pre.max_length)
        log.info("%s: evaluated %d graphs in %.1fs", task_name, len(paths) + len(served), time.monotonic() - t0)
        feeds = task.speed_feeds()
        checks = {p.name: sanity(task.base_path, paths[p.name], feeds, threads, task.base.inputs, task.base.outputs,
                                 task.output_parts) for p in planned}
        t0 = time.monotonic()
        speed = time_interleaved(paths, feeds, threads, profile.warmup, profile.repeats, profile.min_sample_ms)
        log.info("%s: timed %d graphs x %s in %.1fs", task_name, len(paths), list(feeds), time.monotonic() - t0)

        # 3. judge, publish, promote
        rows = [_finish(task, p, paths[p.name], evals["base"], evals[p.name], served.get(p.name), checks[p.name],
                        speed, made[p.name], gates, promote) for p in planned]
        base_row = {"task": task_name, "variant": task.base_name, "version": task.base_version, "precision": "fp32",
                    "size_mb": round(_mb(task.base_path), 3), "speed": _rounded(speed["base"]),
                    "metrics": evals["base"].metrics, "summary": task.summary(evals["base"]),
                    "manifest_metrics": {k: v for k, v in task.base.metrics.items() if k in evals["base"].metrics}}
        for w in task.warnings:
            log.warning("%s: %s", task_name, w)
        result = {"task": task_name, "base": base_row, "batches": list(feeds), "rows": rows, "warnings": task.warnings,
                  "seconds": round(time.monotonic() - started, 1), "measured_at": utcnow().isoformat()}
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        cache_file.write_text(json.dumps(result, indent=2, default=float))
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _finish(task: Task, p: Planned, path: Path, base_ev: Evaluation, ev: Evaluation, served: Evaluation | None,
            check: tuple[dict[str, float], list[str]], speed: dict, made: dict, gates: Gates, promote: bool) -> dict:
    """Judge one variant, publish it if it is new, move `stable` if it passed; returns its report row."""
    sane, problems = check
    speedup = {k: speed["base"][k]["median"] / speed[p.name][k]["median"] for k in speed["base"]}
    cmp, ok, why = judge(task, p.spec, base_ev, ev, problems, speedup, gates)
    verdict = "pass" if all(ok.values()) else "refused"
    metrics = {**ev.metrics, **cmp, **sane, **graph_facts(path), "size_mb": _mb(path),
               "size_ratio_vs_base": _mb(path) / _mb(task.base_path)}
    for k, ratio in speedup.items():  # medians only: min/max live in the report
        metrics[f"cpu_ms_{k}"] = speed[p.name][k]["median"]
        metrics[f"base_cpu_ms_{k}"] = speed["base"][k]["median"]
        metrics[f"cpu_speedup_{k}"] = ratio
    if served is not None:
        scmp, _, _ = task.compare(base_ev, served, gates)
        metrics.update({f"served_{k}": v for k, v in scmp.items() if not k.endswith(("_base", "_delta"))})

    published = not p.spec.existing
    if made["status"] == "built":
        manifest = _manifest(task, p, ev, metrics, ok, made["facts"], made["calibration"], path)
        for extra in task.extra_files():  # e.g. tokenizer.json: the base's preprocessing contract travels along
            shutil.copy2(task.base_dir / extra, path.parent / extra)
        task.registry.publish(path.parent, manifest)
        log.info("%s: published %s:%s (%s)", task.name, p.name, p.version, verdict)
    if published and promote and verdict == "pass":
        _promote(task.registry, p.name, p.version)
    if p.spec.existing:
        promoted = "n/a (existing fallback, not republished)"
    else:
        promoted = "yes" if published and promote and verdict == "pass" else "no"
    return {
        "task": task.name, "base": f"{task.base_name}:{task.base_version}", "variant": p.name, "version": p.version,
        "precision": p.spec.precision, "status": made["status"], "published": published,
        "size_mb": round(_mb(path), 3), "speed": _rounded(speed[p.name]),
        "speedup": {k: round(v, 3) for k, v in speedup.items()},
        "speed_note": GPU_NOTE if p.spec.gpu_format else "",
        "metric": {"name": task.metric, "label": task.metric_label, "base": cmp[f"{task.metric}_base"],
                   "variant": ev.metrics.get(task.metric, cmp.get(task.metric)), "delta": cmp[f"{task.metric}_delta"]},
        "metrics": {k: round(v, 6) for k, v in metrics.items() if not k.startswith(("cpu_ms_", "base_cpu_ms_",
                                                                                      "cpu_speedup_"))},
        "gates": ok, "verdict": verdict, "reasons": why, "promoted": promoted,
        "stable_now": task.registry.aliases(p.name).get("stable"), "method": {**p.spec.method, **made["facts"]},
    }


# -- report -----------------------------------------------------------------------------------------------------------
def _ms(s: dict[str, float]) -> str:
    return f"{s['median']:.3g} [{s['min']:.3g}-{s['max']:.3g}]"


def _metric_cell(row: dict) -> str:
    m = row["metric"]
    text = f"{m['base']:.4f} → {m['variant']:.4f} ({m['delta']:+.4f})"
    if row["task"] == "forecast":
        x = row["metrics"]
        text += f"; cov90 {x['coverage90_base']:.3f} → {x['coverage90']:.3f}"
    if "served_agreement_vs_primary" in row["metrics"]:
        text += f"; as served (its own max_length) {row['metrics']['served_agreement_vs_primary']:.4f}"
    return text


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name")) or cpu
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
            "onnxruntime": package_versions("onnxruntime")["onnxruntime"], "python": platform.python_version()}


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [
        "# Precision variants: speed and task-metric deltas",
        "",
        f"Reproduce: `{report['command']}`  ",
        (f"Measured {report['generated_at'][:19]}Z on {m['cpus']} CPUs ({m['cpu']}), load average at start "
         f"{m['load_avg_at_start']}, onnxruntime {m['onnxruntime']}, intra-op threads {report['threads']} for every "
         f"graph, profile `{report['profile']}`. No GPU was lent to this run."),
        "",
        ("CPU ms = milliseconds per ONNX Runtime call (one batch), median [min-max] of "
         f"{PROFILES[report['profile']].repeats} samples after warm-up, base and variants interleaved in one process. "
         "Speedup = base median / variant median. Gates: " + ", ".join(f"{k} {v}" for k, v in report["gates"].items())
         + "; plus sanity (finite outputs, base's output shapes and graph IO)."),
        "",
        ("| task | base | variant | precision | MB | CPU ms b=1 | CPU ms b=N | speedup b=1 / b=N "
         "| task metric base → variant (Δ) | gate | promoted |"),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for t in report["tasks"]:
        b, n_key = t["base"], t["batches"][-1]
        lines.append(f"| {t['task']} | `{b['variant']}` {b['version']} | (the base) | fp32 | {b['size_mb']:.3g} | "
                     f"{_ms(b['speed']['b1'])} | {n_key}: {_ms(b['speed'][n_key])} | 1x | {b['summary']} | - | - |")
        for r in t["rows"]:
            sp = f"{r['speedup']['b1']:.2f}x / {r['speedup'][n_key]:.2f}x"
            if r["speed_note"]:
                sp += f": {r['speed_note']}"
            gate = "pass" if r["verdict"] == "pass" else "refused: " + "; ".join(r["reasons"])
            lines.append(f"| {r['task']} | `{b['variant']}` | `{r['variant']}` {r['version']} | {r['precision']} | "
                         f"{r['size_mb']:.3g} | {_ms(r['speed']['b1'])} | {n_key}: {_ms(r['speed'][n_key])} | {sp} | "
                         f"{r['metric']['label']}: {_metric_cell(r)} | {gate} | {r['promoted']} |")
            if r["status"] in ("cached", "published earlier"):
                notes.append(f"`{r['variant']}` {r['version']}: {r['status']} (measured {t['measured_at'][:19]}Z)")
        notes += [f"warning: {w}" for w in t.get("warnings", [])]
    lines += ["", "Notes:", ""]
    lines += [f"- {n}" for n in [*report["notes"], *notes]]
    return "\n".join(lines) + "\n"


def write_report(out: Path, report: dict) -> tuple[Path, Path]:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    js, md = out.with_suffix(".json"), out.with_suffix(".md")
    js.write_text(json.dumps(report, indent=2, default=float) + "\n")
    md.write_text(markdown(report))
    return js, md


def _notes(results: list[dict]) -> list[str]:
    notes = [
        ("FP16 is a GPU format (CUDA / TensorRT execution providers); ONNX Runtime also runs these graphs on CPU, so "
         "their task metric is measured on the real artifact here, but their CPU time is not a target."),
        ("INT8 is judged as a CPU format: ONNX Runtime runs the QDQ graphs through its quantised CPU kernels, and an "
         "INT8 variant must also be faster than FP32 on CPU at batch N to be promoted."),
        ("Refused variants are published WITHOUT the `stable` alias (their manifest records the failed gates), so the "
         "refusal is auditable and a re-run is cached; promoted ones get `stable` on their own model name only: "
         "serving keeps using the primaries until someone rolls a variant out."),
    ]
    for res in results:
        if res["task"] == "detection":
            notes.append("detection INT8: the Detect head's decode (DFL softmax + conv, anchor arithmetic, final "
                         "sigmoid, the Concat of pixel boxes with [0, 1] scores) stays FP32 in `yolo-shapes-int8-qdq`; "
                         "the per-level conv stacks are INT8. `yolo-shapes-int8-qdq-all` is the same recipe with "
                         "the decode quantised too, kept in the table as the evidence for that exclusion.")
        if res["task"] == "text":
            notes.append("text INT8 is the existing fallback `minilm-intent-int8` (MatMul-only per-channel dynamic "
                         "INT8, scripts/text/build.py): its graph is scored here with the primary's tokenizer "
                         "(max_length 128, so the delta is precision alone) and, as served, with its own "
                         "(max_length 64); it is not rebuilt or republished.")
        if res["task"] == "forecast":
            notes.append("forecast: scored on the held-out series' last windows through the serving path (gmean "
                         "MASE ratio vs seasonal naive, 90 % coverage of the model's own quantiles); 'beats seasonal "
                         "naive' is gated whenever the base beats it.")
    return notes


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m scripts.variants", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="make, measure, gate and publish precision variants of the stable primaries")
    b.add_argument("--registry", type=Path, default=Path(os.environ.get("TRISERVE_REGISTRY_DIR",
                                                                        PROJECT_ROOT / "models" / "store")))
    b.add_argument("--tasks", default=",".join(TASKS), help="comma list of: " + ", ".join(TASKS))
    b.add_argument("--out", type=Path, default=DEFAULT_OUT, help="report path prefix: <out>.json and <out>.md")
    b.add_argument("--profile", default="default", choices=sorted(PROFILES))
    b.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads for every graph")
    b.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="run cache (re-runs are instant)")
    b.add_argument("--data-cache", type=Path, default=PIPELINE_CACHE, help="the pipeline cache (generated data)")
    b.add_argument("--no-promote", action="store_true", help="publish, but never move 'stable'")
    b.add_argument("--force", action="store_true", help="re-measure even when cached (published versions are "
                                                        "reused, never overwritten)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if set(tasks) - set(TASKS):
        ap.error(f"unknown tasks: {sorted(set(tasks) - set(TASKS))}")
    registry = LocalRegistry(args.registry)
    started, mach = time.monotonic(), machine()
    results = [run_task(t, registry, args.profile, GATES, args.threads, args.cache, args.data_cache,
                        promote=not args.no_promote, force=args.force) for t in tasks]
    report = {"command": "python -m scripts.variants " + shlex.join(argv), "generated_at": utcnow().isoformat(),
              "machine": mach, "threads": args.threads, "profile": args.profile, "gates": asdict(GATES),
              "tasks": results, "notes": _notes(results)}
    js, md = write_report(args.out, report)
    print(markdown(report))
    print(f"wrote {js} and {md} in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
