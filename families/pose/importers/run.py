"""A pose model run through the family's own serving path, for the importers' checks: letterbox -> ONNX Runtime ->
capped NMS on the boxes -> boxes and keypoints in original pixels (triserve.families.vision.letterbox,
triserve.families.pose.postprocess). What the checks measure is what serves."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from triserve.families.detection.importers.pipeline import head_rows
from triserve.families.pose.manifest import PosePreprocess
from triserve.families.pose.postprocess import decode_pose, keypoints_to_original
from triserve.families.vision.letterbox import boxes_to_original
from triserve.families.vision.nms import NMSParams
from triserve.models.importing.agreement import Dets


@dataclass(frozen=True)
class PoseDets:
    """One image's instances in original pixels: the boxes as triserve.models.importing.agreement compares them, and
    their
    keypoints [k, K, dims]."""

    dets: Dets
    keypoints: np.ndarray


def run_pose(session, images: Sequence[np.ndarray], pre: PosePreprocess, nc: int, params: NMSParams,
             batch: int = 1) -> list[PoseDets]:
    """triserve's pipeline on each image; `batch` images per session call (1 for a fixed-batch graph)."""
    out: list[PoseDets] = []
    for row, meta in head_rows(session, images, pre, batch):
        p = decode_pose(row, nc, pre.kpt_shape, params)
        out.append(PoseDets(Dets(boxes_to_original(p.det.boxes, meta), p.det.scores.astype(np.float32),
                                 p.det.classes.astype(np.int64)), keypoints_to_original(p.keypoints, meta)))
    return out
