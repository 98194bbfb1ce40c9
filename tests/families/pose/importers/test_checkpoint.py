"""pose-pt and pose-onnx on tiny random-init pose checkpoints (imgsz 64): the keypoint branch is exported and served,
the schema is recorded, ultralytics' pose predictor agrees box for box and keypoint for keypoint (its confidence
threshold lowered to 0.001 so a random model finds people: 15 on these photos), refusals say why."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("ultralytics")

from triserve.families.pose.importers.checkpoint import PosePtParams, import_pose_pt
from triserve.families.pose.importers.onnx_graph import import_pose_onnx
from triserve.families.pose.importers.onnx_inspect import inspect_pose_graph
from triserve.families.pose.importers.verify import PoseCheckParams
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.photos import user_photos
from triserve.models.importing.result import ImportRefused
from triserve.models.registry import LocalRegistry

LOW = PoseCheckParams(conf=0.001)
FAST = PosePtParams(parity_batches=(1, 2), parity_sizes=((64, 64), (64, 96)), check=LOW)
ROOT = Path(__file__).resolve().parents[4]
pytestmark = pytest.mark.timeout(300)


def _import(pt: Path, tmp_path: Path, ul_cache: Path, photos: Path | None, **kw):
    return import_pose_pt(pt, "pose", "1.0.0", tmp_path / "work", imgsz=64, cache_dir=ul_cache,
                          photos=user_photos(photos) if photos else None, verify_ultralytics=photos is not None,
                          params=FAST, **kw)


def test_a_coco_pose_checkpoint_is_exported_with_its_keypoints_and_agrees_with_ultralytics(
        pose_checkpoints, tmp_path, ul_cache, pose_photos):
    art, report = _import(pose_checkpoints["coco"], tmp_path, ul_cache, pose_photos)
    m = art.manifest
    assert m.task == "pose" and m.labels == ["person"]
    assert m.inputs[0].shape == ["batch", 3, "height", "width"] and m.outputs[0].shape == ["batch", 56, "anchors"]
    pre = m.preprocess
    assert pre.kind == "pose" and pre.imgsz == 64 and pre.kpt_shape == (17, 3) and pre.names_from == "coco-17"
    assert pre.keypoint_names[:3] == ["nose", "left_eye", "right_eye"] and len(pre.skeleton) == 19
    assert m.gates == {"parity": True, "dynamic_batch": True, "ultralytics_agreement": True}
    assert {c.case.rsplit("/", 1)[-1] for c in m.parity} == {"boxes", "scores", "keypoints", "keypoint_conf"}
    assert all(c.passed for c in m.parity) and {"batch2/64x96/keypoints"} <= {c.case for c in m.parity}
    assert m.metrics["ultralytics_matched"] == m.metrics["ultralytics_boxes"] >= 10
    assert m.metrics["ultralytics_keypoints_checked"] >= 50 and m.metrics["ultralytics_max_keypoint_px"] <= 2.0
    assert report["checkpoint"]["task"] == "pose" and report["checkpoint"]["served_as"] == "pose"
    out = ort_session(art.staging / "model.onnx").run(None, {"images": np.zeros((3, 3, 64, 64), np.float32)})[0]
    assert out.shape == (3, 56, 84)  # 4 + 1 + 17 * 3 channels, 64 + 16 + 4 anchors
    LocalRegistry(tmp_path / "registry").publish(art.staging, m)


def test_named_keypoints_of_a_custom_schema_come_from_the_checkpoint(pose_checkpoints, tmp_path, ul_cache):
    art, _ = _import(pose_checkpoints["hands"], tmp_path, ul_cache, None)
    pre = art.manifest.preprocess
    assert art.manifest.labels == ["left", "right"] and art.manifest.outputs[0].shape == ["batch", 21, "anchors"]
    assert pre.kpt_shape == (5, 3) and pre.names_from == "metadata" and pre.skeleton == []
    assert pre.keypoint_names == ["thumb", "index", "middle", "ring", "pinky"]
    assert art.manifest.gates == {"parity": True, "dynamic_batch": True}  # verification skipped, recorded
    assert art.manifest.source.recipe["ultralytics_check"] == "skipped"


def test_a_detector_is_refused_by_pose_pt(pose_checkpoints, tmp_path, ul_cache):
    with pytest.raises(ImportRefused, match="a detect checkpoint .* import it with detection-pt"):
        _import(pose_checkpoints["detect"], tmp_path, ul_cache, None)


def test_detection_pt_still_serves_a_pose_checkpoint_as_boxes(pose_checkpoints, tmp_path, ul_cache):
    from triserve.families.detection.importers.checkpoint import PtParams, import_detection_pt

    art, report = import_detection_pt(pose_checkpoints["coco"], "det", "1.0.0", tmp_path / "w", imgsz=64,
                                      cache_dir=ul_cache, verify_ultralytics=False,
                                      params=PtParams(parity_batches=(1,), parity_sizes=((64, 64),)))
    assert art.manifest.task == "detection" and art.manifest.outputs[0].shape == ["batch", 5, "anchors"]
    assert "keypoints are not served" in report["checkpoint"]["served_as"]


@pytest.fixture(scope="session")
def batch1_export(pose_checkpoints, tmp_path_factory, ul_cache) -> Path:
    """ultralytics' own ONNX export of the COCO pose checkpoint, batch 1, fixed 64x64 (what users hand in). The
    random-init checkpoint carries no training args; re-saved by the reader it has them (task 'pose'), as a trained
    one does."""
    from triserve.families.detection.importers.checkpoint_read import inspect_checkpoint
    from triserve.families.detection.importers.export import export_onnx

    work = tmp_path_factory.mktemp("pose-onnx")
    info = inspect_checkpoint(pose_checkpoints["coco"], work / "ck", ul_cache / "pose-pt", full_head=("pose",))
    return export_onnx(info.reference, work / "pose.onnx", 64, 17, dynamic=False)


def test_pose_onnx_batches_proves_and_verifies_a_user_export(batch1_export, tmp_path, ul_cache, pose_photos):
    info = inspect_pose_graph(batch1_export)
    assert info.batch == 1 and info.kpt_shape == [17, 3] and info.imgsz == 64 and info.schema["names_from"] == "coco-17"
    from triserve.families.pose.importers.onnx_graph import PoseOnnxParams

    result = import_pose_onnx(batch1_export, "user-pose", "1.0.0", tmp_path, photos=user_photos(pose_photos),
                              cache_dir=ul_cache, params=PoseOnnxParams(check=LOW))
    m = result.primary.manifest
    assert m.gates == {"dynamic_batch": True, "batch_proof": True, "ultralytics_agreement": True}
    assert m.inputs[0].shape[0] == "batch" and m.preprocess.keypoint_names[0] == "nose"
    cases = {c.case for c in m.parity}
    assert {"batch4-vs-original-batch1/keypoints", "batch2-vs-original-batch1/keypoint_conf"} <= cases
    assert m.metrics["ultralytics_matched"] >= 10 and m.metrics["ultralytics_keypoints_checked"] >= 50
    out = ort_session(result.primary.staging / "model.onnx").run(None, {"images": np.zeros((2, 3, 64, 64),
                                                                                            np.float32)})[0]
    assert out.shape == (2, 56, 84)


def test_pose_onnx_refuses_a_detection_export(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "families" / "detection" / "importers"))
    try:
        from conftest import build_detector  # the detection importers' tiny ONNX detector
    finally:
        sys.path.pop(0)
    det = build_detector(tmp_path / "det.onnx")
    with pytest.raises(ImportRefused, match="metadata task 'detect', not 'pose'"):
        inspect_pose_graph(det)
    bare = build_detector(tmp_path / "bare.onnx", task=None)
    with pytest.raises(ImportRefused, match="no 'kpt_shape' metadata"):
        inspect_pose_graph(bare)


LAYERS = """
from ultralytics.nn.modules import Conv


class ScaledConv(Conv):
    \"\"\"The training code's own layer: a Conv under another class name (same forward).\"\"\"
"""


def test_a_checkpoint_with_the_training_codes_own_layer_imports_with_custom_modules(ul_cache, tmp_path):
    """The pickle names `mytrain_layers.ScaledConv`: without --custom-modules the checkpoint cannot be read; with it
    the import runs (read, export, ultralytics' predictor) and the manifest records the file's sha256."""
    import hashlib
    import importlib.util

    from tests.families.pose.importers.conftest import save_checkpoint

    layers = tmp_path / "layers.py"
    layers.write_text(LAYERS)
    spec = importlib.util.spec_from_file_location("mytrain_layers", layers)
    module = importlib.util.module_from_spec(spec)
    sys.modules["mytrain_layers"] = module
    try:
        spec.loader.exec_module(module)
        pt = save_checkpoint("yolo11n-pose.yaml", tmp_path / "plain.pt", ["person"])
        import torch

        ck = torch.load(str(pt), weights_only=False)
        model = ck["model"]
        model.model[0].__class__ = module.ScaledConv
        torch.save(ck, str(tmp_path / "custom.pt"))
    finally:
        del sys.modules["mytrain_layers"]
    with pytest.raises(ImportRefused, match="mytrain_layers"):
        _import(tmp_path / "custom.pt", tmp_path / "a", ul_cache, None)
    art, _ = _import(tmp_path / "custom.pt", tmp_path / "b", ul_cache, None,
                     custom_modules=[f"mytrain_layers={layers}"])
    (record,) = art.manifest.source.recipe["custom_modules"]
    assert record["sha256"] == hashlib.sha256(layers.read_bytes()).hexdigest() and record["alias"] == "mytrain_layers"
    assert art.manifest.outputs[0].shape == ["batch", 56, "anchors"] and "mytrain_layers" not in sys.modules


def test_custom_modules_flag_refuses_a_missing_file(pose_checkpoints, tmp_path):
    done = subprocess.run([sys.executable, "-m", "triserve.importers", "pose-pt", "--weights",
                           str(pose_checkpoints["coco"]), "--name", "p", "--version", "1", "--registry",
                           str(tmp_path / "reg"), "--license", "MIT", "--custom-modules", "no_such_layers.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 2 and "no such file" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "reg" / "p").exists()
