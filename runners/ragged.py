"""Ragged integer sequences -> one padded tensor plus mask.

Why: adaptive batching merges requests of different lengths; padding to the longest item of the batch (not to the
model's max length) keeps short batches cheap, and the mask keeps padded positions out of the result.
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


def length_buckets(seqs: Sequence[np.ndarray], max_ratio: float = 1.5) -> list[list[int]]:
    """Indices grouped so that, within a group, the longest sequence is at most `max_ratio` x the shortest.

    Why: padding a whole batch to its longest item wastes most of the compute when lengths vary (a 40-token text
    next to 4-token commands pads to 36-40% real tokens); one call per length bucket keeps ~90% real tokens while still
    batching. Groups come out shortest first; callers put results back in the original order.
    """
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    groups: list[list[int]] = []
    for i in order:
        if groups and len(seqs[i]) <= max_ratio * len(seqs[groups[-1][0]]):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups
