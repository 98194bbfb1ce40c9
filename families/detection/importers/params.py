"""The detection ONNX import's tolerances and gates (part of its recipe hash, recorded in the manifest): ImportParams
for the batch proof, the serving thresholds and the ultralytics cross-check; FallbackGates for a cheaper variant."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ImportParams:
    """Tolerances and gates of an import (part of the recipe hash, recorded in the manifest)."""

    proof_batches: tuple[int, ...] = (4, 2)
    box_tolerance_rel: float = 1e-4  # x imgsz, in pixels (float32 pixel coordinates carry ~3e-5 per ulp at 640)
    score_tolerance: float = 1e-4
    serving_conf: float = 0.25  # NMSParams defaults: what the service applies, used for references and agreement
    serving_iou: float = 0.45
    # ultralytics cross-check: its predict defaults (conf 0.25, iou 0.7, max_det 300)
    ultralytics_conf: float = 0.25
    ultralytics_iou: float = 0.7
    ultralytics_min_iou: float = 0.9
    ultralytics_max_score_diff: float = 0.02
    latency_repeats: int = 9
    fallback_sizes: tuple[int, ...] = (416, 320)


PARAMS = ImportParams()


@dataclass(frozen=True)
class FallbackGates:
    """What a cheaper variant must keep of the FP32 primary, on held-out photos (measured numbers in the manifest).

    Measured for yolov8n-coco (6 held-out photos, 78 FP32 boxes): INT8 with the decode kept FP32 reaches share 0.92,
    mean IoU 0.95, every confident box kept, 2x faster on one core; quantising the decode too finds no box at all.
    The bars leave room for calibration noise, not for a broken graph. Boxes near the 0.25 threshold flip either
    way under INT8 (their scores move by a quantisation step), which is why share is not asked to be ~1.
    """

    min_iou: float = 0.5  # a matched pair: same class, IoU >= 0.5
    # fewer FP32 boxes than this on the agreement photos and there is nothing to judge a variant on: refused (a
    # license-plate model finds ~1 box on the package photos; give it --images of its own domain)
    min_reference_boxes: int = 10
    min_share: float = 0.85  # 2 x matched / (FP32 boxes + INT8 boxes)
    min_mean_iou: float = 0.85
    min_confident_recall: float = 0.9  # FP32 boxes with score >= 0.5 the variant still finds
    min_speedup: float = 1.2  # one-core batch-1 median latency, FP32 / variant
    # the smaller-size FP32 fallback loses small objects by design: only its confident boxes are held to a bar
    min_size_confident_recall: float = 0.75
    min_size_share: float = 0.5


FALLBACK_GATES = FallbackGates()
