"""Keypoint schemas: the names and skeleton a pose model answers with, read from its checkpoint/ONNX metadata.

Why a rule instead of a guess: a pose head only emits K points; what point 5 means is a fact of the training data
(ultralytics records `kpt_names` since 8.3; older checkpoints, including the official YOLO11n-pose, do not). The COCO
names are only assumed when the model has exactly COCO's shape (17 keypoints with visibility) AND answers for the
COCO person class alone; any other model gets index names "kp0".. and no skeleton, never a borrowed one.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

COCO_KEYPOINTS: tuple[str, ...] = (
    "nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder", "left_elbow",
    "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee", "right_knee", "left_ankle",
    "right_ankle")
# the COCO person skeleton (as ultralytics draws it), 0-based keypoint indices
COCO_SKELETON: tuple[tuple[int, int], ...] = (
    (15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7), (6, 8), (7, 9), (8, 10),
    (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6))
COCO_FLIP_IDX: tuple[int, ...] = (0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15)


def _names_from_metadata(kpt_names: Any, k: int) -> list[str] | None:
    """ultralytics' `kpt_names`: {class id: [K names]} (or one list); the first class's list when all agree."""
    if kpt_names is None:
        return None
    lists: list[Any]
    if isinstance(kpt_names, Mapping):
        lists = [kpt_names[key] for key in sorted(kpt_names, key=str)]
    elif isinstance(kpt_names, Sequence) and not isinstance(kpt_names, str):
        lists = [kpt_names]
    else:
        raise ValueError(f"kpt_names {kpt_names!r} is neither a list nor a {{class: list}} mapping")
    names = [[str(n) for n in x] for x in lists]
    if any(n != names[0] for n in names):
        raise ValueError("kpt_names differ between classes: one keypoint schema per model is served")
    if len(names[0]) != k:
        raise ValueError(f"kpt_names lists {len(names[0])} names for {k} keypoints")
    if len(set(names[0])) != k:
        raise ValueError(f"kpt_names repeats a name: {names[0]}")
    return names[0]


def keypoint_schema(kpt_shape: Sequence[int], labels: Sequence[str], kpt_names: Any = None,
                    flip_idx: Sequence[int] | None = None) -> dict[str, Any]:
    """(kpt_shape, class labels, metadata names) -> {kpt_shape, keypoint_names, skeleton, flip_idx, names_from}
    (the fields of triserve.families.pose.manifest.PosePreprocess). ValueError for a malformed schema."""
    if len(kpt_shape) != 2 or int(kpt_shape[0]) < 1 or int(kpt_shape[1]) not in (2, 3):
        raise ValueError(f"kpt_shape {list(kpt_shape)} is not [K >= 1, 2 or 3]")
    k, dims = int(kpt_shape[0]), int(kpt_shape[1])
    names = _names_from_metadata(kpt_names, k)
    coco_shape = (k, dims) == (17, 3) and [str(x) for x in labels] == ["person"]
    if names is not None:
        source = "metadata"
    elif coco_shape:
        names, source = list(COCO_KEYPOINTS), "coco-17"
    else:
        names, source = [f"kp{i}" for i in range(k)], "index"
    skeleton = [list(e) for e in COCO_SKELETON] if coco_shape and names == list(COCO_KEYPOINTS) else []
    flips = [int(i) for i in flip_idx] if flip_idx is not None else (
        list(COCO_FLIP_IDX) if skeleton else None)
    return {"kpt_shape": [k, dims], "keypoint_names": names, "skeleton": skeleton, "flip_idx": flips,
            "names_from": source}
