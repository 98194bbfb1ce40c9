import numpy as np
import pytest

from runners.ragged import length_buckets, pad_sequences


def test_pads_to_longest_in_batch_with_mask():
    ids, mask = pad_sequences([np.array([5, 6, 7]), np.array([9])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [9, 0, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert ids.dtype == np.int64 and mask.dtype == np.int64


def test_rejects_empty():
    with pytest.raises(ValueError):
        pad_sequences([])
    with pytest.raises(ValueError):
        pad_sequences([np.array([], dtype=np.int64)])


def test_length_buckets_bound_padding_and_cover_every_index():
    seqs = [np.zeros(n) for n in (40, 4, 5, 38, 12, 6, 30)]
    groups = length_buckets(seqs, max_ratio=1.5)
    assert sorted(i for g in groups for i in g) == list(range(len(seqs)))
    for g in groups:
        lengths = [len(seqs[i]) for i in g]
        assert max(lengths) <= 1.5 * min(lengths)
    assert groups[0] == [1, 2, 5]  # 4, 5, 6 tokens together
