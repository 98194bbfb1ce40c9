"""Offline adapter of the detection family (kernel/batch.py's contract): encoded image -> letterbox -> capped NMS ->
boxes in the image's pixels, as a row.

The same steps as /v1/detect (the family hooks in families/detection/family.py), per image: safe decoding with the
deployment's byte and pixel caps (a corrupt, empty or oversized image is an error row with the service's code), the
letterboxed uint8 image as the runner item (runtime.feeds tensorises it with the model's scale and colour order), the
deployment's default thresholds (or the job's) for NMS, boxes mapped back to original pixels (families/vision/batch.py).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from triserve.families.detection.manifest import DetectionPreprocess
from triserve.families.vision.batch import BoxAdapter
from triserve.families.vision.letterbox import LetterboxMeta
from triserve.families.vision.nms import decode


class Adapter(BoxAdapter):
    FAMILY = "detection"
    COMMAND = "detect"
    CHUNK_SIZE, SHARD_SIZE = 16, 256
    PREPROCESS = DetectionPreprocess
    pre: DetectionPreprocess

    def row(self, outs: list[np.ndarray], meta: LetterboxMeta) -> dict[str, Any]:
        return self.box_columns(decode(np.asarray(outs[0]), self.pre.head, self.params), meta)
