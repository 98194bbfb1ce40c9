"""Runner-side hooks of the detection family (numpy only): the vision base's letterboxed feeds, warm-up sizes and
anchor-head cut."""
from __future__ import annotations

from triserve.families.vision.runtime import compact, feeds, warmup_sizes

__all__ = ["compact", "feeds", "warmup_sizes"]
