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


def length_buckets(seqs: Sequence[np.ndarray], call_cost_tokens: float = 12.0) -> list[list[int]]:
    """Indices grouped by length into the partition with the least estimated compute, one model call per group.

    Why: padding a whole batch to its longest item wastes most of the compute when lengths vary (a 40-token text
    next to 4-token commands pads to 36-40% real tokens), while every extra call has a fixed cost. A group costs
    `call_cost_tokens` + size x longest length (in padded tokens); the cheapest split of the length-sorted batch into
    contiguous groups is found exactly by dynamic programming (O(n^2), n <= the slot's max batch size). For the intent
    model on one CPU core a call costs about 8-15 tokens: 12 beat a fixed "longest <= 1.5 x shortest" rule by
    1.05-1.10x texts/s on batches of 8-32 (docs/bench/length_groups.md). Groups come out shortest first; callers put
    results back in the original order.
    """
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    lengths = [len(seqs[i]) for i in order]
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: cheapest cost of the first j sorted items
    start = [0] * (n + 1)  # start[j]: where the last group of that split begins
    for j in range(1, n + 1):
        longest = lengths[j - 1]
        for i in range(j):
            cost = best[i] + call_cost_tokens + (j - i) * longest
            if cost < best[j]:
                best[j], start[j] = cost, i
    groups: list[list[int]] = []
    j = n
    while j > 0:
        groups.append(order[start[j]:j])
        j = start[j]
    return groups[::-1]


def token_groups(indices: Sequence[int], lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Consecutive runs of `indices` whose padded size (items x longest length) stays within `max_tokens`.

    Why: a text model's working memory follows the padded token count, not the item count; its memory batch cap
    (runners/memory.py) is measured at the longest sequence, so `cap x longest` tokens is what its reservation covers
    and a run of short texts may hold more items than the cap. An item alone always fits (texts are truncated to the
    longest sequence)."""
    groups: list[list[int]] = []
    group: list[int] = []
    longest = 0
    for i in indices:
        if group and (len(group) + 1) * max(longest, lengths[i]) > max_tokens:
            groups.append(group)
            group, longest = [], 0
        group.append(i)
        longest = max(longest, lengths[i])
    if group:
        groups.append(group)
    return groups
