"""Offline adapter of the segmentation family (kernel/batch.py's contract): encoded image -> letterbox -> capped NMS
-> instances with their masks as COCO RLE in the image's pixels, as a row.

The same steps as /v1/segment with mask_format 'rle' (families/segmentation/postprocess.image_result, the service's
code, with the deployment's mask budgets): the vision base's decoding caps, letterbox and NMS settings
(families/vision/batch.BoxAdapter). A row's `rle` holds each instance's compressed COCO counts string (size: the
row's height and width), null for an instance whose mask the run budget skipped (`mask_skipped`); masks are the
heavy part, so finish runs in the workers.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from triserve.families.segmentation.limits import Limits
from triserve.families.segmentation.manifest import SegmentationPreprocess
from triserve.families.segmentation.postprocess import image_result
from triserve.families.vision.batch import BOX_COLUMNS, BoxAdapter
from triserve.families.vision.letterbox import LetterboxMeta


class Adapter(BoxAdapter):
    FAMILY = "segmentation"
    COMMAND = "segment"
    CHUNK_SIZE, SHARD_SIZE = 8, 128
    HEAVY_FINISH = True
    PREPROCESS = SegmentationPreprocess
    COLUMNS = {**BOX_COLUMNS, "areas": "list<i64>", "rle": "list<str>", "masks_skipped": "i64"}
    pre: SegmentationPreprocess
    limits: Limits

    def row(self, outs: list[np.ndarray], meta: LetterboxMeta) -> dict[str, Any]:
        lim = self.limits
        result = image_result(np.asarray(outs[0]), meta, self.pre, self.labels, self.params, "rle",
                              lim.max_polygon_points, lim.max_mask_runs, lim.max_mask_samples)
        found = result.instances
        return {"width": result.width, "height": result.height, "candidates": result.candidates,
                "boxes": [i.box for i in found], "scores": [i.score for i in found],
                "class_ids": [i.class_id for i in found], "labels": [i.label for i in found],
                "areas": [i.area for i in found], "rle": [i.rle.counts if i.rle else None for i in found],
                "masks_skipped": result.masks_skipped}
