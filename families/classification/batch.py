"""Offline adapter of the image classification family (kernel/batch.py's contract): encoded image -> the served crop
-> probabilities -> top-k labels, as a row.

The same steps as /v1/classify-image (families/classification/family.py), per image: safe decoding with the
deployment's byte and pixel caps (a corrupt, empty or oversized image is an error row with the service's code), the
uint8 crop as the runner item (runtime.feeds normalises it with the model's mean/std), softmax when the graph gives
logits, the top-k labels.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from triserve.families.classification.limits import Limits
from triserve.families.classification.manifest import ClassificationPreprocess
from triserve.families.classification.postprocess import probabilities, top_k
from triserve.families.classification.preprocess import crop
from triserve.families.vision.batch import ImageAdapter
from triserve.families.vision.schemas import label_of
from triserve.kernel.batch import Option, Prepared
from triserve.models.manifest import Manifest, preprocess_as


class Adapter(ImageAdapter):
    FAMILY = "classification"
    COMMAND = "classify-image"
    CHUNK_SIZE, SHARD_SIZE = 32, 512
    OPTIONS = (Option("top_k", "labels kept per image (default 5, capped by the deployment's max_top_k)", int),)
    COLUMNS = {"width": "i64", "height": "i64", "label": "str", "score": "f64", "top_k_labels": "list<str>",
               "top_k_scores": "list<f64>", "top_k_ids": "list<i64>"}

    def __init__(self, directory: Path, manifest: Manifest, limits: Limits, options: dict[str, Any]):
        self.pre = preprocess_as(manifest, ClassificationPreprocess)
        self.labels = manifest.labels
        self.limits = limits
        self.k = min(int(options.get("top_k") or 5), limits.max_top_k)

    def item(self, image, index):
        return crop(image, self.pre, index, self.limits.max_pixels), (image.shape[1], image.shape[0])

    def finish(self, prepared: Prepared, outputs: Sequence[np.ndarray]) -> list[dict[str, Any]]:
        return prepared.rows(outputs, self.COLUMNS, self._row)

    def _row(self, outs: list[np.ndarray], size: tuple[int, int]) -> dict[str, Any]:
        probs = probabilities(outs[0], self.pre.output)
        top = [int(j) for j in top_k(probs, self.k)]
        names, scores = [label_of(self.labels, j) for j in top], [round(float(probs[j]), 6) for j in top]
        return {"width": size[0], "height": size[1], "label": names[0], "score": scores[0], "top_k_labels": names,
                "top_k_scores": scores, "top_k_ids": top}
