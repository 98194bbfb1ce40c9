"""Offline adapter of the pose family (kernel/batch.py's contract): encoded image -> letterbox -> capped NMS on the
boxes -> people's boxes and keypoints in the image's pixels, as a row.

The same steps as /v1/pose (families/pose/family.py): the vision base's decoding caps, letterbox and NMS settings
(families/vision/batch.BoxAdapter), the kept anchors' keypoints mapped back like the boxes. A row's `keypoints` is
one [K, dims] list per person (x, y in original pixels, then the confidence with dims 3), in the order of the model's
keypoint names (the job's _job.json names the model; its manifest has the names and the skeleton).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from triserve.families.pose.manifest import PosePreprocess
from triserve.families.pose.postprocess import decode_pose, keypoints_to_original
from triserve.families.vision.batch import BOX_COLUMNS, BoxAdapter
from triserve.families.vision.letterbox import LetterboxMeta


class Adapter(BoxAdapter):
    FAMILY = "pose"
    COMMAND = "pose"
    CHUNK_SIZE, SHARD_SIZE = 16, 256
    PREPROCESS = PosePreprocess
    COLUMNS = {**BOX_COLUMNS, "keypoints": "list<list<list<f64>>>"}
    pre: PosePreprocess

    def row(self, outs: list[np.ndarray], meta: LetterboxMeta) -> dict[str, Any]:
        poses = decode_pose(np.asarray(outs[0]), len(self.labels), self.pre.kpt_shape, self.params)
        kpts = keypoints_to_original(poses.keypoints, meta)
        return {**self.box_columns(poses.det, meta),
                "keypoints": [[[round(float(v), 5) for v in point] for point in person] for person in kpts]}
