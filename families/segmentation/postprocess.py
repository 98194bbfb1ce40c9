"""The packed output row -> instances: the vision base's capped NMS on the head, then masks for the kept instances only.

Why this order: a mask costs pixels, a candidate only a column. The bounded worst case of capped NMS (confidence
filter, pre-NMS top-k, greedy NMS stopping at max_detections: families/vision/nms.nms) runs on the head's
box and class rows; only the kept instances' mask coefficients are read, and each mask is made inside its own box
(masks.py). A broken model or an adversarial image therefore costs at most max_detections box-sized masks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from triserve.families.segmentation.manifest import SegmentationPreprocess
from triserve.families.segmentation.masks import InstanceMask, iter_instance_masks, polygons
from triserve.families.segmentation.rle import counts_to_strings, crop_counts
from triserve.families.segmentation.schemas import RLE, ImageResult, Instance, Polygon
from triserve.families.vision.letterbox import LetterboxMeta, boxes_to_original
from triserve.families.vision.nms import Detections, NMSParams, nms
from triserve.families.vision.schemas import box_fields
from triserve.kernel.errors import InvalidOutput


def row_size(pre: SegmentationPreprocess, num_classes: int) -> int:
    """Values in one packed row: the head [4 + nc + nm, anchors], then the prototypes [nm, p, p]."""
    return (4 + num_classes + pre.mask_dim) * pre.anchors + pre.mask_dim * pre.proto_size ** 2


def split_row(row: np.ndarray, pre: SegmentationPreprocess, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """One packed row -> (head [4 + nc + nm, anchors], prototypes [nm, p, p]) as views; InvalidOutput if the size
    is not the manifest's layout."""
    flat = np.asarray(row).reshape(-1)
    if flat.size != row_size(pre, num_classes):
        raise InvalidOutput(f"segmentation output has {flat.size} values; the layout (4 + {num_classes} + "
                            f"{pre.mask_dim}) x {pre.anchors} + {pre.mask_dim} x {pre.proto_size}^2 needs "
                            f"{row_size(pre, num_classes)}")
    cut = (4 + num_classes + pre.mask_dim) * pre.anchors
    head = flat[:cut].reshape(4 + num_classes + pre.mask_dim, pre.anchors)
    protos = flat[cut:].reshape(pre.mask_dim, pre.proto_size, pre.proto_size)
    return head, protos


def check_row(row: np.ndarray, pre: SegmentationPreprocess, num_classes: int) -> None:
    """Output sanity before anything reaches a client: the layout, finite values, class scores within [0, 1]."""
    head, _ = split_row(row, pre, num_classes)
    if not np.isfinite(np.asarray(row)).all():
        raise InvalidOutput("non-finite values in the segmentation output")
    scores = head[4:4 + num_classes]
    if scores.size and (scores.min() < -1e-3 or scores.max() > 1 + 1e-3):
        raise InvalidOutput("class scores outside [0, 1]")


@dataclass(frozen=True)
class Kept:
    """Kept instances of one image, in network-input pixels, with their mask coefficients and the prototypes."""

    detections: Detections  # boxes x1, y1, x2, y2 in network pixels, scores, classes, candidates
    coefficients: np.ndarray  # [k, nm] float32
    protos: np.ndarray  # [nm, p, p] float32


def select(row: np.ndarray, pre: SegmentationPreprocess, num_classes: int, params: NMSParams) -> Kept:
    """Capped NMS on the head's box and class rows (the vision base's), then the kept anchors' mask coefficients."""
    head, protos = split_row(row, pre, num_classes)
    det = nms(head[:4 + num_classes], params)
    anchors = det.anchors if det.anchors is not None else np.zeros(0, np.int64)
    coefs = np.ascontiguousarray(head[4 + num_classes:, anchors].T, dtype=np.float32)
    return Kept(det, coefs, np.asarray(protos, np.float32))


def instances(row: np.ndarray, meta: LetterboxMeta, pre: SegmentationPreprocess, num_classes: int,
              params: NMSParams, max_mask_runs: int | None = None, max_mask_samples: int | None = None
              ) -> tuple[Kept, np.ndarray, list[InstanceMask | None], list[np.ndarray | None]]:
    """One packed row -> (kept instances, their boxes in original pixels, their masks and the masks' COCO counts).

    `max_mask_samples`: the most samples one instance's mask is computed on (masks.iter_instance_masks: a larger
    box is sampled on a coarser grid), so making a mask is bounded whatever its box.
    `max_mask_runs`: the image's budget of run lengths (COCO counts) its masks are encoded with, spent in score
    order; the first instance whose mask would pass it, and every one after it, gets None (its box, score and label
    are still returned). Why: the encoded mask has a run boundary per pixel column per edge, so max_detections
    large, ragged masks are a response of megabytes and most of the stage's time; the budget bounds both, like the
    NMS cap bounds the candidates."""
    kept = select(row, pre, num_classes, params)
    boxes = boxes_to_original(kept.detections.boxes, meta)
    masks: list[InstanceMask | None] = [None] * len(boxes)
    counts: list[np.ndarray | None] = [None] * len(boxes)
    left = max_mask_runs
    made = iter_instance_masks(kept.coefficients, kept.protos, boxes, meta, pre.imgsz, max_mask_samples)
    for i, m in enumerate(made):
        c = crop_counts(m.crop, m.x0, m.y0, m.height, m.width, m.rows, m.cols)
        if left is not None:
            if c.size > left:
                break
            left -= c.size
        masks[i], counts[i] = m, c
    return kept, boxes, masks, counts


def image_result(row: np.ndarray, meta: LetterboxMeta, pre: SegmentationPreprocess, labels: list[str],
                 params: NMSParams, mask_format: str, max_polygon_points: int,
                 max_mask_runs: int | None = None, max_mask_samples: int | None = None) -> ImageResult:
    """The response entry of one image: instances with their box, score, label and mask in the asked format."""
    kept, boxes, masks, counts = instances(row, meta, pre, len(labels), params, max_mask_runs, max_mask_samples)
    det = kept.detections
    out = []
    want_rle, want_polygons = mask_format in ("rle", "both"), mask_format in ("polygons", "both")
    strings = iter(counts_to_strings([c for c in counts if c is not None]) if want_rle else [])
    for b, s, c, m in zip(boxes, det.scores, det.classes, masks):
        if m is None:
            out.append(Instance(**box_fields(b, s, c, labels), area=0, mask_skipped=True))
            continue
        rle = RLE(size=[m.height, m.width], counts=next(strings)) if want_rle else None
        out.append(Instance(**box_fields(b, s, c, labels), area=m.area, rle=rle,
                            polygons=[Polygon(points=pts) for pts in polygons(m, max_polygon_points)]
                            if want_polygons else None))
    return ImageResult(width=meta.orig_w, height=meta.orig_h, instances=out, candidates=det.candidates,
                       masks_skipped=sum(m is None for m in masks))
