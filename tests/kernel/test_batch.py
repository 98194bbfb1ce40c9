"""kernel/batch.py: a chunk's rows are the family's columns with null errors, or a refused record's error row, in
record order; a record's outputs are its items' rows."""
from __future__ import annotations

import numpy as np

from triserve.kernel.batch import Prepared


def test_rows_follow_the_records_and_refused_ones_are_error_rows():
    prepared = Prepared(keys=["a", "b", "c"], items=[np.zeros(1)] * 3, owners=[0, 2, 2], states=["x", None, "z"],
                        errors={1: ("invalid_image", "could not be decoded")})
    outputs = [np.asarray([1.0]), np.asarray([2.0]), np.asarray([3.0])]
    rows = prepared.rows(outputs, {"total": "f64", "state": "str"},
                         lambda outs, state: {"total": float(sum(o[0] for o in outs)), "state": state})
    assert rows == [{"total": 1.0, "state": "x", "error_code": None, "error": None},
                    {"total": None, "state": None, "error_code": "invalid_image", "error": "could not be decoded"},
                    {"total": 5.0, "state": "z", "error_code": None, "error": None}]
