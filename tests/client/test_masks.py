"""triserve_client.masks: COCO RLE strings from the server's own encoder (families/segmentation/rle.py) decode back to
the masks they came from; a hand-computed example; malformed strings are refused; without numpy decode_rle says
what to install while the pure-Python functions keep working."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from triserve.families.segmentation import rle as server_rle
from triserve_client.masks import decode_counts, decode_rle, mask_area
from triserve_client.models import RLE


def encode(mask: np.ndarray) -> dict:
    counts = server_rle.counts_to_strings([server_rle.mask_counts(mask)])[0]
    return {"size": list(mask.shape), "counts": counts}


def test_hand_computed_example():
    # 3x2, column-major pixels 0,0,1 | 1,1,0 -> runs 2, 3, 1; stored as '2', '3', '1' (+48)
    mask = np.array([[0, 1], [0, 1], [1, 0]], bool)
    assert decode_counts("231") == [2, 3, 1]
    got = decode_rle({"size": [3, 2], "counts": "231"})
    assert got.dtype == bool and (got == mask).all() and mask_area({"size": [3, 2], "counts": "231"}) == 3
    assert encode(mask)["counts"] == "231"


@pytest.mark.parametrize("seed", range(6))
def test_the_servers_encoding_round_trips(seed):
    rng = np.random.default_rng(seed)
    h, w = rng.integers(1, 300, 2)
    mask = np.zeros((h, w), bool)
    mask[rng.integers(0, h):, rng.integers(0, w):] = True  # long runs: continuation groups and negative deltas
    mask ^= rng.random((h, w)) < 0.05
    doc = encode(mask)
    assert (decode_rle(doc) == mask).all() and (decode_rle(RLE(**doc)) == mask).all()
    assert mask_area(doc) == int(mask.sum()) and sum(decode_counts(doc["counts"])) == h * w


def test_a_mask_set_at_its_first_pixel_and_an_empty_mask():
    full = np.ones((4, 5), bool)
    assert decode_counts(encode(full)["counts"])[0] == 0 and decode_rle(encode(full)).all()
    empty = np.zeros((4, 5), bool)
    assert decode_counts(encode(empty)["counts"]) == [20] and not decode_rle(encode(empty)).any()


@pytest.mark.parametrize(("doc", "message"), [
    ({"size": [3, 2], "counts": "23"}, "cover 5 pixels"),
    ({"size": [3, 2], "counts": "2 1"}, "outside the format's range"),
    ({"size": [3, 2], "counts": "2P"}, "end inside a number"),
])
def test_malformed_rle_is_refused(doc, message):
    with pytest.raises(ValueError, match=message):
        decode_rle(doc)


def test_without_numpy_decode_rle_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpy", None)  # `import numpy` raises ImportError
    with pytest.raises(ImportError, match=r"triserve-client\[masks\]"):
        decode_rle({"size": [3, 2], "counts": "231"})
    assert mask_area({"size": [3, 2], "counts": "231"}) == 3
