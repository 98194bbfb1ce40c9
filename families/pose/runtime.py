"""Runner-side hooks of the pose family (numpy only): the vision base's letterboxed feeds and warm-up sizes, and its
anchor-head cut (the keypoint rows ride along with the box columns)."""
from __future__ import annotations

from triserve.families.vision.runtime import compact, feeds, warmup_sizes

__all__ = ["compact", "feeds", "warmup_sizes"]
