"""Evaluate an exported detector through the serving path: ONNX Runtime + our letterbox + our capped NMS; and the
drift references its manifest records.

Why not ultralytics' validator: it measures the torch model with its own preprocessing and NMS. What we publish is the
ONNX graph behind families/vision/letterbox.py and families/vision/nms.py, so that is what is scored.
Only the AP arithmetic (precision/recall curves, 101-point interpolation) is borrowed from ultralytics (imported in
evaluate(): the export extra). The detection-pt importer scores a user's checkpoint with it (--data), the pipeline
(scripts/detection/build.py) the detector it trains.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from triserve.families.vision.letterbox import boxes_to_original, preprocess_image
from triserve.families.vision.nms import NMSParams, nms
from triserve.models.importing.agreement import Dets
from triserve.models.importing.photos import read_rgb
from triserve.models.importing.references import histogram_reference

IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)
# Like ultralytics val: a very low confidence floor so the whole precision/recall curve is scored.
EVAL_NMS = NMSParams(conf_threshold=0.001, iou_threshold=0.7, pre_nms_topk=30000, max_detections=300)
# drift references (manifest `reference`): the served confidences and the boxes per image
CONFIDENCE_BINS = np.linspace(0, 1, 21)
BOXES_PER_IMAGE_BINS = np.arange(0, 32)  # one bin per count 0..30: [0,1), [1,2), ..., [30,31]; counts clip at 30


@dataclass(frozen=True)
class LabeledImage:
    """An image file and its ground truth in original pixels."""

    path: Path
    classes: np.ndarray  # [k] int64
    boxes: np.ndarray  # [k, 4] float64 x1 y1 x2 y2


@dataclass
class EvalResult:
    map50: float
    map50_95: float
    images: int
    instances: int
    per_class_ap50: dict[int, float] = field(default_factory=dict)
    confidences: np.ndarray = field(default_factory=lambda: np.zeros(0))  # kept detections at serving thresholds
    boxes_per_image: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def yolo_labels(image: Path, label: Path) -> LabeledImage:
    """A YOLO-format label file ("cls cx cy w h", normalised) -> pixel boxes for `image`."""
    img = cv2.imread(str(image), cv2.IMREAD_UNCHANGED)
    if img is None:
        raise FileNotFoundError(image)
    h, w = img.shape[:2]
    has_rows = label.is_file() and label.stat().st_size > 0  # a missing or empty file is an image without objects
    rows = np.loadtxt(label, ndmin=2, dtype=np.float64) if has_rows else np.zeros((0, 5))
    cls, cx, cy, bw, bh = (rows[:, i] for i in range(5))
    boxes = np.stack([(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h], 1)
    return LabeledImage(image, cls.astype(np.int64), boxes.reshape(-1, 4))


def _box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[M,4] x [N,4] -> [M,N] IoU."""
    tl = np.maximum(a[:, None, :2], b[None, :, :2])
    br = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(br - tl, 0, None).prod(-1)
    area_a = (a[:, 2:] - a[:, :2]).clip(0).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).clip(0).prod(-1)
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-9)


def match(pred_boxes: np.ndarray, pred_cls: np.ndarray, gt_boxes: np.ndarray, gt_cls: np.ndarray) -> np.ndarray:
    """[N, 10] bool: is each prediction (sorted by descending confidence) a true positive at each IoU threshold.

    Greedy in confidence order, one ground truth per prediction per threshold (ultralytics' non-scipy matching).
    """
    correct = np.zeros((len(pred_boxes), len(IOU_THRESHOLDS)), bool)
    if len(pred_boxes) == 0 or len(gt_boxes) == 0:
        return correct
    iou = _box_iou(gt_boxes, pred_boxes) * (gt_cls[:, None] == pred_cls[None, :])
    claimed = np.zeros((len(gt_boxes), len(IOU_THRESHOLDS)), bool)
    cols = range(len(IOU_THRESHOLDS))
    for j in np.flatnonzero((iou >= IOU_THRESHOLDS.min()).any(0)):
        available = np.where(claimed, 0.0, iou[:, j, None])
        k = available.argmax(0)
        correct[j] = available[k, cols] >= IOU_THRESHOLDS
        claimed[k, cols] |= correct[j]
    return correct


def evaluate(session, images: Sequence[LabeledImage], imgsz: int, batch: int = 16,
             serving_nms: NMSParams = NMSParams(), eval_nms: NMSParams = EVAL_NMS,
             progress: bool = True, desc: str = "evaluate") -> EvalResult:
    """mAP50 and mAP50-95 of an ONNX detector on labelled images, through the serving pre/post-processing."""
    from tqdm import tqdm
    from ultralytics.utils.metrics import ap_per_class

    input_name = session.get_inputs()[0].name
    tps, confs, pcls, tcls = [], [], [], []
    served_conf, per_image = [], []
    with tqdm(total=len(images), desc=desc, unit="img", disable=not progress) as bar:
        for start in range(0, len(images), batch):
            chunk = images[start:start + batch]
            tensors, metas = zip(*(preprocess_image(read_rgb(item.path), imgsz) for item in chunk))
            raw = session.run(None, {input_name: np.stack(tensors)})[0]
            for item, meta, out in zip(chunk, metas, raw):
                det = nms(out, eval_nms)
                boxes = boxes_to_original(det.boxes, meta)
                tps.append(match(boxes, det.classes, item.boxes, item.classes))
                confs.append(det.scores)
                pcls.append(det.classes)
                tcls.append(item.classes)
                served = nms(out, serving_nms)
                served_conf.append(served.scores)
                per_image.append(len(served.scores))
            bar.update(len(chunk))
    tp = np.concatenate(tps) if tps else np.zeros((0, 10), bool)
    conf = np.concatenate(confs) if confs else np.zeros(0)
    pred_cls = np.concatenate(pcls) if pcls else np.zeros(0)
    target_cls = np.concatenate(tcls) if tcls else np.zeros(0)
    if target_cls.size == 0:
        raise ValueError("no ground-truth objects in the evaluation set")
    result = ap_per_class(tp, conf, pred_cls, target_cls, plot=False)
    ap, classes = result[5], result[6]  # ap: [classes with labels, 10]
    return EvalResult(
        map50=float(ap[:, 0].mean()) if len(ap) else 0.0,
        map50_95=float(ap.mean()) if len(ap) else 0.0,
        images=len(images),
        instances=int(target_cls.size),
        per_class_ap50={int(c): float(a) for c, a in zip(classes, ap[:, 0])},
        confidences=np.concatenate(served_conf) if served_conf else np.zeros(0),
        boxes_per_image=np.asarray(per_image, np.int64),
    )


def latency_ab(session, sizes: Sequence[int], runs: int = 30, warmup: int = 3, seed: int = 0) -> dict[int, float]:
    """Median batch-1 latency in ms per input size, measured interleaved (A, B, A, B, ...) so drift hits all alike."""
    rng = np.random.default_rng(seed)
    input_name = session.get_inputs()[0].name
    feeds = {s: rng.random((1, 3, s, s), dtype=np.float32) for s in sizes}
    for s in sizes:
        for _ in range(warmup):
            session.run(None, {input_name: feeds[s]})
    samples: dict[int, list[float]] = {s: [] for s in sizes}
    for _ in range(runs):
        for s in sizes:
            t0 = time.perf_counter()
            session.run(None, {input_name: feeds[s]})
            samples[s].append((time.perf_counter() - t0) * 1000)
    return {s: float(np.median(v)) for s, v in samples.items()}


def reference_distribution(result) -> dict[str, dict[str, list[float]]]:
    """The drift references of a detector: `result` has the served `confidences` and `boxes_per_image` (an
    EvalResult, or the same two arrays from any run of the serving path)."""
    return {
        "confidence": histogram_reference(result.confidences, CONFIDENCE_BINS),
        "boxes_per_image": histogram_reference(np.minimum(result.boxes_per_image, 30), BOXES_PER_IMAGE_BINS),
    }


def detection_references(dets: Sequence[Dets]) -> dict[str, dict[str, list[float]]]:
    """reference_distribution from detections (unlabelled photos run through the serving path)."""
    conf = np.concatenate([d.scores for d in dets]) if dets else np.zeros(0)
    return reference_distribution(EvalResult(map50=0.0, map50_95=0.0, images=len(dets), instances=0,
                                             confidences=conf,
                                             boxes_per_image=np.array([len(d) for d in dets], np.int64)))
