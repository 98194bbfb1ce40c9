import numpy as np
import pytest

from triserve import families
from triserve.kernel.ragged import pad_sequences


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


def test_only_families_that_say_so_are_batched_as_ragged():
    """The runner groups items by length for a family whose runtime says RAGGED (text), never by input names."""
    assert [name for name in families.names() if getattr(families.runtime(name), "RAGGED", False)] == ["text"]
