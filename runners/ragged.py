"""How the runner batches ragged items (families whose runtime says `RAGGED = True`): by length, one call per group.

Why: one call over a mixed batch pads every row to the longest; grouping by length with a per-call cost keeps the
padded work low, and a token budget keeps a flood of long sequences inside the memory reservation. The padding itself
is the family's (kernel/ragged.pad_sequences in its feeds()).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
