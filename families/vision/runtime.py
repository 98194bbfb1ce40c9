"""Runner-side hooks the image families share (numpy only: the runner tier imports a family's runtime and nothing else
of it). A letterboxed family's runtime module re-exports `feeds` and `warmup_sizes` from here (and `compact` when its
output is an anchor head the runner may cut)."""
from __future__ import annotations

import numpy as np

from triserve.families.vision.letterbox import network_batch
from triserve.families.vision.manifest import ImagePreprocess, LetterboxPreprocess
from triserve.families.vision.nms import prefilter
from triserve.models.manifest import Manifest, preprocess_as


def feeds(manifest: Manifest, input_names: list[str], xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Fitted uint8 images from the gateway, padded and tensorised here with the serving version's letterbox, scale
    and colour order; float [3, S, S] tensors (from OIP clients) as they are (letterbox.network_batch)."""
    pre = preprocess_as(manifest, LetterboxPreprocess)
    return {input_names[0]: network_batch(xs, pre.imgsz, pre.pad_value, pre.scale, pre.color_order)}


def warmup_sizes(manifest: Manifest) -> dict[str, tuple[int, ...]]:
    """Dynamic spatial axes of the graph's input as served: the square side only (also what OIP metadata shows for
    them)."""
    side = preprocess_as(manifest, ImagePreprocess).imgsz
    shape = manifest.inputs[0].shape if manifest.inputs else []
    return {dim: (side,) for dim in shape[2:] if isinstance(dim, str)}


def compact(manifest: Manifest, y: np.ndarray, keep: dict) -> tuple[np.ndarray, dict]:
    """An anchor head cut to the columns NMS can keep (nms.prefilter) when the gateway said how it will run NMS
    (`keep`: conf, count_above, topk); the facts the gateway needs beyond them (the candidates count). An end-to-end
    head, or one unfit to be cut, goes back whole with no facts."""
    if getattr(manifest.preprocess, "head", "anchors") != "anchors":
        return y, {}
    cut = prefilter(np.asarray(y), len(manifest.labels), keep["conf"], keep["count_above"], keep["topk"])
    if cut is None:
        return y, {}
    columns, candidates = cut
    return columns, {"candidates": candidates}
