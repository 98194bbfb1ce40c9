"""The detection builder end to end on the tiny recipe: train, export, parity gate, manifests, user .pt export."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("ultralytics")
pytest.importorskip("onnx")
import onnx

from scripts.detection import build as det
from scripts.pipeline import build_task
from triserve.families.detection.importers import export
from triserve.families.detection.importers.ultralytics_env import setup_ultralytics
from triserve.models.importing.result import GateFailed
from triserve.models.manifest import Manifest
from triserve.models.registry import LocalRegistry


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("detection")
    registry = LocalRegistry(base / "registry")
    cache = base / "cache"
    summary = build_task("detection", "tiny", registry, cache)
    return registry, cache, summary


def _manifests(registry, summary):
    return {name: registry.manifest(name, summary["version"]) for name in det.ARTIFACTS}


def test_build_publishes_both_variants(built):
    registry, _, summary = built
    assert summary["status"] == "built"
    manifests = _manifests(registry, summary)
    primary, fallback = manifests[det.PRIMARY], manifests[det.FALLBACK]
    recipe = det.RECIPES["tiny"]
    for m in (primary, fallback):
        path, verified = registry.load_verified(m.name, "stable")  # hashes filled and verified
        Manifest.model_validate_json((path / "manifest.json").read_text())
        assert verified.version == summary["version"]
        assert {f.path for f in m.files} == {"model.onnx"}
        assert m.task == "detection" and m.model_file == "model.onnx"
        assert m.labels == ["circle", "rectangle", "triangle"]
        assert m.inputs[0].name == "images" and m.inputs[0].shape == ["batch", 3, "height", "width"]
        assert m.outputs[0].name == "output0" and m.outputs[0].shape == ["batch", 4 + len(m.labels), "anchors"]
        assert m.opset == 17
        assert m.source.kind == "recipe" and m.source.seed == recipe["seed"]
        assert m.source.recipe["version"] == "1.0.0"
        assert m.source.license == "Apache-2.0 AND AGPL-3.0-only"  # trained here with ultralytics
        assert set(m.source.packages) >= {"torch", "ultralytics", "onnx"}
        assert len(m.data_fingerprint) == 64
        assert {"map50", "map50_95", "ms_per_image"} <= set(m.metrics)
        assert all(np.isfinite(v) for v in m.metrics.values())
        assert 0.0 <= m.metrics["map50"] <= 1.0 and m.metrics["ms_per_image"] > 0
        assert set(m.reference) == {"confidence", "boxes_per_image"}
        assert len(m.reference["confidence"]["edges"]) == 21
        assert m.recipe_hash and m.git_commit
    assert primary.variant == "primary" and primary.fallback_for is None
    assert fallback.variant == "fallback" and fallback.fallback_for == det.PRIMARY
    assert primary.preprocess.imgsz == recipe["imgsz"]
    assert fallback.preprocess.imgsz == recipe["fallback_imgsz"] < primary.preprocess.imgsz
    assert "map50_drop" in fallback.metrics
    assert primary.gates["parity"] and fallback.gates["parity"] and "cheaper" in fallback.gates


def test_parity_recorded_and_passed(built):
    registry, _, summary = built
    recipe = det.RECIPES["tiny"]
    for m in _manifests(registry, summary).values():
        checks = {c.case: c for c in m.parity}
        for b in recipe["parity_batches"]:
            for h, w in recipe["parity_sizes"]:
                scores, boxes = checks[f"batch{b}/{h}x{w}/scores"], checks[f"batch{b}/{h}x{w}/boxes"]
                assert scores.tolerance == recipe["parity_tolerance"] == 1e-4  # probabilities: flat 1e-4
                assert boxes.tolerance == pytest.approx(1e-4 * max(h, w))  # pixels: 1e-4 of the image side
        assert all(c.passed and c.max_abs_diff <= c.tolerance for c in m.parity)


def test_onnx_has_dynamic_batch_and_size(built):
    registry, _, summary = built
    path = registry.path(det.PRIMARY, summary["version"]) / "model.onnx"
    graph = onnx.load(str(path)).graph
    dims = [d.dim_param for d in graph.input[0].type.tensor_type.shape.dim]
    assert dims[0] == "batch" and dims[2:] == ["height", "width"]
    from scripts.common import ort_session

    sess = ort_session(path)
    for b, s in ((1, 64), (3, 96)):
        out = sess.run(None, {"images": np.zeros((b, 3, s, s), np.float32)})[0]
        assert out.shape == (b, 7, (s // 8) ** 2 + (s // 16) ** 2 + (s // 32) ** 2)


def _tiny_weights(cache: Path) -> Path:
    found = sorted((cache / "detection" / "weights").glob("*/best.pt"))
    assert found, "the tiny build should have cached its weights"
    return found[0]


def test_perturbed_onnx_fails_parity(built, tmp_path):
    registry, cache, summary = built
    src = registry.path(det.PRIMARY, summary["version"]) / "model.onnx"
    model = onnx.load(str(src))
    from onnx import numpy_helper

    # The box-regression conv of the first head level. A 1-epoch model is nearly insensitive deeper in the net
    # (its head still sits at its init), so the noise goes where it reaches the output for any weights.
    init = next(i for i in model.graph.initializer if i.name.endswith(".cv2.0.2.weight"))
    w = numpy_helper.to_array(init)
    w = w + np.random.default_rng(0).normal(0, 0.1, w.shape).astype(w.dtype)
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    bad = tmp_path / "perturbed.onnx"
    onnx.save(model, str(bad))

    torch_model = export.load_torch_model(_tiny_weights(cache))
    # the untouched graph passes the same cases ...
    export.check_parity(torch_model, src, [[64, 64]], [1, 4], progress=False)
    # ... the perturbed one is refused
    with pytest.raises(GateFailed, match="parity gate failed"):
        export.check_parity(torch_model, bad, [[64, 64]], [1, 4], progress=False)


NAMES = {0: "apple", 1: "banana", 2: "cherry", 3: "date", 4: "elderberry"}


@pytest.fixture(scope="module")
def user_pt(built, tmp_path_factory):
    """A user checkpoint with 5 custom classes, saved by ultralytics itself (random init: parity needs no training)."""
    _, cache, _ = built
    setup_ultralytics(cache / "detection")
    from ultralytics import YOLO
    from ultralytics.nn.tasks import DetectionModel

    user = YOLO("yolov8n.yaml")
    user.model = DetectionModel("yolov8n.yaml", nc=len(NAMES), verbose=False)
    user.model.names = NAMES
    pt = tmp_path_factory.mktemp("user") / "fruit.pt"
    user.save(str(pt))
    return pt


def test_user_pt_export_with_custom_classes(built, user_pt, tmp_path):
    _, cache, _ = built
    registry = LocalRegistry(tmp_path / "user-registry")
    manifest = det.publish_user_model(user_pt, "fruit-det", "0.1.0", registry, imgsz=64, alias="canary",
                                      cache_dir=cache / "detection")
    assert manifest.labels == list(NAMES.values())
    assert manifest.outputs[0].shape == ["batch", 4 + len(NAMES), "anchors"]
    assert manifest.source.kind == "user" and manifest.variant == "primary"
    assert manifest.preprocess.imgsz == 64
    assert manifest.parity and all(c.passed for c in manifest.parity)
    assert {c.case.split("/")[0] for c in manifest.parity} == {"batch1", "batch4", "batch32"}
    assert manifest.metrics["ms_per_image"] > 0
    path, verified = registry.load_verified("fruit-det", "canary")
    assert verified.version == "0.1.0"
    from scripts.common import ort_session

    out = ort_session(path / "model.onnx").run(None, {"images": np.zeros((2, 3, 64, 96), np.float32)})[0]
    assert out.shape[:2] == (2, 4 + len(NAMES))


def test_user_export_cli(built, user_pt, tmp_path, capsys):
    reg = tmp_path / "cli-registry"
    rc = det.main(["export", "--weights", str(user_pt), "--name", "fruit-cli", "--version", "2.0.0",
                   "--registry", str(reg), "--imgsz", "64"])
    assert rc == 0
    assert '"fruit-cli"' in capsys.readouterr().out
    assert LocalRegistry(reg).manifest("fruit-cli", "2.0.0").labels == list(NAMES.values())


def test_user_export_scores_on_a_dataset(built, tmp_path):
    _, cache, _ = built
    data = next((cache / "detection" / "datasets").glob("*/data.yaml"))
    art = export.export_user_model(_tiny_weights(cache), "shapes-user", "0.0.1", tmp_path, imgsz=64, data=data,
                                split="test", batches=(1, 2), sizes=[[64, 64]], cache_dir=cache / "detection")
    m = art.manifest
    assert {"map50", "map50_95", "ms_per_image"} <= set(m.metrics)
    assert set(m.reference) == {"confidence", "boxes_per_image"}
    assert m.labels == ["circle", "rectangle", "triangle"]
    assert (art.staging / "model.onnx").is_file()


def test_user_export_refuses_non_detection_models(built, tmp_path):
    _, cache, _ = built
    setup_ultralytics(cache / "detection")
    from ultralytics import YOLO

    pt = tmp_path / "classifier.pt"
    YOLO("yolov8n-cls.yaml").save(str(pt))
    with pytest.raises(ValueError, match="only detection models"):
        export.export_user_model(pt, "cls", "0.1.0", tmp_path / "out", imgsz=64, cache_dir=cache / "detection")


def test_rebuild_is_cached(built):
    registry, cache, summary = built
    again = build_task("detection", "tiny", registry, cache)
    assert again["status"] == "cached" and again["version"] == summary["version"]


def test_user_export_of_an_end_to_end_checkpoint(built, tmp_path, capsys):
    """A YOLO26 checkpoint (NMS-free one-to-one head): `export --head end2end` publishes [batch, max_det, 6] rows
    with preprocess.head 'end2end', torch parity compared order-insensitively, rows proved independent of the batch;
    the same checkpoint with --head anchors publishes its one-to-many branch."""
    import json

    _, cache, _ = built
    setup_ultralytics(cache / "detection")
    from ultralytics import YOLO
    from ultralytics.nn.tasks import DetectionModel

    user = YOLO("yolo26n.yaml")
    user.model = DetectionModel("yolo26n.yaml", nc=2, verbose=False)
    user.model.names = {0: "cat", 1: "dog"}
    pt = tmp_path / "y26.pt"
    user.save(str(pt))
    reg = tmp_path / "registry"
    common = ["--weights", str(pt), "--registry", str(reg), "--imgsz", "64"]
    assert det.main(["export", *common, "--name", "y26", "--version", "1.0.0", "--head", "end2end"]) == 0
    m = LocalRegistry(reg).manifest("y26", "1.0.0")
    assert m.preprocess.head == "end2end" and m.outputs[0].shape == ["batch", 84, 6]
    assert m.gates == {"parity": True, "dynamic_batch": True}
    assert {"batch4-vs-batch1/boxes", "batch32/64x64/scores"} <= {c.case for c in m.parity}
    assert all(c.passed for c in m.parity)
    capsys.readouterr()
    assert det.main(["export", *common, "--name", "y26-anchors", "--version", "1.0.0", "--head", "anchors"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "y26-anchors"
    assert LocalRegistry(reg).manifest("y26-anchors", "1.0.0").outputs[0].shape == ["batch", 6, "anchors"]
    assert det.main(["export", "--weights", str(_tiny_weights(cache)), "--registry", str(reg), "--imgsz", "64",
                     "--name", "v8", "--version", "1.0.0", "--head", "end2end"]) == 2  # no one-to-one branch
