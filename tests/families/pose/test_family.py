"""The pose family's contract pieces: output sanity through the manifest, and the shadow agreement (boxes as
detection's, times the share of keypoints the shadow keeps in place)."""
from __future__ import annotations

import numpy as np
import pytest

from triserve import families
from triserve.families.pose.family import pose_agreement
from triserve.kernel.errors import InvalidOutput

KPT = (2, 3)


def raw(dx: float = 0.0) -> np.ndarray:
    out = np.zeros((4 + 1 + 6, 4), np.float32)
    out[:4, 0], out[4, 0] = [20, 20, 10, 10], 0.9
    out[:4, 1], out[4, 1] = [50, 50, 10, 10], 0.8
    out[5:, 0] = [18 + dx, 18, 0.9, 22 + dx, 22, 0.9]
    out[5:, 1] = [48 + dx, 48, 0.9, 52 + dx, 52, 0.9]
    return out


def test_agreement_is_one_for_the_same_answer_and_falls_with_moved_keypoints():
    assert pose_agreement(raw(), raw(), 1, KPT) == 1.0
    assert pose_agreement(raw(), raw(dx=20.0), 1, KPT) == 0.0  # same boxes, every keypoint 20 px away
    assert pose_agreement(np.zeros_like(raw()), np.zeros_like(raw()), 1, KPT) == 1.0  # both see nobody
    assert pose_agreement(raw(), np.zeros_like(raw()), 1, KPT) == 0.0


def test_the_family_is_registered_with_its_routes_and_checks_outputs():
    from types import SimpleNamespace

    from triserve.families.pose.keypoints import keypoint_schema
    from triserve.families.pose.manifest import PosePreprocess

    fam = families.family("pose")
    assert fam.api.grpc_method == "Pose" and fam.api.oip.alias == "pose"
    assert [r.path for r in fam.api.routes] == ["/v1/pose", "/v1/pose/upload"]
    manifest = SimpleNamespace(labels=["person"], preprocess=PosePreprocess(
        imgsz=64, **keypoint_schema([2, 3], ["person"])))
    fam.check_outputs(manifest, [raw()])
    with pytest.raises(InvalidOutput):
        fam.check_outputs(manifest, [raw()[:-3]])


def test_the_runner_refuses_a_fallback_with_another_keypoint_schema():
    """runners/repository_state.check_pair (startup and every runtime change) compares the preprocess record's
    answer_schema beside the labels: a fallback naming its keypoints otherwise cannot stand in."""
    from types import SimpleNamespace

    from triserve.families.pose.keypoints import keypoint_schema
    from triserve.families.pose.manifest import PosePreprocess
    from triserve.runners.repository_state import IncompatibleFallback, Manifested, check_pair

    coco = PosePreprocess(imgsz=640, **keypoint_schema([17, 3], ["person"]))

    def model(name: str, pre: PosePreprocess) -> Manifested:
        return Manifested(SimpleNamespace(name=name, version="1", task="pose", labels=["person"],  # type: ignore
                                          preprocess=pre))

    dep = SimpleNamespace(name="people", family="pose")
    check_pair(dep, model("p", coco), model("f", coco.model_copy(update={"imgsz": 320})))  # type: ignore[arg-type]
    indexed = coco.model_copy(update={"keypoint_names": [f"kp{i}" for i in range(17)], "names_from": "index"})
    with pytest.raises(IncompatibleFallback, match="another schema"):
        check_pair(dep, model("p", coco), model("f", indexed))  # type: ignore[arg-type]
