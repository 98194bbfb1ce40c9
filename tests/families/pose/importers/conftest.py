"""Tiny ultralytics pose checkpoints (random init from ultralytics' yamls, imgsz 64) and photos to run them on."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="session")
def ul_cache(tmp_path_factory) -> Path:
    pytest.importorskip("ultralytics")
    from triserve.families.detection.importers.ultralytics_env import setup_ultralytics

    cache = tmp_path_factory.mktemp("ultralytics-cache")
    setup_ultralytics(cache / "pose-pt")
    return cache


def save_checkpoint(yaml: str, path: Path, names: list[str], kpt_shape: tuple[int, int] | None = None,
                    kpt_names: dict | None = None) -> Path:
    """A checkpoint as ultralytics saves it (YOLO.save), random weights; kpt_shape overrides the yaml's like a
    dataset's does (PoseModel's data_kpt_shape)."""
    import torch
    from ultralytics import YOLO

    torch.manual_seed(0)
    user = YOLO(yaml)
    cls = type(user.model)
    kw = {"data_kpt_shape": kpt_shape} if kpt_shape else {}
    user.model = cls(yaml, nc=len(names), verbose=False, **kw)
    user.model.names = dict(enumerate(names))
    if kpt_names is not None:
        user.model.kpt_names = kpt_names
    user.save(str(path))
    return path


@pytest.fixture(scope="session")
def pose_checkpoints(ul_cache, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pose-checkpoints")
    return {
        "coco": save_checkpoint("yolo11n-pose.yaml", root / "coco.pt", ["person"]),
        "hands": save_checkpoint("yolov8n-pose.yaml", root / "hands.pt", ["left", "right"], (5, 3),
                                 {0: ["thumb", "index", "middle", "ring", "pinky"],
                                  1: ["thumb", "index", "middle", "ring", "pinky"]}),
        "detect": save_checkpoint("yolo11n.yaml", root / "detect.pt", ["a", "b"]),
    }


@pytest.fixture(scope="session")
def pose_photos(tmp_path_factory) -> Path:
    """Three generated photos (noise with a bright square), JPEG, of mixed sizes."""
    import cv2

    root = tmp_path_factory.mktemp("pose-photos")
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate([(48, 64), (64, 48), (80, 60)]):
        img = (rng.random((h, w, 3)) * 80).astype(np.uint8)
        img[5:30, 5:30] = rng.integers(60, 255, 3)
        cv2.imwrite(str(root / f"p{i}.jpg"), img)
    return root
