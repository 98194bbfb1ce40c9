"""Runner-side hooks of the segmentation family (numpy only): the same fitted uint8 image items as detection."""
from __future__ import annotations

import numpy as np

from families.detection.runtime import image_feeds
from families.segmentation.manifest import SegmentationPreprocess
from models.manifest import Manifest, preprocess_as


def feeds(manifest: Manifest, input_names: list[str], xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The same image items as detection (families/detection/runtime.image_feeds)."""
    return image_feeds(preprocess_as(manifest, SegmentationPreprocess), input_names, xs)


def warmup_sizes(manifest: Manifest) -> dict[str, tuple[int, ...]]:
    side = preprocess_as(manifest, SegmentationPreprocess).imgsz
    return {"height": (side,), "width": (side,)}
