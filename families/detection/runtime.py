"""Runner-side hooks of the detection family (numpy only: the runner tier imports this and nothing else of it)."""
from __future__ import annotations

from typing import Protocol

import numpy as np

from families.detection.manifest import DetectionPreprocess
from families.detection.postprocess import prefilter
from families.detection.preprocess import network_batch
from models.manifest import Manifest, preprocess_as


class ImageInput(Protocol):
    """What a YOLO family's manifest says of its input (detection, pose and segmentation all record these)."""

    @property
    def imgsz(self) -> int: ...
    @property
    def pad_value(self) -> int: ...
    @property
    def scale(self) -> float: ...
    @property
    def color_order(self) -> str: ...


def image_feeds(pre: ImageInput, input_names: list[str], xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Fitted uint8 images from the gateway, padded and tensorised here with the serving version's letterbox, scale
    and colour order; float [3, S, S] tensors (from OIP clients) as they are (preprocess.network_batch)."""
    return {input_names[0]: network_batch(xs, pre.imgsz, pre.pad_value, pre.scale, pre.color_order)}


def feeds(manifest: Manifest, input_names: list[str], xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    return image_feeds(preprocess_as(manifest, DetectionPreprocess), input_names, xs)


def warmup_sizes(manifest: Manifest) -> dict[str, tuple[int, ...]]:
    """Dynamic axes as served: the letterboxed square side only (also what OIP metadata shows for them)."""
    side = preprocess_as(manifest, DetectionPreprocess).imgsz
    return {"height": (side,), "width": (side,)}


def compact(manifest: Manifest, y: np.ndarray, keep: dict) -> tuple[np.ndarray, dict]:
    """An anchor head cut to the columns NMS can keep (postprocess.prefilter) when the gateway said how it will run
    NMS (`keep`: conf, count_above, topk); the facts the gateway needs beyond them (the candidates count). An
    end-to-end head, or one unfit to be cut, goes back whole with no facts."""
    if getattr(manifest.preprocess, "head", "anchors") != "anchors":
        return y, {}
    cut = prefilter(np.asarray(y), len(manifest.labels), keep["conf"], keep["count_above"], keep["topk"])
    if cut is None:
        return y, {}
    columns, candidates = cut
    return columns, {"candidates": candidates}
