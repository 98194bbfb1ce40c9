"""Ragged inputs: integer sequences of different lengths -> one padded tensor plus mask.

Why: adaptive batching merges requests of different lengths; padding to the longest item of the batch (not to the
model's max length) keeps short batches cheap, and the mask keeps padded positions out of the result. A family whose
items are ragged says so in its runtime (`RAGGED = True` in families/<name>/runtime.py) and pads with this in its
`feeds()`; the runner then groups such items by length before calling the model (runners/ragged.py).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pad_sequences(seqs: Sequence[np.ndarray], pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """[n ragged int arrays] -> (ids [n, L] int64, mask [n, L] int64), L = longest length in the batch."""
    if len(seqs) == 0:
        raise ValueError("empty batch")
    lengths = [int(len(s)) for s in seqs]
    if min(lengths) == 0:
        raise ValueError("empty sequence in batch")
    width = max(lengths)
    ids = np.full((len(seqs), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(seqs), width), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : lengths[i]] = s
        mask[i, : lengths[i]] = 1
    return ids, mask
