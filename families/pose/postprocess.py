"""Pose heads: capped NMS on the boxes (triserve.families.vision.nms, the same code as detection), then the kept
anchors' keypoints, mapped back through the letterbox like the boxes.

Head layout per image: [4 + nc + K * dims, anchors] = cx, cy, w, h, nc class scores, then for each keypoint x, y in
network-input pixels and (dims 3) a sigmoid confidence: what ultralytics' Pose head exports.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from triserve.families.pose.schemas import Keypoint
from triserve.families.vision.letterbox import LetterboxMeta
from triserve.families.vision.nms import Detections, NMSParams, check_head, nms
from triserve.kernel.errors import InvalidOutput


@dataclass(frozen=True)
class Poses:
    det: Detections  # boxes in network pixels, scores, classes, candidates, kept anchors
    keypoints: np.ndarray  # [k, K, dims] float32, x, y in network pixels (then confidence)


def split_head(raw: np.ndarray, nc: int, kpt_shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """[4 + nc + K * dims, anchors] -> (box/class rows [4 + nc, anchors] (a view), keypoint rows)."""
    k, dims = kpt_shape
    if raw.ndim != 2 or raw.shape[0] != 4 + nc + k * dims:
        raise ValueError(f"expected [4 + {nc} + {k}*{dims}, anchors], got {raw.shape}")
    return raw[:4 + nc], raw[4 + nc:]


def decode_pose(raw: np.ndarray, nc: int, kpt_shape: tuple[int, int], params: NMSParams) -> Poses:
    """One image's head -> kept instances and their keypoints (capped NMS on the boxes only)."""
    boxes, kpts = split_head(raw, nc, kpt_shape)
    det = nms(boxes, params)
    k, dims = kpt_shape
    picked = kpts[:, det.anchors].T.reshape(len(det.anchors), k, dims).astype(np.float32)
    return Poses(det, picked)


def keypoints_to_original(kpts: np.ndarray, meta: LetterboxMeta) -> np.ndarray:
    """Network-input pixels -> original image pixels, clipped to the image (as ultralytics' scale_coords); scores,
    when present, unchanged. [k, K, dims] in, float64 out."""
    out = np.asarray(kpts, dtype=np.float64).copy()
    if out.size:
        out[..., 0] = ((out[..., 0] - meta.pad_x) / meta.scale_x).clip(0, meta.orig_w)
        out[..., 1] = ((out[..., 1] - meta.pad_y) / meta.scale_y).clip(0, meta.orig_h)
    return out


def keypoints_to_network(kpts: np.ndarray, meta: LetterboxMeta) -> np.ndarray:
    """Original-pixel keypoints -> network-input pixels (labels, round-trip checks)."""
    out = np.asarray(kpts, dtype=np.float64).copy()
    out[..., 0] = out[..., 0] * meta.scale_x + meta.pad_x
    out[..., 1] = out[..., 1] * meta.scale_y + meta.pad_y
    return out


def check_pose_head(raw: np.ndarray, nc: int, kpt_shape: tuple[int, int]) -> None:
    """Output sanity: the head's shape, finite values, class scores and keypoint confidences within [0, 1]."""
    k, dims = kpt_shape
    if raw.ndim != 2 or raw.shape[0] != 4 + nc + k * dims:
        raise InvalidOutput(f"pose head shape {raw.shape} does not match {nc} classes and {k}x{dims} keypoints")
    boxes, kpts = raw[:4 + nc], raw[4 + nc:]
    check_head(boxes, nc)
    if not np.isfinite(kpts).all():
        raise InvalidOutput("non-finite values in the keypoint channels")
    if dims == 3 and kpts.size:
        conf = kpts[2::3]
        if conf.min() < -1e-3 or conf.max() > 1 + 1e-3:
            raise InvalidOutput("keypoint confidences outside [0, 1]")


def to_keypoints(kpts: np.ndarray, names: list[str], visibility: float) -> list[Keypoint]:
    """One person's [K, dims] keypoints (original pixels) -> named keypoints; an invisible one keeps its place and
    its confidence (a client decides what to draw; dropping it would shift every index of the skeleton)."""
    out = []
    for name, row in zip(names, kpts):
        conf = round(float(row[2]), 5) if row.shape[0] > 2 else None
        out.append(Keypoint(name=name, x=round(float(row[0]), 2), y=round(float(row[1]), 2), confidence=conf,
                            visible=conf is None or conf >= visibility))
    return out
