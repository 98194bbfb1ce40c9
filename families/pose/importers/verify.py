"""Verify an imported pose model against ultralytics' own pose predictor: boxes as the detection importers check
them, and the keypoints of every matched instance.

Why keypoints too: a pose import that gets the boxes right but the keypoint channels in another order, unscaled, or
offset by the letterbox pad would pass a box check and answer nonsense. ultralytics runs the checkpoint (or the ONNX
file) with ITS letterbox, ITS NMS and ITS scale_coords (`YOLO(path).predict`, rect=False, predict defaults conf 0.25,
iou 0.7, max_det 300); triserve runs the family's letterbox -> ONNX Runtime -> capped NMS -> boxes_to_original /
keypoints_to_original with the same thresholds. Every box on either side must find a partner of the same class with
IoU >= 0.9 and a score within 0.02 (triserve.models.importing.agreement), and in every matched pair every keypoint that
ultralytics reports visible (confidence >= 0.5, or every keypoint of a 2-dim model) must lie within 2 px, its
confidence within 0.02.

torch and ultralytics are imported inside the functions.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from triserve.families.detection.importers.pipeline import nms_params
from triserve.families.detection.importers.ultralytics_env import setup_ultralytics
from triserve.families.pose.importers.run import PoseDets, run_pose
from triserve.families.pose.manifest import PosePreprocess
from triserve.models.importing.agreement import Agreement, Dets, agreement, match
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.photos import read_rgb


@dataclass(frozen=True)
class PoseCheckParams:
    conf: float = 0.25  # ultralytics' predict defaults
    iou: float = 0.7
    max_det: int = 300
    min_iou: float = 0.9
    max_score_diff: float = 0.02
    max_keypoint_px: float = 2.0
    max_keypoint_conf_diff: float = 0.02
    visible: float = 0.5  # a reference keypoint at or above this confidence is checked


POSE_CHECK = PoseCheckParams()


@dataclass
class PoseCheck:
    passed: bool
    agreement: Agreement
    images: list[str]
    keypoints_checked: int = 0
    max_keypoint_px: float = 0.0
    max_keypoint_conf_diff: float = 0.0
    problems: list[str] = field(default_factory=list)
    per_image: list[dict] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        a = self.agreement
        return {"ultralytics_boxes": float(a.reference_boxes), "ultralytics_triserve_boxes": float(a.candidate_boxes),
                "ultralytics_matched": float(a.matched),
                "ultralytics_min_iou": min((r["min_iou"] for r in a.per_image), default=1.0),
                "ultralytics_max_score_diff": a.max_score_diff,
                "ultralytics_keypoints_checked": float(self.keypoints_checked),
                "ultralytics_max_keypoint_px": self.max_keypoint_px,
                "ultralytics_max_keypoint_conf_diff": self.max_keypoint_conf_diff}

    def describe(self) -> str:
        rows = "; ".join(f"{r['image']}: ultralytics {r['reference']} people, triserve {r['candidate']}, matched "
                         f"{r['matched']} (min IoU {r['min_iou']:.3f}, max score diff {r['max_score_diff']:.3f}, "
                         f"worst visible keypoint {r['max_keypoint_px']:.2f} px)" for r in self.per_image)
        return rows + (f"; {'; '.join(self.problems[:5])}" if self.problems else "")


def ultralytics_poses(path: Path, images: Sequence[Path], imgsz: int, params: PoseCheckParams = POSE_CHECK,
                      cache_dir: Path | None = None) -> list[PoseDets]:
    """ultralytics' pose predictor on the file (a .pt checkpoint, or an ONNX export), one image at a time."""
    setup_ultralytics(Path(cache_dir) if cache_dir else Path("/tmp/triserve-importer"))
    from ultralytics import YOLO
    from ultralytics.engine.results import Results

    path = Path(path)
    model = YOLO(str(path)) if path.suffix.lower() == ".pt" else YOLO(str(path), task="pose")
    out = []
    for img in images:
        (res,) = model.predict(source=str(img), imgsz=imgsz, conf=params.conf, iou=params.iou,
                               max_det=params.max_det, rect=False, device="cpu", verbose=False, save=False)
        assert isinstance(res, Results) and res.boxes is not None, "a pose result has boxes"
        b, k = res.boxes, res.keypoints
        kpts = np.asarray(k.data, dtype=np.float64) if k is not None else np.zeros((0, 0, 3))
        out.append(PoseDets(Dets(np.asarray(b.xyxy, dtype=np.float64), np.asarray(b.conf, dtype=np.float32),
                                 np.asarray(b.cls, dtype=np.int64)), kpts))
    return out


def compare_poses(theirs: Sequence[PoseDets], ours: Sequence[PoseDets], names: Sequence[str], nc: int,
                  params: PoseCheckParams = POSE_CHECK) -> PoseCheck:
    """Boxes matched as the detection importers match them, then the keypoints of every matched pair."""
    agree = agreement([t.dets for t in theirs], [o.dets for o in ours], names, min_iou=params.min_iou,
                      confident=0.5)
    check = PoseCheck(False, agree, list(names))
    for k, (t, o) in enumerate(zip(theirs, ours, strict=True)):
        worst_px, checked, within = 0.0, 0, 0
        for i, j, _ in match(t.dets, o.dets, params.min_iou):
            ref, got = t.keypoints[i], o.keypoints[j]
            if ref.shape != got.shape:
                check.problems.append(f"{names[k]}: keypoints {ref.shape} vs {got.shape}")
                continue
            visible = ref[:, 2] >= params.visible if ref.shape[1] > 2 else np.ones(len(ref), bool)
            dist = np.linalg.norm(ref[visible, :2] - got[visible, :2], axis=-1)
            checked += int(visible.sum())
            within += int((dist <= params.max_keypoint_px).sum())
            if dist.size:
                worst_px = max(worst_px, float(dist.max()))
            if ref.shape[1] > 2:
                check.max_keypoint_conf_diff = max(check.max_keypoint_conf_diff,
                                                   float(np.abs(ref[:, 2] - got[:, 2]).max(initial=0.0)))
        check.keypoints_checked += checked
        check.max_keypoint_px = max(check.max_keypoint_px, worst_px)
        check.per_image.append({**agree.per_image[k], "max_keypoint_px": worst_px, "keypoints_checked": checked,
                                "keypoints_within": within})
    if any(len(d.dets) and int(d.dets.classes.max()) >= nc for d in [*theirs, *ours]):
        check.problems.append("class ids outside the label set")
    if check.max_keypoint_px > params.max_keypoint_px:
        check.problems.append(f"a visible keypoint is {check.max_keypoint_px:.2f} px from ultralytics' (max "
                              f"{params.max_keypoint_px})")
    if check.max_keypoint_conf_diff > params.max_keypoint_conf_diff:
        check.problems.append(f"a keypoint confidence differs by {check.max_keypoint_conf_diff:.3f} (max "
                              f"{params.max_keypoint_conf_diff})")
    check.passed = (agree.complete and agree.max_score_diff <= params.max_score_diff and not check.problems)
    return check


def verify_pose(onnx_path: Path, images: Sequence[Path], pre: PosePreprocess, nc: int, reference: Path | None = None,
                params: PoseCheckParams = POSE_CHECK, cache_dir: Path | None = None) -> PoseCheck:
    """ultralytics on `reference` (default: the ONNX file itself) vs triserve's path on the ONNX file."""
    theirs = ultralytics_poses(Path(reference or onnx_path), images, pre.imgsz, params, cache_dir)
    ours = run_pose(ort_session(onnx_path, threads=1), [read_rgb(p) for p in images], pre, nc,
                    nms_params(params.conf, params.iou, max_det=params.max_det, topk=30000))
    names = [f"{Path(p).parent.name}/{Path(p).name}" for p in images]
    return compare_poses(theirs, ours, names, nc, params)
