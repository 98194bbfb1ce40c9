"""Verify an imported detector against ultralytics' own predictor: on the same ONNX file, or on the source .pt.

Why: an import is only trusted when the framework that made the model agrees with how triserve serves it. ultralytics
runs the published file with ITS letterbox, ITS ONNX Runtime call and ITS NMS (`YOLO(path, task='detect').predict`,
square letterbox: rect=False); triserve runs the family's letterbox -> ONNX Runtime -> capped NMS ->
boxes_to_original with the same thresholds (conf 0.25, iou 0.7, max_det 300: ultralytics' predict defaults). Every
box on either side must find a partner of the same class with IoU >= 0.9 and a score within 0.02.

For a .pt import the reference is the checkpoint itself in torch (`reference=` the .pt): `YOLO(pt).predict` with the
same imgsz/conf/iou/max_det and rect=False, and `nms=False` when the published head is end-to-end (ultralytics 8.4
then runs the head's one-to-one branch and only filters by confidence, as triserve does; without it, it would run
the one-to-many branch + NMS). The checkpoint's own task is kept: a segmentation or pose checkpoint served as
detection is compared with the boxes of ultralytics' segmentation or pose predictor.

ultralytics runs offline: YOLO_OFFLINE=1, YOLO_AUTOINSTALL=False, YOLO_CONFIG_DIR under the cache (or a temp) dir,
fonts in place (ultralytics_env.setup_ultralytics). torch and ultralytics are imported only here, inside the
functions, at import time; the serving path never needs them.
"""
from __future__ import annotations

import importlib.util
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from triserve.families.detection.importers.pipeline import nms_params, run_detector
from triserve.families.detection.importers.ultralytics_env import setup_ultralytics
from triserve.models.importing.agreement import Agreement, Dets, agreement
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.photos import read_rgb
from triserve.models.importing.result import GateFailed

log = logging.getLogger("triserve.importer")


def ultralytics_available() -> bool:
    return importlib.util.find_spec("ultralytics") is not None and importlib.util.find_spec("torch") is not None


@dataclass
class UltralyticsCheck:
    passed: bool
    agreement: Agreement
    ultralytics: list[Dets]
    triserve: list[Dets]
    images: list[str]
    min_iou: float
    max_score_diff: float
    labels: list[str] | None = None

    def worst_iou(self) -> float:
        return min((r["min_iou"] for r in self.agreement.per_image), default=1.0)

    def metrics(self) -> dict[str, float]:
        a = self.agreement
        return {"ultralytics_boxes": float(a.reference_boxes), "ultralytics_triserve_boxes": float(a.candidate_boxes),
                "ultralytics_matched": float(a.matched), "ultralytics_min_iou": self.worst_iou(),
                "ultralytics_mean_iou": a.mean_iou, "ultralytics_max_score_diff": a.max_score_diff}

    def report(self) -> list[dict]:
        return [{**row, "ultralytics_boxes": u.summary(self.labels), "triserve_boxes": t.summary(self.labels)}
                for row, u, t in zip(self.agreement.per_image, self.ultralytics, self.triserve)]

    def describe(self) -> str:
        return "; ".join(f"{r['image']}: ultralytics {r['reference']} boxes, triserve {r['candidate']}, matched "
                         f"{r['matched']} (min IoU {r['min_iou']:.3f}, max score diff {r['max_score_diff']:.3f})"
                         for r in self.agreement.per_image)


class CrossCheck(Protocol):
    """What a cross-check against ultralytics answers (UltralyticsCheck here, the pose family's PoseCheck)."""

    passed: bool
    agreement: Agreement

    def describe(self) -> str: ...


def require_agreement(check: CrossCheck, name: str, checkpoint: str, photos: int, predictor: str = "predictor",
                      nothing: str = "no box") -> None:
    """A checkpoint import's gate on its cross-check: GateFailed when triserve's pipeline on the exported graph
    disagrees with ultralytics' `predictor` on the `checkpoint`; a warning when ultralytics found nothing on the
    `photos` photos, since the check then proved nothing."""
    if not check.passed:
        raise GateFailed(f"{name}: triserve's pipeline on the exported graph disagrees with ultralytics' {predictor} "
                         f"on {checkpoint}: {check.describe()}")
    if check.agreement.reference_boxes == 0:
        log.warning("%s: ultralytics found %s on the %d photos: the cross-check is vacuous; pass --images with photos "
                    "of the model's own domain", name, nothing, photos)


def _setup(cache_dir: Path | None) -> None:
    root = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "triserve-importer"
    setup_ultralytics(root)


def ultralytics_predictions(onnx_path: Path, images: Sequence[Path], imgsz: int, conf: float = 0.25,
                            iou: float = 0.7, max_det: int = 300, cache_dir: Path | None = None,
                            end2end: bool = False) -> list[Dets]:
    """ultralytics' predictor on the file (an ONNX file, or a .pt checkpoint), one image at a time: boxes in original
    pixels. `end2end`: for a .pt, predict with its NMS-free one-to-one branch (nms=False); an ONNX file says in its
    metadata/shape."""
    _setup(cache_dir)
    from ultralytics import YOLO
    from ultralytics.engine.results import Results

    path = Path(onnx_path)
    is_pt = path.suffix.lower() == ".pt"
    model = YOLO(str(path)) if is_pt else YOLO(str(path), task="detect")
    extra = {"nms": False} if (is_pt and end2end) else {}
    out = []
    for img in images:
        (res,) = model.predict(source=str(img), imgsz=imgsz, conf=conf, iou=iou, max_det=max_det, rect=False,
                               device="cpu", verbose=False, save=False, **extra)  # one image: one result
        assert isinstance(res, Results) and res.boxes is not None, "a detector's result has boxes"
        b = res.boxes  # torch tensors on the CPU (device="cpu")
        out.append(Dets(np.asarray(b.xyxy, dtype=np.float64), np.asarray(b.conf, dtype=np.float32),
                        np.asarray(b.cls, dtype=np.int64)))
    return out


def verify_against_ultralytics(onnx_path: Path, images: Sequence[Path], pre, labels: Sequence[str] | None = None,
                               conf: float = 0.25, iou: float = 0.7, max_det: int = 300, min_iou: float = 0.9,
                               max_score_diff: float = 0.02, cache_dir: Path | None = None,
                               session=None, reference: Path | None = None) -> UltralyticsCheck:
    """Both predictors on each image; passed when every box on both sides is matched within the tolerances.

    `pre`: the manifest's DetectionPreprocess (its imgsz is also ultralytics' imgsz; its head selects triserve's
    decode and, for a .pt reference, ultralytics' branch). `reference`: what ultralytics runs (default: the ONNX file
    itself; a .pt checkpoint for a .pt import).
    """
    head = getattr(pre, "head", "anchors")
    theirs = ultralytics_predictions(Path(reference or onnx_path), images, pre.imgsz, conf, iou, max_det, cache_dir,
                                     end2end=head == "end2end")
    session = session or ort_session(onnx_path, threads=1)
    ours = run_detector(session, [read_rgb(p) for p in images], pre,
                        nms_params(conf, iou, max_det=max_det, topk=30000), batch=1)
    names = [f"{Path(p).parent.name}/{Path(p).name}" for p in images]
    agree = agreement(theirs, ours, names, min_iou=min_iou, confident=0.5)
    passed = agree.complete and agree.max_score_diff <= max_score_diff
    if labels:
        for d in theirs + ours:
            if len(d) and int(d.classes.max()) >= len(labels):
                passed = False
    return UltralyticsCheck(passed, agree, theirs, ours, names, min_iou, max_score_diff,
                            list(labels) if labels else None)
