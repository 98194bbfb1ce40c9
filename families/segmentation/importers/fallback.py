"""The INT8 sibling of a segment import (`<name>-int8`): static QDQ INT8 like the detection family's fallback
(families/detection/importers/quantize.py: the convolutions quantised, the head's decode kept FP32; here the whole
Segment head after its box and class convolutions stays FP32: the mask-coefficient branch and the prototypes feed
mask logits whose sign is the mask), then packed like the primary (pack.py).

Gated against the FP32 primary on the agreement photos (the family's own serving path on both graphs, the same
thresholds): the same label set, instances matched (same class, box IoU >= 0.5) with share >= 0.8, mean mask IoU of
the matched pairs >= 0.8, enough reference instances to judge, and cheaper (one-core median latency x1.2).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triserve.families.detection.importers.pipeline import letterboxed
from triserve.families.detection.importers.quantize import quantize_int8
from triserve.families.segmentation.importers.pack import pack_outputs, to_float32
from triserve.families.segmentation.importers.verify import SegPrediction, mask_iou, triserve_segments
from triserve.families.segmentation.manifest import SegmentationPreprocess
from triserve.models.importing import batching
from triserve.models.importing.agreement import agreement, match
from triserve.models.importing.graphs import ort_session, time_interleaved

log = logging.getLogger("triserve.importer")


@dataclass(frozen=True)
class Int8Gates:
    min_share: float = 0.8  # 2 x matched / (FP32 instances + INT8 instances), boxes IoU >= min_iou
    min_iou: float = 0.5
    min_mean_mask_iou: float = 0.8
    min_reference_instances: int = 5
    min_speedup: float = 1.2


INT8_GATES = Int8Gates()


@dataclass
class Int8Result:
    path: Path | None  # the packed INT8 graph when it passed
    passed: bool
    reason: str
    metrics: dict[str, float]
    method: dict
    dynamic: bool


def judge(fp32: list[SegPrediction], int8: list[SegPrediction], names: list[str],
          gates: Int8Gates = INT8_GATES) -> tuple[dict[str, float], list[str]]:
    """Agreement of the INT8 graph's instances with the FP32 graph's: (metrics, reasons it fails)."""
    agree = agreement([d.dets for d in fp32], [d.dets for d in int8], names, min_iou=gates.min_iou)
    ious = [mask_iou(a.masks[i], b.masks[j]) for a, b in zip(fp32, int8) for i, j, _ in
            match(a.dets, b.dets, gates.min_iou)]
    metrics = {**agree.metrics("fp32_agreement"), "fp32_mean_mask_iou": float(np.mean(ious)) if ious else 0.0}
    why = []
    if agree.reference_boxes < gates.min_reference_instances:
        why.append(f"only {agree.reference_boxes} FP32 instances on the agreement photos (min "
                   f"{gates.min_reference_instances}): nothing to judge on")
    if agree.share < gates.min_share:
        why.append(f"agreement share {agree.share:.3f} < {gates.min_share}")
    if metrics["fp32_mean_mask_iou"] < gates.min_mean_mask_iou:
        why.append(f"mean mask IoU {metrics['fp32_mean_mask_iou']:.3f} < {gates.min_mean_mask_iou}")
    return metrics, why


def build_int8(source: Path, head: str, protos: str, primary: Path, pre: SegmentationPreprocess, num_classes: int,
               images: list[np.ndarray], names: list[str], calibration: list[np.ndarray], work: Path,
               conf: float, gates: Int8Gates = INT8_GATES) -> Int8Result:
    """Quantise the user's graph (float32 first), pack it, and gate it against the packed FP32 `primary`."""
    import onnx

    work.mkdir(parents=True, exist_ok=True)
    fp32 = onnx.load(str(source))
    to_float32(fp32)
    fp32_path = batching.save(fp32, work / "fp32.onnx")
    cal, _ = letterboxed(calibration, pre)
    cal = np.concatenate([cal, cal[:, :, :, ::-1]])
    feeds = [{fp32.graph.input[0].name: cal[i:i + 1]} for i in range(len(cal))]
    q_path = work / "int8.onnx"
    method = quantize_int8(fp32_path, q_path, feeds, work / "q", "decode")
    model = onnx.load(str(q_path))
    dynamic = False
    try:
        model, _ = batching.make_batch_dynamic(model)
        dynamic = True
    except Exception as exc:  # noqa: BLE001 - a graph the rewrite cannot batch is served one item at a time
        log.warning("INT8 batch rewrite failed (%s): served at batch 1", exc)
    packed = batching.save(pack_outputs(model, head, protos), work / "int8.packed.onnx")
    session = ort_session(packed, threads=1)
    if dynamic:  # rows at batch 2 must equal rows at batch 1 (a rewrite that mixes rows must not serve)
        x, _ = letterboxed(images[:2] if len(images) >= 2 else images * 2, pre)
        name = session.get_inputs()[0].name
        both = session.run(None, {name: x})[0]
        single = np.concatenate([session.run(None, {name: x[i:i + 1]})[0] for i in range(2)])
        dynamic = bool(np.abs(both - single).max() <= 1e-3 * pre.imgsz)
        if not dynamic:
            model = onnx.load(str(q_path))
            packed = batching.save(pack_outputs(model, head, protos), work / "int8.packed.onnx")
            session = ort_session(packed, threads=1)
    fp32_pred = triserve_segments(ort_session(primary, threads=1), images, pre, num_classes, conf=conf)
    int8_pred = triserve_segments(session, images, pre, num_classes, conf=conf)
    metrics, why = judge(fp32_pred, int8_pred, names, gates)
    feed = {session.get_inputs()[0].name: letterboxed(images[:1], pre)[0]}
    lat = time_interleaved({"fp32": primary, "int8": packed}, {"b1": feed}, threads=1, warmup=2, repeats=7,
                           min_sample_ms=50.0)
    fp32_ms, q_ms = lat["fp32"]["b1"]["median"], lat["int8"]["b1"]["median"]
    metrics.update({"fp32_ms_per_image": fp32_ms, "ms_per_image": q_ms, "speedup_vs_fp32": fp32_ms / max(q_ms, 1e-9)})
    if metrics["speedup_vs_fp32"] < gates.min_speedup:
        why.append(f"speedup x{metrics['speedup_vs_fp32']:.2f} < x{gates.min_speedup}")
    method["summary"] = (f"static INT8 (QDQ, per-channel, MinMax on {len(feeds)} letterboxed photos incl. mirrors), "
                         f"the Segment head after its box/class convolutions kept FP32")
    return Int8Result(packed if not why else None, not why, "; ".join(why), metrics, method, dynamic)
