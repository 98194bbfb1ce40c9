import numpy as np
import pytest

from triserve.runners.ragged import length_buckets


def _cost(groups, seqs, call_cost):
    return sum(call_cost + len(g) * max(len(seqs[i]) for i in g) for g in groups)


def _all_splits(lengths):
    """Every split of the sorted lengths into contiguous groups (brute force oracle)."""
    n = len(lengths)
    for mask in range(2 ** (n - 1)):
        groups, cur = [], [0]
        for k in range(1, n):
            if mask >> (k - 1) & 1:
                groups.append(cur)
                cur = []
            cur.append(k)
        groups.append(cur)
        yield groups


def test_length_buckets_cover_every_index_shortest_first():
    seqs = [np.zeros(n) for n in (40, 4, 5, 38, 12, 6, 30)]
    groups = length_buckets(seqs, call_cost_tokens=12)
    assert sorted(i for g in groups for i in g) == list(range(len(seqs)))
    firsts = [len(seqs[g[0]]) for g in groups]
    assert firsts == sorted(firsts)
    assert groups[0] == [1, 2, 5]  # 4, 5, 6 tokens together


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("call_cost", [0, 5, 12, 40])
def test_length_buckets_is_the_cheapest_split(seed, call_cost):
    rng = np.random.default_rng(seed)
    seqs = [np.zeros(int(n)) for n in rng.integers(1, 60, size=int(rng.integers(1, 10)))]
    sorted_seqs = sorted(seqs, key=len)
    best = min(_cost(g, sorted_seqs, call_cost) for g in _all_splits([len(s) for s in sorted_seqs]))
    assert _cost(length_buckets(seqs, call_cost), seqs, call_cost) == best


def test_call_cost_trades_calls_for_padding():
    seqs = [np.zeros(n) for n in (3, 4, 10, 11, 30, 31)]
    assert len(length_buckets(seqs, call_cost_tokens=0)) == 6  # calls are free: no padding at all
    assert len(length_buckets(seqs, call_cost_tokens=10_000)) == 1  # calls are dear: one padded call
    assert [sorted(len(seqs[i]) for i in g) for g in length_buckets(seqs, 12)] == [[3, 4], [10, 11], [30, 31]]


def test_token_groups_keep_padded_tokens_within_the_budget():
    from triserve.runners.ragged import token_groups

    lengths = [4, 4, 4, 4, 30, 30, 64]
    groups = token_groups(range(len(lengths)), lengths, max_tokens=64)
    assert groups == [[0, 1, 2, 3], [4, 5], [6]]  # 4 x 4 = 16 fits; adding 30 would pad 5 x 30 = 150
    for g in groups:
        assert len(g) * max(lengths[i] for i in g) <= 64
    assert token_groups([0], [500], max_tokens=64) == [[0]]  # an item alone always goes
