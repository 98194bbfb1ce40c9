"""The .pt importer (`detection-pt`): end-to-end heads (YOLOv10, YOLO26), anchors heads, segmentation/pose served as
detection, refusals, the fixed-batch fallback, old checkpoints with omegaconf args. Checkpoints here are built from
ultralytics' yamls with random weights (no training, imgsz 64): the point is the export/parity/manifest path. A
YOLO26 trained on shapes and real third-party checkpoints are in test_detection_pt_trained.py / _real.py."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("ultralytics")

from triserve.families.detection.importers.checkpoint import PtParams, import_detection_pt
from triserve.families.detection.importers.checkpoint_read import inspect_checkpoint
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.photos import user_photos
from triserve.models.importing.result import ImportRefused
from triserve.models.registry import LocalRegistry

FAST = PtParams(parity_batches=(1, 2), parity_sizes=((64, 64),), proof_batches=(4, 2))
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="session")
def ul_cache(tmp_path_factory) -> Path:
    from triserve.families.detection.importers.ultralytics_env import setup_ultralytics

    cache = tmp_path_factory.mktemp("ultralytics-cache")
    setup_ultralytics(cache / "detection-pt")
    return cache


def save_checkpoint(yaml: str, path: Path, nc: int = 2) -> Path:
    """A checkpoint as ultralytics saves it (YOLO.save), from a yaml with nc classes and random weights."""
    import torch
    from ultralytics import YOLO

    torch.manual_seed(0)
    user = YOLO(yaml)
    user.model = type(user.model)(yaml, nc=nc, verbose=False)
    user.model.names = {i: f"class{i}" for i in range(nc)}
    user.save(str(path))
    return path


@pytest.fixture(scope="session")
def checkpoints(ul_cache, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    out = {}
    for key, yaml, nc in [("yolo26", "yolo26n.yaml", 3), ("yolov10", "yolov10n.yaml", 2), ("yolo11", "yolo11n.yaml", 2),
                          ("seg", "yolo11n-seg.yaml", 2), ("pose", "yolo11n-pose.yaml", 1),
                          ("obb", "yolo11n-obb.yaml", 2), ("cls", "yolo11n-cls.yaml", 2)]:
        out[key] = save_checkpoint(yaml, root / f"{key}.pt", nc)
    return out


def _import(pt: Path, tmp_path: Path, ul_cache: Path, photo_dir: Path | None = None, **kw):
    return import_detection_pt(pt, "det", "1.0.0", tmp_path / "work", imgsz=64, cache_dir=ul_cache,
                               photos=user_photos(photo_dir) if photo_dir else None,
                               verify_ultralytics=photo_dir is not None, params=FAST, **kw)


@pytest.mark.parametrize("key, k", [("yolo26", 84), ("yolov10", 84)])
def test_end2end_checkpoints_export_their_nms_free_head(checkpoints, tmp_path, ul_cache, photo_dir, key, k):
    art, report = _import(checkpoints[key], tmp_path, ul_cache, photo_dir)
    m = art.manifest
    nc = len(m.labels)
    assert m.preprocess.head == "end2end" and report["head"] == "end2end"
    # max_det is the top-k of the export: min(300, anchors at imgsz 64 = 64 + 16 + 4)
    assert m.inputs[0].shape == ["batch", 3, "height", "width"] and m.outputs[0].shape == ["batch", k, 6]
    assert m.gates == {"parity": True, "dynamic_batch": True, "ultralytics_agreement": True}
    cases = {c.case for c in m.parity}
    assert {"batch1/64x64/boxes", "batch2/64x64/scores", "batch4-vs-batch1/boxes", "batch2-vs-batch1/scores"} <= cases
    assert all(c.passed for c in m.parity)
    assert m.source.recipe["head"] == "end2end" and m.source.recipe["max_det"] == k
    assert m.source.recipe["checkpoint"]["end2end_capable"] is True
    out = ort_session(art.staging / "model.onnx").run(None, {"images": np.zeros((3, 3, 64, 64), np.float32)})[0]
    assert out.shape == (3, k, 6) and out[..., 5].max() < nc


def test_end2end_checkpoint_with_head_anchors_serves_its_one_to_many_branch(checkpoints, tmp_path, ul_cache,
                                                                           photo_dir):
    art, _ = _import(checkpoints["yolo26"], tmp_path, ul_cache, photo_dir, head="anchors")
    m = art.manifest
    assert m.preprocess.head == "anchors" and m.outputs[0].shape == ["batch", 4 + 3, "anchors"]
    assert m.gates["ultralytics_agreement"] and m.gates["dynamic_batch"]
    assert not any("-vs-" in c.case for c in m.parity)  # batched torch parity proves the rows of an anchors head


def test_anchors_checkpoint_keeps_working_and_refuses_end2end(checkpoints, tmp_path, ul_cache, photo_dir):
    art, report = _import(checkpoints["yolo11"], tmp_path, ul_cache, photo_dir)
    m = art.manifest
    assert m.preprocess.head == "anchors" and m.outputs[0].shape == ["batch", 6, "anchors"]
    assert report["checkpoint"]["head"] == "Detect" and report["checkpoint"]["served_as"] == "detection"
    with pytest.raises(ImportRefused, match="no one-to-one"):
        _import(checkpoints["yolo11"], tmp_path / "b", ul_cache, head="end2end")


def _torch_head(pt: Path, x: np.ndarray) -> np.ndarray:
    """output0 of the original checkpoint in torch (a segmentation model nests it with its mask prototypes)."""
    import torch

    from triserve.families.detection.importers.export import load_torch_model

    with torch.inference_mode():
        y = load_torch_model(pt)(torch.from_numpy(x))
    while isinstance(y, (list, tuple)):
        y = y[0]
    return y.numpy()


@pytest.mark.parametrize("key, task, dropped", [("seg", "segment", {"cv4", "proto"}), ("pose", "pose", {"cv4"})])
def test_segmentation_and_pose_are_served_as_detection(checkpoints, tmp_path, ul_cache, photo_dir, key, task,
                                                       dropped):
    """The head is cut to its Detect part before export: one output [b, 4 + nc, anchors], no mask/keypoint nodes,
    and its boxes and scores are exactly the first 4 + nc channels of the ORIGINAL model's output."""
    import onnx

    art, report = _import(checkpoints[key], tmp_path, ul_cache, photo_dir)
    m = art.manifest
    nc = len(m.labels)
    ck = report["checkpoint"]
    assert ck["task"] == task and set(ck["dropped"]) >= dropped
    assert "served as detection" in ck["served_as"] and "served as detection" in m.source.description
    assert m.preprocess.head == "anchors" and [o.shape for o in m.outputs] == [["batch", 4 + nc, "anchors"]]
    assert m.gates["ultralytics_agreement"]
    graph = onnx.load(str(art.staging / "model.onnx")).graph
    assert not [n.name for n in graph.node if "/cv4" in n.name or "proto" in n.name]
    from triserve.families.detection.importers.export import parity_images

    x = parity_images(2, 64, 64)
    served = ort_session(art.staging / "model.onnx").run(None, {"images": x})[0]
    original = _torch_head(checkpoints[key], x)
    assert original.shape[1] > 4 + nc  # the original carries mask coefficients / keypoints after the classes
    np.testing.assert_allclose(served, original[:, :4 + nc], atol=1e-3 * 64, rtol=0)
    np.testing.assert_allclose(served[:, 4:], original[:, 4:4 + nc], atol=1e-4, rtol=0)


@pytest.mark.parametrize("key, reason", [
    ("obb", "oriented-box .*rotated.*axis-aligned NMS"),
    ("cls", r"image-classification checkpoint \(a Classify head\).*no boxes.*triserve import classification-pt"),
])
def test_refused_kinds(checkpoints, tmp_path, ul_cache, key, reason):
    with pytest.raises(ImportRefused, match=reason):
        inspect_checkpoint(checkpoints[key], tmp_path, ul_cache)


@pytest.mark.parametrize("key, reason", [("obb", "oriented-box (OBB) checkpoint"),
                                         ("cls", "image-classification checkpoint")])
def test_cli_refusal_says_why_and_publishes_nothing(checkpoints, tmp_path, ul_cache, caplog, key, reason):
    from triserve.importers import main

    reg = tmp_path / "registry"
    assert main(["detection-pt", "--weights", str(checkpoints[key]), "--name", key, "--version", "1", "--registry",
                 str(reg), "--cache", str(ul_cache)]) == 2
    assert f"nothing published: {key}.pt: {reason}" in caplog.text
    assert LocalRegistry(reg).models() == []


def test_cli_publishes_or_refuses_with_nothing_published(checkpoints, tmp_path, ul_cache, photo_dir, capsys):
    from triserve.importers import main

    reg = tmp_path / "registry"
    common = ["--registry", str(reg), "--imgsz", "64", "--cache", str(ul_cache), "--parity-batches", "1", "2"]
    assert main(["detection-pt", "--weights", str(checkpoints["obb"]), "--name", "obb", "--version", "1", *common]) == 2
    assert LocalRegistry(reg).models() == []
    capsys.readouterr()
    assert main(["detection-pt", "--weights", str(checkpoints["yolo26"]), "--name", "y26", "--version", "1.0.0",
                 "--images", str(photo_dir), "--alias", "canary", *common]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["head"] == "end2end" and out["outputs"][0]["shape"] == ["batch", 84, 6]
    assert out["gates"]["ultralytics_agreement"] is True
    directory, m = LocalRegistry(reg).load_verified("y26", "canary")
    assert m.preprocess.head == "end2end" and (directory / m.model_file).is_file()
    assert m.source.license == "AGPL-3.0-only"  # the checkpoint states it ("AGPL-3.0 License", ultralytics' save)
    assert main(["detection-pt", "--weights", str(checkpoints["yolo26"]), "--name", "y26", "--version", "1.0.0",
                 "--no-verify", *common]) == 2  # versions are immutable


def test_end2end_rows_that_depend_on_the_batch_fall_back_to_a_fixed_batch_graph(checkpoints, tmp_path, ul_cache,
                                                                               monkeypatch):
    """A refuted batch proof (here forced) re-exports the model with a fixed batch of 1: the runner feeds it item by
    item (runners/pool.fixed_batch reads inputs[0].shape[0] == 1)."""
    from triserve.models.importing import batching
    from triserve.runners.pool import fixed_batch

    real = batching.prove_dynamic_batch

    def refuted(*a, **kw):
        proof = real(*a, **kw)
        return batching.BatchProof(False, proof.checks, "batch4-vs-original-batch1: rows mixed (forced by the test)")

    monkeypatch.setattr(batching, "prove_dynamic_batch", refuted)
    art, report = _import(checkpoints["yolo26"], tmp_path, ul_cache)
    m = art.manifest
    assert m.inputs[0].shape == [1, 3, 64, 64] and m.outputs[0].shape == [1, 84, 6]
    assert m.gates["dynamic_batch"] is False and report["dynamic_batch"] is False
    assert "forced by the test" in m.source.recipe["batch_proof_reason"]
    assert fixed_batch(m)
    assert {c.case.split("/")[0] for c in m.parity if "-vs-" not in c.case} == {"batch1"}
    out = ort_session(art.staging / "model.onnx").run(None, {"images": np.zeros((1, 3, 64, 64), np.float32)})[0]
    assert out.shape == (1, 84, 6)


def test_checkpoint_with_omegaconf_args_is_read_without_omegaconf(checkpoints, tmp_path, ul_cache):
    """ultralytics 8.0.x pickled its training args as omegaconf DictConfig: read as plain data without omegaconf."""
    import importlib
    import importlib.util

    import torch

    if importlib.util.find_spec("omegaconf") is not None:
        pytest.skip("omegaconf is installed here: the stand-in is not used")
    fake = tmp_path / "fake"
    (fake / "omegaconf").mkdir(parents=True)
    (fake / "omegaconf" / "__init__.py").write_text("")
    (fake / "omegaconf" / "dictconfig.py").write_text(
        "class DictConfig:\n    def __init__(self, d):\n        self.__dict__['_content'] = d\n"
        "    def __getstate__(self):\n        return {'_content': self._content, '_parent': None}\n"
        "    def __setstate__(self, s):\n        self.__dict__.update(s)\n")
    (fake / "omegaconf" / "nodes.py").write_text(
        "class AnyNode:\n    def __init__(self, v):\n        self._val = v\n")
    def forget_fake():
        for name in [n for n in sys.modules if n.split(".")[0] == "omegaconf"]:
            del sys.modules[name]
        if str(fake) in sys.path:
            sys.path.remove(str(fake))
        importlib.invalidate_caches()

    old = tmp_path / "old.pt"
    sys.path.insert(0, str(fake))
    try:
        from omegaconf.dictconfig import DictConfig
        from omegaconf.nodes import AnyNode

        ckpt = torch.load(str(checkpoints["yolo11"]), map_location="cpu", weights_only=False)
        ckpt["train_args"] = DictConfig({"task": AnyNode("detect"), "imgsz": AnyNode(96),
                                         "data": AnyNode("plates.yaml")})
        torch.save(ckpt, str(old))
    finally:
        forget_fake()  # from here on omegaconf is missing, as on a machine without it
    with pytest.raises(ModuleNotFoundError):
        torch.load(str(old), map_location="cpu", weights_only=False)
    info = inspect_checkpoint(old, tmp_path / "work", ul_cache)
    assert (info.task, info.train_imgsz) == ("detect", 96)
    assert any("omegaconf" in n for n in info.notes)
    assert "omegaconf" not in sys.modules
    reread = torch.load(str(info.reference), map_location="cpu", weights_only=False)  # loads without the stand-in
    assert reread["train_args"] == {"task": "detect", "imgsz": 96, "data": "plates.yaml"}
