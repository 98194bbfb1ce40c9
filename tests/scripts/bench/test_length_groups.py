"""scripts/bench/length_groups.py: the baseline split it measures against behaves as the former runner rule."""
from __future__ import annotations

import numpy as np

from scripts.bench.length_groups import ratio_groups


def test_ratio_baseline_bounds_padding_and_covers_every_index():
    seqs = [np.zeros(n) for n in (40, 4, 5, 38, 12, 6, 30)]
    groups = ratio_groups(seqs, max_ratio=1.5)
    assert sorted(i for g in groups for i in g) == list(range(len(seqs)))
    for g in groups:
        lengths = [len(seqs[i]) for i in g]
        assert max(lengths) <= 1.5 * min(lengths)
    assert groups[0] == [1, 2, 5]  # 4, 5, 6 tokens together
