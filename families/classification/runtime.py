"""Runner-side hooks of the image classification family (numpy only: the runner tier imports this and nothing else of
it): the gateway's uint8 crops normalised with the serving version's mean/std, scale and colour order."""
from __future__ import annotations

import numpy as np

from triserve.families.classification.manifest import ClassificationPreprocess
from triserve.families.vision.letterbox import pad_offsets
from triserve.families.vision.runtime import warmup_sizes  # the square side on the dynamic spatial axes
from triserve.models.manifest import Manifest, preprocess_as


def network_batch(items: list[np.ndarray], pre: ClassificationPreprocess) -> np.ndarray:
    """[n, 3, imgsz, imgsz] float32: each uint8 HxWx3 item (a crop, or a fitted image padded here with pad_value) as
    (value * scale - mean) / std per channel in the network's colour order; float [3, S, S] tensors (Open Inference
    Protocol clients send those, normalised) copied as they are."""
    size = pre.imgsz
    out = np.empty((len(items), 3, size, size), dtype=np.float32)
    std = np.asarray(pre.std, dtype=np.float64)
    gain = (pre.scale / std).astype(np.float32)[:, None, None]
    shift = (np.asarray(pre.mean, dtype=np.float64) / std).astype(np.float32)[:, None, None]
    for row, item in zip(out, items):
        if item.dtype != np.uint8:
            row[...] = np.asarray(item, dtype=np.float32)
            continue
        h, w = item.shape[:2]
        if h > size or w > size:
            raise ValueError(f"image item {w}x{h} is larger than the {size} input")
        img = item if pre.color_order == "RGB" else item[..., ::-1]
        if (h, w) != (size, size):
            row[...] = np.float32(pre.pad_value) * gain - shift
        left, top, _, _ = pad_offsets(w, h, size)
        window = row[:, top:top + h, left:left + w]
        np.multiply(img.transpose(2, 0, 1), gain, out=window, dtype=np.float32)
        window -= shift
    return out


def feeds(manifest: Manifest, input_names: list[str], xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    return {input_names[0]: network_batch(xs, preprocess_as(manifest, ClassificationPreprocess))}


__all__ = ["feeds", "network_batch", "warmup_sizes"]
