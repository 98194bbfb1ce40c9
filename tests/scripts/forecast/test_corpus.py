"""Corpus normalisation and the by-group split (synthetic series: no wheel download in the tests)."""
import numpy as np

from scripts.forecast.corpus import Series, corpus_fingerprint, last_window, regular, split_corpus
from triserve.families.forecast.features import FREQUENCIES, MAX_HORIZON


def _corpus():
    out = []
    rng = np.random.default_rng(0)
    for f in FREQUENCIES:
        for g in range(6):
            for seg in range(2):  # two series (e.g. two frequencies or segments) per group
                out.append(Series(f"{f}/{g}/{seg}", f, np.datetime64("2020-01-01", "s"),
                                  rng.standard_normal(MAX_HORIZON[f] + 50), group=f"{f}-group-{g}"))
    return out


def test_split_has_no_series_or_group_overlap_and_covers_every_frequency():
    c = _corpus()
    sp = split_corpus(c, heldout_fraction=0.2, seed=0)
    train_ids = {s.series_id for s in sp.train}
    held_ids = {s.series_id for s in sp.heldout}
    assert not train_ids & held_ids
    assert train_ids | held_ids == {s.series_id for s in c}
    assert not {s.group for s in sp.train} & {s.group for s in sp.heldout}
    for f in FREQUENCIES:
        assert any(s.frequency == f for s in sp.heldout) and any(s.frequency == f for s in sp.train)
    # deterministic
    assert split_corpus(c, 0.2, 0).heldout_groups == sp.heldout_groups


def test_group_spanning_frequencies_goes_one_way():
    c = [Series(f"a/{f}", f, np.datetime64("2020-01-01", "s"), np.arange(300.0), group="shared") for f in ("h", "D")]
    c += [Series(f"b{i}/{f}", f, np.datetime64("2020-01-01", "s"), np.arange(300.0), group=f"g{i}")
          for i in range(5) for f in ("h", "D")]
    sp = split_corpus(c, 0.3, 1)
    sides = {("held" if s in sp.heldout else "train") for s in c if s.group == "shared"}
    assert len(sides) == 1


def test_last_window_and_fingerprint():
    c = _corpus()
    s = c[0]
    hist, tgt = last_window(s)
    assert len(tgt) == MAX_HORIZON[s.frequency] and np.array_equal(np.r_[hist, tgt], s.values)
    fp = corpus_fingerprint(c)
    assert fp == corpus_fingerprint(list(reversed(c))) and len(fp) == 64
    changed = c[:-1] + [Series(c[-1].series_id, c[-1].frequency, c[-1].start, c[-1].values + 1, c[-1].group)]
    assert corpus_fingerprint(changed) != fp


def test_regular_buckets_sums_and_interpolates():
    ts = np.array(["2024-01-01T00:05", "2024-01-01T00:20", "2024-01-01T00:40", "2024-01-01T01:10"],
                  dtype="datetime64[s]")
    start, v = regular(ts, [1.0, 2.0, 3.0, 4.0], "15min", how="sum", fill=0.0)
    assert str(start) == "2024-01-01T00:00:00"
    np.testing.assert_array_equal(v, [1, 2, 3, 0, 4])
    months = [f"2024-{m:02d}-01" for m in range(1, 13) if m != 2] + ["2024-03-15"]
    start, v = regular(np.array(months, dtype="datetime64[s]"), [1.0, 5.0] + [9.0] * 9 + [7.0], "MS")
    np.testing.assert_array_equal(v[:4], [1, 3.5, 6, 9])  # February interpolated, March averaged (5 and 7)
    assert regular(np.array(["2024-01-01", "2025-01-01"], dtype="datetime64[s]"), [1.0, 2.0], "MS") is None
