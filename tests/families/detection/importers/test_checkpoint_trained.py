"""A YOLO26 trained here (from yolo26n.yaml, random init, a few iterations on the synthetic shapes set, imgsz 64:
~15 s on one core) imported end to end: `detection-pt` (the NMS-free head, manifest head 'end2end', scored on its
data through the serving path, verified against YOLO(best.pt).predict(nms=False)) and `detection-onnx` on its own
fixed-batch end-to-end ONNX export (batch rewrite + proof, verified against ultralytics on that file).

A few iterations teach the head nothing (accuracy is not the point, the export/parity/manifest path is): its scores
stay below ultralytics' 0.25, so the in-import cross-check is vacuous; each test therefore also runs the same
cross-check at a threshold just under the model's top score, where both sides report the same boxes."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("ultralytics")

from scripts.common import BuildContext
from triserve.families.detection.importers.checkpoint import PtParams, publish_detection_pt
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.photos import read_rgb, user_photos
from triserve.models.registry import LocalRegistry

pytestmark = pytest.mark.timeout(600)
RECIPE_OVERRIDES = {"model": "yolo26n.yaml", "epochs": 3, "n_train": 32, "n_val": 2, "n_test": 8, "image_size": 64,
                    "imgsz": 64, "batch": 8, "nbs": 8, "close_mosaic": 3, "lr0": 0.01, "warmup_epochs": 0.0}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from scripts.detection import build as det

    base = tmp_path_factory.mktemp("yolo26")
    recipe = {**det.RECIPES["tiny"], **RECIPE_OVERRIDES}
    ctx = BuildContext(task="detection", profile="test-yolo26", recipe_hash="test", version="0",
                       work_dir=base / "work", cache_dir=base / "cache", git_commit="")
    det.setup_ultralytics(ctx.cache_dir)
    started = time.monotonic()
    dataset = det.make_dataset(ctx, recipe)
    weights = det.train(ctx, recipe, dataset).weights
    seconds = time.monotonic() - started
    assert seconds < 60, f"training the tiny YOLO26 took {seconds:.0f} s"
    return weights, dataset, base


def _test_images(dataset) -> list[Path]:
    return dataset.images("test")


def _conf_under_top_score(onnx_path: Path, images: list[Path], pre) -> float:
    """A threshold in the gap just under the highest score the served graph gives on these images (never on a
    score: a box at the threshold could fall either side in two runtimes)."""
    from triserve.families.detection.importers.pipeline import letterboxed

    session = ort_session(onnx_path, threads=1)
    x, _ = letterboxed([read_rgb(p) for p in images], pre)
    raw = np.concatenate([session.run(None, {session.get_inputs()[0].name: x[i:i + 1]})[0]
                          for i in range(len(x))])
    scores = np.unique(raw[..., 4].round(6))[::-1]
    assert scores.size >= 2, "the served graph gives one score for everything"
    return float(scores[0] + scores[1]) / 2


def test_detection_pt_imports_the_trained_yolo26_end_to_end(trained, tmp_path):
    from triserve.families.detection.importers.verify import verify_against_ultralytics

    weights, dataset, base = trained
    registry = LocalRegistry(tmp_path / "registry")
    m, report = publish_detection_pt(weights, "shapes26", "0.1.0", registry, alias="canary",
                                     images=dataset.root / "images" / "test", imgsz=64, data=dataset.data_yaml,
                                     cache_dir=base / "importer", params=PtParams(parity_batches=(1, 4)))
    assert m.labels == ["circle", "rectangle", "triangle"]
    assert m.preprocess.head == "end2end" and m.preprocess.imgsz == 64
    assert m.inputs[0].shape == ["batch", 3, "height", "width"] and m.outputs[0].shape == ["batch", 84, 6]
    assert m.gates == {"parity": True, "dynamic_batch": True, "ultralytics_agreement": True}
    cases = {c.case for c in m.parity}
    assert {"batch4/64x64/boxes", "batch4/64x64/scores", "batch4-vs-batch1/boxes", "batch2-vs-batch1/scores"} <= cases
    assert all(c.passed for c in m.parity)
    assert {"map50", "map50_95", "ms_per_image", "ultralytics_matched"} <= set(m.metrics)  # scored end to end
    assert set(m.reference) == {"confidence", "boxes_per_image"}
    ck = m.source.recipe["checkpoint"]
    assert (ck["task"], ck["head"], ck["end2end_capable"], ck["served_as"]) == ("detect", "Detect", True, "detection")
    assert report["checkpoint"]["ultralytics_version"]
    directory, loaded = registry.load_verified("shapes26", "canary")
    assert loaded.preprocess.head == "end2end"

    # the same cross-check where the model does report boxes: all of them matched, per image
    onnx_path = directory / loaded.model_file
    images = _test_images(dataset)
    conf = _conf_under_top_score(onnx_path, images, loaded.preprocess)
    check = verify_against_ultralytics(onnx_path, images, loaded.preprocess, loaded.labels, conf=conf,
                                       cache_dir=base / "importer", reference=weights)
    assert check.passed, check.describe()
    assert check.agreement.matched > 0 and check.agreement.matched == check.agreement.reference_boxes
    assert check.worst_iou() >= 0.999 and check.agreement.max_score_diff <= 1e-4


def test_detection_pt_head_anchors_serves_the_one_to_many_branch(trained, tmp_path):
    weights, dataset, base = trained
    m, _ = publish_detection_pt(weights, "shapes26-anchors", "0.1.0", LocalRegistry(tmp_path / "registry"),
                                images=dataset.root / "images" / "test", imgsz=64, head="anchors",
                                cache_dir=base / "importer", params=PtParams(parity_batches=(1, 2)))
    assert m.preprocess.head == "anchors" and m.outputs[0].shape == ["batch", 7, "anchors"]
    assert m.gates["ultralytics_agreement"]


def test_detection_onnx_imports_its_fixed_batch_end_to_end_export(trained, tmp_path):
    """ultralytics' own end-to-end ONNX export (nms=False), pinned at batch 1: rewritten, proved, verified."""
    from ultralytics import YOLO

    from triserve.families.detection.importers.onnx_graph import import_detection_onnx
    from triserve.families.detection.importers.verify import verify_against_ultralytics

    weights, dataset, base = trained
    local = tmp_path / "best.pt"
    local.write_bytes(weights.read_bytes())
    onnx_file = Path(YOLO(str(local)).export(format="onnx", dynamic=False, nms=False, imgsz=64, opset=17,
                                             simplify=False, device="cpu"))
    result = import_detection_onnx(onnx_file, "shapes26-onnx", "0.1.0", tmp_path / "work",
                                   photos=user_photos(dataset.root / "images" / "test"), cache_dir=base / "importer",
                                   verify_ultralytics=True)
    m = result.primary.manifest
    assert m.preprocess.head == "end2end"
    assert m.inputs[0].shape == ["batch", 3, 64, 64] and m.outputs[0].shape == ["batch", 84, 6]
    assert m.gates == {"dynamic_batch": True, "batch_proof": True, "ultralytics_agreement": True}
    assert result.report["batch_rewrite"]["reshapes"], "a fixed export reshapes with leading 1s"
    assert all(c.passed for c in m.parity)
    served = result.primary.staging / "model.onnx"
    images = _test_images(dataset)
    conf = _conf_under_top_score(served, images, m.preprocess)
    check = verify_against_ultralytics(served, images, m.preprocess, m.labels, conf=conf,
                                       cache_dir=base / "importer")
    assert check.passed, check.describe()
    assert check.agreement.matched > 0
