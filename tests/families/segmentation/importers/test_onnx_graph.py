"""segmentation-onnx on tiny hand-built segment exports (no network): refusals, the packed served graph and its
proof, verification against ultralytics' segment predictor where it is installed, publishing."""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.families.detection.importers.conftest import build_detector
from triserve.families.segmentation.importers.onnx_graph import SegParams, import_segmentation_onnx, inspect_segmenter
from triserve.families.segmentation.postprocess import row_size
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.photos import user_photos
from triserve.models.importing.result import ImportRefused
from triserve.models.registry import LocalRegistry


@pytest.fixture
def photo_dir(tmp_path) -> Path:
    root = tmp_path / "photos"
    root.mkdir()
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate([(48, 64), (64, 48), (40, 40), (80, 60)]):
        img = (rng.random((h, w, 3)) * 80).astype(np.uint8)
        img[h // 4: h // 2, w // 4: w // 2] = rng.integers(60, 255, 3)
        cv2.imwrite(str(root / f"p{i}.jpg"), img)
    return root


def test_a_detection_export_is_refused(tmp_path):
    path = build_detector(tmp_path / "det.onnx", task=None)
    with pytest.raises(ImportRefused, match="one output|1 output"):
        inspect_segmenter(path)
    with pytest.raises(ImportRefused, match="not 'segment'"):
        inspect_segmenter(build_detector(tmp_path / "det2.onnx", task="detect"))


def test_layout_is_read_from_the_export(tmp_path):
    info = inspect_segmenter(build_detector(tmp_path / "seg.onnx", head="segment", task="segment", nc=2, size=32))
    assert (info.imgsz, info.anchors, info.mask_dim, info.proto_size, info.half) == (32, 16, 32, 8, False)
    assert info.labels == ["class0", "class1"]


def test_import_packs_proves_and_publishes(tmp_path, photo_dir):
    src = build_detector(tmp_path / "seg.onnx", head="segment", task="segment", nc=2, size=32)
    result = import_segmentation_onnx(src, "tiny-seg", "1.0.0", tmp_path / "work", photos=user_photos(photo_dir),
                                      verify_ultralytics=False, params=SegParams(), license="MIT")
    m = result.primary.manifest
    assert m.task == "segmentation" and m.preprocess.anchors == 16 and m.preprocess.proto_size == 8
    assert m.gates["batch_proof"] and m.gates["dynamic_batch"] and len(m.outputs) == 1
    session = ort_session(result.primary.staging / "model.onnx", threads=1)
    out = session.run(None, {"images": np.random.default_rng(0).random((3, 3, 32, 32), dtype=np.float32)})[0]
    assert out.shape == (3, row_size(m.preprocess, 2))
    LocalRegistry(tmp_path / "registry").publish(result.primary.staging, m)
    assert LocalRegistry(tmp_path / "registry").has("tiny-seg", "1.0.0")
