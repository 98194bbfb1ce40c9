"""What the segmentation family records in a model's manifest: letterbox parameters and the packed output layout."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from triserve.families.vision.manifest import LetterboxPreprocess


class SegmentationPreprocess(LetterboxPreprocess):
    """The vision base's letterbox and the layout of the one packed output row.

    Why packed: ultralytics' segment export has two outputs (output0 [b, 4 + nc + nm, anchors], output1 prototypes
    [b, nm, S/4, S/4]) and the runner returns one row per item. The importer appends a flatten + concat to the graph
    (importers/pack.py), so each row is output0 then output1, flattened; `anchors`, `mask_dim` and `proto_size` say
    how to split it back (postprocess.split_row).
    """

    kind: Literal["segmentation"] = "segmentation"
    anchors: int = Field(gt=0, description="Anchor columns of the head part of the packed row.")
    mask_dim: int = Field(32, gt=0, description="Mask coefficients per anchor = prototype channels.")
    proto_size: int = Field(gt=0, description="Side of the square prototype maps (imgsz / 4 for ultralytics).")


Preprocess = SegmentationPreprocess
