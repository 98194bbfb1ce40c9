"""segmentation-pt on a small segment model built here from ultralytics' yolov8n-seg.yaml (random init: a contract
test of the full-head export, the packing and the proof; the ultralytics cross-check finds no instance on it, which
the real-checkpoint check covers with platedet's export)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("ultralytics")

from families.detection.importers.ultralytics_env import setup_ultralytics
from families.segmentation.importers.checkpoint import import_segmentation_pt, publish_segmentation_pt
from models.importing.photos import Photo, PhotoSet, ultralytics_assets
from models.importing.result import ImportRefused

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def seg_pt(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("segpt")
    setup_ultralytics(root)
    from ultralytics import YOLO

    path = root / "tiny-seg.pt"
    YOLO("yolov8n-seg.yaml").save(str(path))
    return path


def test_segment_checkpoint_is_exported_with_its_mask_branch(seg_pt, tmp_path):
    assets = ultralytics_assets()[:1]
    photos = PhotoSet(agreement=[Photo(f"ultralytics/{p.name}", p, "agreement") for p in assets])
    result = import_segmentation_pt(seg_pt, "tiny-seg", "1.0.0", tmp_path / "work", imgsz=128, photos=photos,
                                    cache_dir=tmp_path / "cache", license="AGPL-3.0-only")
    m = result.primary.manifest
    assert m.task == "segmentation" and len(m.labels) == 80
    assert (m.preprocess.anchors, m.preprocess.mask_dim, m.preprocess.proto_size) == (16 * 16 + 8 * 8 + 4 * 4, 32, 32)
    assert m.gates["batch_proof"] and m.gates["dynamic_batch"]
    assert result.report["checkpoint"]["task"] == "segment" and m.source.recipe["importer"] == "segmentation-pt"


def test_custom_modules_are_refused_until_the_loader_lands(seg_pt, tmp_path):
    from models.registry import LocalRegistry

    with pytest.raises(ImportRefused, match="custom_modules"):
        publish_segmentation_pt(seg_pt, "x", "1.0.0", LocalRegistry(tmp_path / "reg"), custom_modules=["mymod"])
