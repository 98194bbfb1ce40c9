"""Runner-side hooks of the segmentation family (numpy only): the same letterboxed uint8 items as detection."""
from __future__ import annotations

import numpy as np

from families.detection.preprocess import network_input
from families.segmentation.manifest import SegmentationPreprocess
from models.manifest import Manifest, preprocess_as


def feeds(manifest: Manifest, input_names: list[str], xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Letterboxed uint8 images (from the gateway) are tensorised with this version's scale and colour order; float
    [3, S, S] tensors (from OIP clients) pass as they are."""
    pre = preprocess_as(manifest, SegmentationPreprocess)
    tensors = [network_input(x, pre.scale, pre.color_order) for x in xs]
    return {input_names[0]: np.ascontiguousarray(np.stack(tensors), dtype=np.float32)}


def warmup_sizes(manifest: Manifest) -> dict[str, tuple[int, ...]]:
    side = preprocess_as(manifest, SegmentationPreprocess).imgsz
    return {"height": (side,), "width": (side,)}
