"""Precision variants on a tiny forecaster: QDQ and FP16 graphs, the report, caching, gates and the `stable` alias.

No YOLO training here: the detection-specific piece (which head nodes stay FP32) is checked on a hand-made graph.
"""
import json
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("statsmodels")
pytest.importorskip("onnx")
import onnx
from onnx import TensorProto, numpy_helper

from scripts import variants
from scripts.common import ort_session
from scripts.pipeline import build_task
from triserve.models.registry import LocalRegistry

QDQ, FP16 = "forecast-global-int8-qdq", "forecast-global-fp16"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny forecast-global in a throw-away registry, then the variants CLI on it once."""
    root = tmp_path_factory.mktemp("variants")
    registry = LocalRegistry(root / "registry")
    build_task("forecast", "tiny", registry, root / "pipeline-cache")
    out = root / "report" / "quantization"
    argv = ["build", "--registry", str(registry.root), "--tasks", "forecast", "--profile", "tiny", "--out", str(out),
            "--cache", str(root / "variants-cache")]
    assert variants.main(argv) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    rows = {r["variant"]: r for r in report["tasks"][0]["rows"]}
    return SimpleNamespace(root=root, registry=registry, argv=argv, out=out, report=report, rows=rows)


def _graph(run, name):
    row = run.rows[name]
    directory, manifest = run.registry.load_verified(name, row["version"])  # sha256 of every file checked
    return onnx.load(str(directory / manifest.model_file)), manifest, directory


def test_qdq_variant_is_static_int8(run):
    model, manifest, _ = _graph(run, QDQ)
    ops = {n.op_type for n in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    base = run.registry.manifest("forecast-global", run.registry.resolve("forecast-global", "stable"))
    assert manifest.version.startswith(base.version + "-")  # derived from the base version
    assert manifest.inputs == base.inputs and manifest.outputs == base.outputs
    assert manifest.preprocess == base.preprocess and manifest.labels == base.labels
    recipe = manifest.source.recipe
    assert recipe["precision"] == "int8-qdq" and recipe["base"] == "forecast-global"
    assert recipe["base_version"] == base.version and recipe["method"]["format"] == "QDQ"
    assert manifest.source.license == base.source.license  # a variant is served under its base's licence
    assert recipe["facts"]["calibration_samples"] == variants.PROFILES["tiny"].calibration
    assert manifest.data_fingerprint != base.data_fingerprint  # the calibration windows are part of its data
    assert manifest.metrics["quantize_linear_nodes"] > 0 and "max_abs_diff_vs_base" in manifest.metrics


def test_fp16_variant_has_fp16_weights_and_fp32_io(run):
    model, manifest, directory = _graph(run, FP16)
    types = [t.data_type for t in model.graph.initializer]
    assert types.count(TensorProto.FLOAT16) > 0 and TensorProto.FLOAT not in types
    io_types = {v.name: v.type.tensor_type.elem_type for v in (*model.graph.input, *model.graph.output)}
    assert io_types == {"context": TensorProto.FLOAT, "mask": TensorProto.FLOAT, "freq": TensorProto.INT64,
                        "features": TensorProto.FLOAT, "quantiles": TensorProto.FLOAT}
    c = manifest.preprocess.context
    feeds = {"context": np.zeros((3, c), np.float32), "mask": np.ones((3, c), np.float32),
             "freq": np.zeros(3, np.int64), "features": np.zeros((3, 6), np.float32)}
    y = ort_session(directory / "model.onnx").run(None, feeds)[0]
    assert y.dtype == np.float32 and y.shape == (3, manifest.preprocess.horizon, len(manifest.preprocess.quantiles))


def test_verdicts_decide_the_alias(run):
    assert run.rows[FP16]["verdict"] == "pass"  # fp16 of an MLP: MASE moves in the 4th decimal
    for name, row in run.rows.items():
        manifest = run.registry.manifest(name, row["version"])
        stable = run.registry.aliases(name).get("stable")
        assert row["published"] and manifest.gates == row["gates"]
        if row["verdict"] == "pass":
            assert all(row["gates"].values()) and stable == row["version"] and row["promoted"] == "yes"
        else:
            assert not all(row["gates"].values()) and stable != row["version"] and row["promoted"] == "no"
            assert row["reasons"]


def test_report_table_and_json(run):
    md = run.out.with_suffix(".md").read_text()
    assert "python -m scripts.variants build --registry" in md and "| gate | promoted |" in md
    assert "not a target (GPU format; no GPU lent)" in md
    task = run.report["tasks"][0]
    assert task["batches"] == ["b1", f"b{variants.PROFILES['tiny'].batch['forecast']}"]
    for row in [task["base"], *task["rows"]]:
        for stats in row["speed"].values():
            assert 0 < stats["min"] <= stats["median"] <= stats["max"]
    for row in task["rows"]:
        assert row["metric"]["name"] == "mase_ratio"
        assert row["metric"]["base"] == pytest.approx(task["base"]["metrics"]["mase_ratio"])
        assert row["size_mb"] > 0 and set(row["speedup"]) == set(task["batches"])
    assert run.report["gates"] == variants.Gates().__dict__


def test_rerun_is_cached_and_idempotent(run):
    before = {n: r["version"] for n, r in run.rows.items()}
    assert variants.main(run.argv) == 0  # must not fail on the versions it published the first time
    again = json.loads(run.out.with_suffix(".json").read_text())["tasks"][0]["rows"]
    assert {r["variant"]: r["version"] for r in again} == before
    assert {r["status"] for r in again} == {"cached"}


def test_impossible_gate_is_refused_and_gets_no_alias(run):
    stable_before = run.registry.aliases(FP16)["stable"]
    impossible = variants.Gates(max_mase_increase=-1.0)  # MASE would have to fall to zero
    result = variants.run_task("forecast", run.registry, "tiny", impossible, cache_dir=run.root / "variants-cache")
    rows = {r["variant"]: r for r in result["rows"]}
    for name, row in rows.items():
        assert row["verdict"] == "refused" and row["gates"]["mase_increase"] is False
        assert any("MASE" in why for why in row["reasons"]) and row["promoted"] == "no"
        assert row["version"] != run.rows[name]["version"]  # the gates are part of the recipe hash
        assert run.registry.has(name, row["version"])  # published for the record ...
        assert run.registry.manifest(name, row["version"]).gates["mase_increase"] is False
    assert run.registry.aliases(FP16)["stable"] == stable_before  # ... but `stable` did not move
    assert all(e["to"] != rows[FP16]["version"] for e in run.registry.alias_log(FP16))


def test_perturbed_weights_are_refused(run, tmp_path):
    task = variants.ForecastTask(run.registry, variants.PROFILES["tiny"], threads=1)
    good = tmp_path / "fp16.onnx"
    variants.convert_fp16(task.base_path, good)
    model = onnx.load(str(good))
    weight = max(model.graph.initializer, key=lambda t: np.prod(t.dims))  # the largest weight matrix
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float16(-8), weight.name))
    broken = tmp_path / "broken.onnx"
    onnx.save(model, str(broken))

    spec = variants.SPECS["forecast"][1]
    base_ev = task.evaluate(task.base_path)
    gates = {}
    for label, path in (("good", good), ("broken", broken)):
        _, problems = variants.sanity(task.base_path, path, task.speed_feeds(), 1, task.base.inputs,
                                      task.base.outputs)
        _, gates[label], _ = variants.judge(task, spec, base_ev, task.evaluate(path), problems, {}, variants.GATES)
    assert all(gates["good"].values())
    assert gates["broken"]["sane"] and not gates["broken"]["mase_increase"]  # finite and well-shaped, but worse


def test_non_finite_outputs_fail_sanity(run, tmp_path):
    task = variants.ForecastTask(run.registry, variants.PROFILES["tiny"], threads=1)
    model = onnx.load(str(task.base_path))
    weight = max(model.graph.initializer, key=lambda t: np.prod(t.dims))
    arr = numpy_helper.to_array(weight).copy()
    arr.flat[0] = np.nan
    weight.CopyFrom(numpy_helper.from_array(arr, weight.name))
    onnx.save(model, str(tmp_path / "nan.onnx"))
    _, problems = variants.sanity(task.base_path, tmp_path / "nan.onnx", task.speed_feeds(), 1, task.base.inputs,
                                  task.base.outputs)
    assert problems and "non-finite" in problems[0]
