"""Runner-side hooks of the pose family (numpy only): the same letterboxed-uint8 items as detection."""
from __future__ import annotations

import numpy as np

from families.detection.preprocess import network_input
from families.detection.runtime import compact  # noqa: F401 - the same anchor head, keypoint rows ride along
from families.pose.manifest import PosePreprocess
from models.manifest import Manifest, preprocess_as


def feeds(manifest: Manifest, input_names: list[str], xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Letterboxed uint8 images (from the gateway) are tensorised with this version's scale and colour order; float
    [3, S, S] tensors (from OIP clients) pass as they are."""
    pre = preprocess_as(manifest, PosePreprocess)
    tensors = [network_input(x, pre.scale, pre.color_order) for x in xs]
    return {input_names[0]: np.ascontiguousarray(np.stack(tensors), dtype=np.float32)}


def warmup_sizes(manifest: Manifest) -> dict[str, tuple[int, ...]]:
    """Dynamic axes as served: the letterboxed square side only."""
    side = preprocess_as(manifest, PosePreprocess).imgsz
    return {"height": (side,), "width": (side,)}
