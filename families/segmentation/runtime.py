"""Runner-side hooks of the segmentation family (numpy only): the vision base's letterboxed feeds and warm-up sizes
(its packed output row is not cut at the runner)."""
from __future__ import annotations

from triserve.families.vision.runtime import feeds, warmup_sizes

__all__ = ["feeds", "warmup_sizes"]
