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

from families.classification.limits import Limits
from families.classification.manifest import ClassificationPreprocess
from families.classification.postprocess import probabilities, top_k
from families.classification.preprocess import crop
from families.detection.decode import decode_image
from kernel.batch import Option, Prepared, error_row
from kernel.errors import ApiError
from models.manifest import Manifest, preprocess_as


class Adapter:
    FAMILY = "classification"
    COMMAND = "classify-image"
    CHUNK_SIZE, SHARD_SIZE = 32, 512
    OPTIONS = (Option("top_k", "labels kept per image (default 5, capped by the deployment's max_top_k)", int),)
    SOURCE = "images"
    HEAVY_FINISH = False
    COLUMNS = {"width": "i64", "height": "i64", "label": "str", "score": "f64", "top_k_labels": "list<str>",
               "top_k_scores": "list<f64>", "top_k_ids": "list<i64>"}

    def __init__(self, directory: Path, manifest: Manifest, limits: Limits, options: dict[str, Any]):
        self.pre = preprocess_as(manifest, ClassificationPreprocess)
        self.labels = manifest.labels
        self.limits = limits
        self.k = min(int(options.get("top_k") or 5), limits.max_top_k)

    def prepare(self, records: Sequence[dict]) -> Prepared:
        out = Prepared(keys=[str(r["key"]) for r in records], states=[None] * len(records))
        lim = self.limits
        for i, record in enumerate(records):
            if record.get("read_error"):
                out.errors[i] = ("unreadable_input", str(record["read_error"]))
                continue
            try:
                image = decode_image(bytes(record["data"]), i, lim.max_image_bytes, lim.max_pixels)
                item = crop(image, self.pre, i, lim.max_pixels)
            except ApiError as exc:
                out.errors[i] = (exc.code, exc.message)
                continue
            except Exception as exc:  # noqa: BLE001 - whatever else a decoder raises is this image's error row: one
                # bad image never stops a job
                out.errors[i] = ("invalid_image", f"could not be decoded: {type(exc).__name__}: {exc}")
                continue
            out.items.append(item)
            out.owners.append(i)
            out.states[i] = (image.shape[1], image.shape[0])
        return out

    def finish(self, prepared: Prepared, outputs: Sequence[np.ndarray]) -> list[dict[str, Any]]:
        rows = []
        for i, outs in enumerate(prepared.outputs_of(outputs)):
            if i in prepared.errors:
                rows.append(error_row(self.COLUMNS, *prepared.errors[i]))
                continue
            width, height = prepared.states[i]
            probs = probabilities(outs[0], self.pre.output)
            top = [int(j) for j in top_k(probs, self.k)]
            names = [self.labels[j] if j < len(self.labels) else str(j) for j in top]
            scores = [round(float(probs[j]), 6) for j in top]
            rows.append({"width": width, "height": height, "label": names[0], "score": scores[0],
                         "top_k_labels": names, "top_k_scores": scores, "top_k_ids": top,
                         "error_code": None, "error": None})
        return rows
