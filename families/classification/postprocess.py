"""A classifier's output row -> probabilities -> top-k, and the check that refuses an answer no client should see."""
from __future__ import annotations

import numpy as np

from triserve.kernel.errors import InvalidOutput


def probabilities(row: np.ndarray, output: str) -> np.ndarray:
    """Softmax of logits (stable), or the graph's probabilities as they are; float64."""
    y = np.asarray(row, dtype=np.float64).reshape(-1)
    if output == "logits":
        e = np.exp(y - y.max())
        return e / e.sum()
    return y


def check_scores(row: np.ndarray, num_labels: int, output: str) -> None:
    """One row per image: a score per label, finite; probabilities in [0, 1] summing to 1."""
    y = np.asarray(row)
    if y.reshape(-1).shape != (num_labels,):
        raise InvalidOutput(f"scores of shape {y.shape}, expected ({num_labels},)")
    if not np.isfinite(y).all():
        raise InvalidOutput("non-finite scores")
    if output == "probabilities" and (y.min() < -1e-4 or y.max() > 1 + 1e-4 or abs(float(y.sum()) - 1.0) > 1e-3):
        raise InvalidOutput("probabilities outside [0, 1] or not summing to 1")


def top_k(probs: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k most probable labels, best first (stable for ties)."""
    return np.argsort(-np.asarray(probs, dtype=np.float64), kind="stable")[: min(k, len(probs))]
