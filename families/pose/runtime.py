"""Runner-side hooks of the pose family (numpy only): the same fitted uint8 image items as detection."""
from __future__ import annotations

import numpy as np

from families.detection.runtime import (
    compact,  # noqa: F401 - the same anchor head, keypoint rows ride along
    image_feeds,
)
from families.pose.manifest import PosePreprocess
from models.manifest import Manifest, preprocess_as


def feeds(manifest: Manifest, input_names: list[str], xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The same image items as detection (families/detection/runtime.image_feeds)."""
    return image_feeds(preprocess_as(manifest, PosePreprocess), input_names, xs)


def warmup_sizes(manifest: Manifest) -> dict[str, tuple[int, ...]]:
    """Dynamic axes as served: the letterboxed square side only."""
    side = preprocess_as(manifest, PosePreprocess).imgsz
    return {"height": (side,), "width": (side,)}
