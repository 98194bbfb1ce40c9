"""segmentation-pt on a small segment model built here from ultralytics' yolov8n-seg.yaml (random init: a contract
test of the full-head export, the packing and the proof; the ultralytics cross-check finds no instance on it, which
the real-checkpoint check covers with platedet's export)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("ultralytics")

from triserve.families.detection.importers.ultralytics_env import setup_ultralytics
from triserve.families.segmentation.importers.checkpoint import import_segmentation_pt, publish_segmentation_pt
from triserve.models.importing.photos import Photo, PhotoSet, ultralytics_assets
from triserve.models.importing.result import ImportRefused

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


def test_the_checkpoints_own_licence_text_is_read_as_spdx(seg_pt, tmp_path):
    """ultralytics writes 'AGPL-3.0 (https://ultralytics.com/license)' into a checkpoint: without --license that is
    the weights' licence, as SPDX (it was passed on as written and refused as not an SPDX expression)."""
    assets = ultralytics_assets()[:1]
    photos = PhotoSet(agreement=[Photo(f"ultralytics/{p.name}", p, "agreement") for p in assets])
    result = import_segmentation_pt(seg_pt, "tiny-seg", "1.0.0", tmp_path / "work", imgsz=128, photos=photos,
                                    cache_dir=tmp_path / "cache", require_license=True, verify_ultralytics=False)
    assert result.report["checkpoint"]["license"].startswith("AGPL-3.0")
    assert result.primary.manifest.source.license == "AGPL-3.0-only"


LAYERS = """
from ultralytics.nn.modules import Conv

class ScaledConv(Conv):
    \"\"\"The training code's own layer: a Conv under another class name (same forward).\"\"\"
"""


def test_a_checkpoint_with_the_training_codes_own_layer_imports_with_custom_modules(seg_pt, tmp_path):
    """The pickle names `mytrain_layers.ScaledConv`: without --custom-modules the checkpoint cannot be read; with it
    the import runs (read, export, ultralytics' predictor) and the manifest records the file's sha256; the module
    is gone afterwards."""
    import hashlib
    import importlib.util
    import sys

    import torch

    layers = tmp_path / "layers.py"
    layers.write_text(LAYERS)
    spec = importlib.util.spec_from_file_location("mytrain_layers", layers)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mytrain_layers"] = module
    try:
        spec.loader.exec_module(module)
        ck = torch.load(str(seg_pt), weights_only=False)
        ck["model"].model[0].__class__ = module.ScaledConv
        ck["ema"] = None
        torch.save(ck, str(tmp_path / "custom.pt"))
    finally:
        del sys.modules["mytrain_layers"]
    assets = ultralytics_assets()[:1]
    photos = PhotoSet(agreement=[Photo(f"ultralytics/{p.name}", p, "agreement") for p in assets])
    with pytest.raises(ImportRefused, match="mytrain_layers"):  # without the training code it cannot be read
        import_segmentation_pt(tmp_path / "custom.pt", "custom-seg", "1.0.0", tmp_path / "plain", imgsz=64,
                               photos=photos, cache_dir=tmp_path / "cache", license="AGPL-3.0-only")
    result = import_segmentation_pt(tmp_path / "custom.pt", "custom-seg", "1.0.0", tmp_path / "work", imgsz=64,
                                    photos=photos, cache_dir=tmp_path / "cache", license="AGPL-3.0-only",
                                    custom_modules=[f"mytrain_layers={layers}"])
    (record,) = result.primary.manifest.source.recipe["custom_modules"]
    assert record["sha256"] == hashlib.sha256(layers.read_bytes()).hexdigest() and record["alias"] == "mytrain_layers"
    assert result.primary.manifest.gates["batch_proof"] and "mytrain_layers" not in sys.modules


def test_custom_modules_refuses_a_missing_file(seg_pt, tmp_path):
    from triserve.models.registry import LocalRegistry

    with pytest.raises((ImportRefused, ValueError), match="no such file|no_such_layers"):
        publish_segmentation_pt(seg_pt, "x", "1.0.0", LocalRegistry(tmp_path / "reg"),
                                custom_modules=[str(tmp_path / "no_such_layers.py")])
