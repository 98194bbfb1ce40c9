"""COCO RLE: a hand-computed example, round trips, and pycocotools itself where it is installed."""
from __future__ import annotations

import numpy as np
import pytest

from triserve.families.segmentation import rle


def test_hand_computed_example():
    # 4 rows x 3 columns, pixels (1,1) and (2,1) set. Column-major: column 0 = 4 zeros, column 1 = 0 1 1 0,
    # column 2 = 4 zeros -> runs: 5 zeros, 2 ones, 5 zeros -> counts [5, 2, 5]; each < 16 is one char (count + 48)
    m = np.zeros((4, 3), bool)
    m[1:3, 1] = True
    assert rle.mask_counts(m).tolist() == [5, 2, 5]
    assert rle.encode(m) == {"size": [4, 3], "counts": "525"}


def test_first_pixel_set_starts_with_an_empty_run_and_no_trailing_empty_run():
    m = np.zeros((2, 2), bool)
    m[:, 1] = True  # column 0 off, column 1 on: 2 zeros then 2 ones, nothing after
    assert rle.mask_counts(m).tolist() == [2, 2]
    full = np.ones((2, 3), bool)
    assert rle.mask_counts(full).tolist() == [0, 6]
    assert rle.mask_counts(np.zeros((3, 3), bool)).tolist() == [9]


def test_large_counts_use_continuation_and_deltas():
    # counts >= 32 need two 5-bit groups; from the fourth count on the count two places before is subtracted
    counts = np.array([100, 40, 300, 45, 7], np.int64)
    s = rle.counts_to_string(counts)
    assert rle.string_to_counts(s).tolist() == counts.tolist()
    # 100 = 0b11_00100 -> groups 4 | 0x20, then 3 -> chars chr(4+32+48) chr(3+48)
    assert s.startswith(chr(4 + 32 + 48) + chr(3 + 48))


def test_crop_counts_equal_whole_mask_counts_and_runs_join_across_columns():
    h, w = 7, 5
    crop = np.ones((7, 2), bool)  # full-height columns 1 and 2: one run across the column boundary
    full = np.zeros((h, w), bool)
    full[:, 1:3] = True
    assert rle.crop_counts(crop, 1, 0, h, w).tolist() == rle.mask_counts(full).tolist() == [7, 14, 14]


@pytest.mark.parametrize("seed", range(20))
def test_round_trip_random_masks(seed):
    rng = np.random.default_rng(seed)
    h, w = rng.integers(1, 30, 2)
    m = rng.random((h, w)) < rng.random()
    enc = rle.encode(m)
    back = rle.decode_counts(rle.string_to_counts(enc["counts"]), *enc["size"])
    assert (back == m).all()


def test_matches_pycocotools():
    mask_api = pytest.importorskip("pycocotools.mask")
    rng = np.random.default_rng(1)
    for _ in range(100):
        h, w = rng.integers(1, 60, 2)
        m = rng.random((h, w)) < rng.random()
        ref = mask_api.encode(np.asfortranarray(m.astype(np.uint8)))
        assert rle.encode(m)["counts"] == ref["counts"].decode()
