"""A YOLOv8n-seg trained here (from yolov8n-seg.yaml, random init, 3 epochs on the synthetic shapes set with each
box as its polygon, imgsz 64: a few seconds) imported with `segmentation-pt` and checked against ultralytics' segment
predictor running the .pt itself: boxes AND masks. Like the detection family's trained test, a few epochs leave
the scores under the import's threshold, so the check is also run at a threshold just under the model's top score,
where both sides report instances."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("ultralytics")

from scripts.common import BuildContext
from triserve.families.detection.importers.pipeline import letterboxed
from triserve.families.segmentation.importers.checkpoint import import_segmentation_pt
from triserve.families.segmentation.importers.verify import verify
from triserve.families.segmentation.postprocess import split_row
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.photos import read_rgb, user_photos

pytestmark = pytest.mark.timeout(600)
RECIPE_OVERRIDES = {"model": "yolov8n-seg.yaml", "epochs": 3, "n_train": 32, "n_val": 2, "n_test": 8,
                    "image_size": 64, "imgsz": 64, "batch": 8, "nbs": 8, "close_mosaic": 3, "lr0": 0.01,
                    "warmup_epochs": 0.0}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from scripts.detection import build as det

    base = tmp_path_factory.mktemp("yolov8seg")
    recipe = {**det.RECIPES["tiny"], **RECIPE_OVERRIDES}
    ctx = BuildContext(task="detection", profile="test-yolov8-seg", recipe_hash="test", version="0",
                       work_dir=base / "work", cache_dir=base / "cache", git_commit="")
    det.setup_ultralytics(ctx.cache_dir)
    started = time.monotonic()
    dataset = det.make_dataset(ctx, recipe)
    for txt in (dataset.root / "labels").rglob("*.txt"):  # each box as its polygon: segment labels
        rows = []
        for line in txt.read_text().splitlines():
            c, cx, cy, w, h = line.split()
            x1, y1 = float(cx) - float(w) / 2, float(cy) - float(h) / 2
            x2, y2 = float(cx) + float(w) / 2, float(cy) + float(h) / 2
            rows.append(f"{c} {x1:.6f} {y1:.6f} {x2:.6f} {y1:.6f} {x2:.6f} {y2:.6f} {x1:.6f} {y2:.6f}")
        txt.write_text("".join(r + "\n" for r in rows))
    weights = det.train(ctx, recipe, dataset).weights
    assert time.monotonic() - started < 120
    return weights, dataset, base


def _conf_under_top_score(onnx_path: Path, images: list[Path], pre, nc: int) -> float:
    """A threshold in the gap just under the two highest class scores the served graph gives (never on a score)."""
    session = ort_session(onnx_path, threads=1)
    x, _ = letterboxed([read_rgb(p) for p in images], pre)
    rows = [session.run(None, {session.get_inputs()[0].name: x[i:i + 1]})[0][0] for i in range(len(x))]
    best = np.concatenate([split_row(r, pre, nc)[0][4:4 + nc].max(axis=0) for r in rows])
    scores = np.unique(best.round(6))[::-1]
    assert scores.size >= 3, "the served graph gives one score for everything"
    return float(scores[1] + scores[2]) / 2


def test_trained_segment_checkpoint_agrees_with_ultralytics_on_boxes_and_masks(trained, tmp_path):
    weights, dataset, base = trained
    images = dataset.images("test")
    result = import_segmentation_pt(weights, "shapes-seg", "0.1.0", tmp_path / "work", imgsz=64,
                                    photos=user_photos(dataset.root / "images" / "test"),
                                    cache_dir=base / "importer", license="AGPL-3.0-only")
    m = result.primary.manifest
    assert m.labels == ["circle", "rectangle", "triangle"] and m.gates["batch_proof"] and m.gates["dynamic_batch"]
    served = result.primary.staging / "model.onnx"
    conf = _conf_under_top_score(served, images, m.preprocess, len(m.labels))
    check = verify(Path(weights), ort_session(served, threads=1), images,
                   m.preprocess, len(m.labels), base / "importer", conf=conf)
    assert check.passed, check.describe()
    assert check.reference_instances >= 2 and check.metrics()["ultralytics_min_mask_iou"] >= 0.9
