"""What the pose family records in a model's manifest: letterbox parameters and the keypoint schema (models/manifest.py
assembles every family's record into the manifest schema)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from triserve.families.vision.manifest import LetterboxPreprocess


class PosePreprocess(LetterboxPreprocess):
    """The vision base's letterbox and what the keypoints mean."""

    kind: Literal["pose"] = "pose"
    head: Literal["anchors"] = Field(
        "anchors", description="Output per image [4 + classes + K * dims, anchors]: cx, cy, w, h, class scores, then "
                               "per keypoint x, y (input pixels) and, with dims 3, its confidence; capped NMS on "
                               "the boxes in the service.")
    kpt_shape: tuple[int, Literal[2, 3]] = Field(description="(K keypoints, dims): dims 3 = x, y, confidence.")
    keypoint_names: list[str] = Field(description="One name per keypoint, in output order.")
    skeleton: list[tuple[int, int]] = Field(default_factory=list,
                                            description="Pairs of keypoint indices a client draws as bones.")
    flip_idx: list[int] | None = Field(None, description="Left/right mirror of each keypoint (training metadata).")
    names_from: Literal["metadata", "coco-17", "index"] = Field(
        description="Where the names come from: the model's `kpt_names`, COCO-17 (17x3 keypoints of the COCO "
                    "person class, names absent), or index names kp0.. (nothing known).")

    @model_validator(mode="after")
    def _consistent(self) -> PosePreprocess:
        k = self.kpt_shape[0]
        if k < 1 or len(self.keypoint_names) != k:
            raise ValueError(f"{len(self.keypoint_names)} keypoint names for kpt_shape {list(self.kpt_shape)}")
        if any(not (0 <= a < k and 0 <= b < k) for a, b in self.skeleton):
            raise ValueError(f"skeleton edges must join keypoints 0..{k - 1}")
        if self.flip_idx is not None and sorted(self.flip_idx) != list(range(k)):
            raise ValueError("flip_idx must be a permutation of the keypoints")
        return self

    @property
    def channels(self) -> int:
        """Keypoint channels per anchor (K * dims)."""
        return self.kpt_shape[0] * self.kpt_shape[1]

    def keypoint_schema(self) -> dict:
        """What a fallback must share with its primary: the same keypoints, in the same order, with the same bones."""
        return {"kpt_shape": list(self.kpt_shape), "keypoint_names": self.keypoint_names,
                "skeleton": [list(e) for e in self.skeleton]}

    def answer_schema(self) -> dict:
        """The runner's pairing check (runners/repository_state.check_pair) compares this between a deployment's
        primary and fallback, beside the labels."""
        return self.keypoint_schema()


Preprocess = PosePreprocess
