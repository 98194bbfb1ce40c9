"""Drift references: the distributions a manifest carries so the service can tell when live traffic moves away."""
from __future__ import annotations

import numpy as np


def histogram_reference(values: np.ndarray, bins: np.ndarray) -> dict[str, list[float]]:
    """A reference distribution for drift monitoring: bin edges and normalised counts."""
    counts, edges = np.histogram(np.asarray(values, dtype=np.float64), bins=bins)
    total = max(int(counts.sum()), 1)
    return {"edges": [float(e) for e in edges], "fractions": [float(c) / total for c in counts]}
