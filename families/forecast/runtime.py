"""Runner-side hooks of the forecast family (numpy only: the runner tier imports this and nothing else of it)."""
from __future__ import annotations

import numpy as np

from models.manifest import Manifest


def feeds(manifest: Manifest, input_names: list[str], xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Scaled windows [context] stacked into [n, context]."""
    return {input_names[0]: np.ascontiguousarray(np.stack(xs), dtype=np.float32)}


def warmup_sizes(manifest: Manifest) -> dict[str, tuple[int, ...]]:
    return {}
