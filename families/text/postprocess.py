"""Probabilities -> top-k labels, and the output sanity check for the intent model."""
from __future__ import annotations

import numpy as np

from triserve.kernel.errors import InvalidOutput


def check_probabilities(probs: np.ndarray, num_labels: int) -> None:
    """One softmax row: right length, finite, in [0, 1], summing to 1."""
    if probs.shape != (num_labels,):
        raise InvalidOutput(f"probabilities of shape {probs.shape}, expected ({num_labels},)")
    if not np.isfinite(probs).all():
        raise InvalidOutput("non-finite probabilities")
    if probs.min() < -1e-4 or probs.max() > 1 + 1e-4 or abs(float(probs.sum()) - 1.0) > 1e-3:
        raise InvalidOutput("probabilities outside [0, 1] or not summing to 1")


def top_k(probs: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k most probable labels, best first (stable for ties)."""
    return np.argsort(-np.asarray(probs, dtype=np.float64), kind="stable")[: min(k, len(probs))]
