"""Verify a segmentation import against ultralytics' own segment predictor: boxes AND masks, on real photos.

ultralytics runs the user's file (an ONNX export with `YOLO(path, task='segment')`, or the .pt) with ITS letterbox,
ITS NMS and ITS mask assembly at the original resolution (retina_masks=True: ops.process_mask_native); triserve runs
the published packed graph through the family's serving path (postprocess.instances) with the same thresholds (conf
0.25, iou 0.7, max_det 300: ultralytics' predict defaults). Every box on either side must find a partner of the same
class with box IoU >= 0.9 and a score within 0.02, and every matched pair's masks must have IoU >= 0.9.
torch and ultralytics are imported inside the functions only; the serving path never needs them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from triserve.families.detection.importers.pipeline import nms_params
from triserve.families.detection.importers.ultralytics_env import setup_ultralytics
from triserve.families.segmentation.limits import Limits
from triserve.families.segmentation.manifest import SegmentationPreprocess
from triserve.families.segmentation.postprocess import instances
from triserve.families.vision.letterbox import preprocess_image
from triserve.models.importing.agreement import Dets, agreement, match
from triserve.models.importing.photos import read_rgb


@dataclass
class SegPrediction:
    """One image: boxes, scores, classes (original pixels) and whole-image bool masks [k, h, w]."""

    dets: Dets
    masks: list[np.ndarray] = field(default_factory=list)


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    union = int(np.logical_or(a, b).sum())
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def ultralytics_segments(source: Path, images: Sequence[Path], imgsz: int, cache_dir: Path, conf: float = 0.25,
                         iou: float = 0.7, max_det: int = 300) -> list[SegPrediction]:
    """ultralytics' segment predictor on `source` (.onnx or .pt), masks at the original resolution."""
    setup_ultralytics(Path(cache_dir))
    from ultralytics import YOLO
    from ultralytics.engine.results import Results

    path = Path(source)
    model = YOLO(str(path)) if path.suffix.lower() == ".pt" else YOLO(str(path), task="segment")
    out = []
    for img in images:
        (res,) = model.predict(source=str(img), imgsz=imgsz, conf=conf, iou=iou, max_det=max_det, rect=False,
                               retina_masks=True, device="cpu", verbose=False, save=False)
        assert isinstance(res, Results) and res.boxes is not None, "a segmenter's result has boxes"
        b = res.boxes  # torch tensors on the CPU (device="cpu")
        masks = [] if res.masks is None else [np.asarray(m, bool) for m in np.asarray(res.masks.data) > 0.5]
        out.append(SegPrediction(Dets(np.asarray(b.xyxy, np.float64), np.asarray(b.conf, np.float32),
                                      np.asarray(b.cls, np.int64)), masks))
    return out


def triserve_segments(session, images: Sequence[np.ndarray], pre: SegmentationPreprocess, num_classes: int,
                      conf: float = 0.25, iou: float = 0.7, max_det: int = 300) -> list[SegPrediction]:
    """The family's serving path on the packed graph, one image per call, with the default per-instance sample
    budget (what a deployment serves: large boxes' masks on their sample grid)."""
    params = nms_params(conf, iou, max_det=max_det, topk=30000)
    name = session.get_inputs()[0].name
    out = []
    for img in images:
        x, meta = preprocess_image(img, pre.imgsz, pre.pad_value, pre.scale, pre.color_order)
        row = session.run(None, {name: x[None]})[0][0]
        kept, boxes, masks, _ = instances(row, meta, pre, num_classes, params,
                                       max_mask_samples=Limits().max_mask_samples)
        d = kept.detections
        out.append(SegPrediction(Dets(boxes, d.scores.astype(np.float32), d.classes.astype(np.int64)),
                                 [m.full() for m in masks if m is not None]))  # no budget: every mask
    return out


@dataclass
class SegCheck:
    passed: bool
    rows: list[dict]
    reference_instances: int

    def metrics(self) -> dict[str, float]:
        return {"ultralytics_instances": float(self.reference_instances),
                "ultralytics_matched": float(sum(r["matched"] for r in self.rows)),
                "ultralytics_min_box_iou": min((r["min_iou"] for r in self.rows), default=1.0),
                "ultralytics_min_mask_iou": min((r["min_mask_iou"] for r in self.rows), default=1.0),
                "ultralytics_max_score_diff": max((r["max_score_diff"] for r in self.rows), default=0.0)}

    def describe(self) -> str:
        return "; ".join(f"{r['image']}: ultralytics {r['reference']} instances, triserve {r['candidate']}, matched "
                         f"{r['matched']} (min box IoU {r['min_iou']:.3f}, min mask IoU {r['min_mask_iou']:.3f}, "
                         f"max score diff {r['max_score_diff']:.3f})" for r in self.rows)


def compare(theirs: Sequence[SegPrediction], ours: Sequence[SegPrediction], names: Sequence[str],
            min_iou: float = 0.9, min_mask_iou: float = 0.9, max_score_diff: float = 0.02) -> SegCheck:
    """Boxes matched like the detection importers (triserve.models.importing.agreement), then each pair's mask IoU."""
    agree = agreement([t.dets for t in theirs], [o.dets for o in ours], names, min_iou=min_iou, confident=0.5)
    rows = []
    passed = agree.complete and agree.max_score_diff <= max_score_diff
    for row, t, o in zip(agree.per_image, theirs, ours):
        ious = [mask_iou(t.masks[i], o.masks[j]) for i, j, _ in match(t.dets, o.dets, min_iou)]
        row = {**row, "min_mask_iou": min(ious, default=1.0), "mask_ious": [round(v, 4) for v in ious]}
        passed = passed and row["min_mask_iou"] >= min_mask_iou
        rows.append(row)
    return SegCheck(passed, rows, agree.reference_boxes)


def verify(source: Path, session, image_paths: Sequence[Path], pre: SegmentationPreprocess, num_classes: int,
           cache_dir: Path, min_iou: float = 0.9, min_mask_iou: float = 0.9,
           max_score_diff: float = 0.02, conf: float = 0.25) -> SegCheck:
    theirs = ultralytics_segments(source, image_paths, pre.imgsz, cache_dir, conf=conf)
    ours = triserve_segments(session, [read_rgb(p) for p in image_paths], pre, num_classes, conf=conf)
    names = [f"{Path(p).parent.name}/{Path(p).name}" for p in image_paths]
    return compare(theirs, ours, names, min_iou, min_mask_iou, max_score_diff)
