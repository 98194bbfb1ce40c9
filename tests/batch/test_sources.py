"""batch/sources.py: deterministic order, every input kind, fingerprints that see a changed input."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.batch.conftest import LINE_SERIES, TEXTS
from triserve.batch.sources import Loader, open_source


def test_images_sorted_recursive_images_only(batch_inputs):
    src = open_source("images", str(batch_inputs["detect"]))
    assert src.keys == sorted(src.keys)
    assert "notes.txt" not in src.keys and "sub/img000.jpg" in src.keys and "corrupt.png" in src.keys
    records = Loader()("images", src.descriptors[:2])
    assert all("data" in r for r in records)
    assert open_source("images", str(batch_inputs["detect"])).fingerprint == src.fingerprint


def test_unreadable_image_is_a_record_error(tmp_path):
    records = Loader()("images", [{"key": "gone.jpg", "uri": str(tmp_path / "gone.jpg"), "size": 1}])
    assert records[0]["key"] == "gone.jpg" and "FileNotFoundError" in records[0]["read_error"]


def test_texts_jsonl_csv_parquet_agree(batch_inputs, tmp_path):
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    src = open_source("texts", str(batch_inputs["classify"]))
    assert src.keys[:3] == ["t000", "t001", "t002"] and src.descriptors[3]["text"] == TEXTS[3]
    table = pa.Table.from_pylist([{"id": d["key"], "text": d["text"]} for d in src.descriptors])
    pq.write_table(table, tmp_path / "t.parquet")
    pacsv.write_csv(table, tmp_path / "t.csv")
    for path in (tmp_path / "t.parquet", tmp_path / "t.csv"):
        other = open_source("texts", str(path))
        assert [(d["key"], d["text"] or "") for d in other.descriptors] == \
            [(d["key"], d["text"]) for d in src.descriptors]


def test_texts_without_ids_use_row_numbers_and_duplicates_are_refused(tmp_path):
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in ("a", "b")) + "\n")
    assert open_source("texts", str(tmp_path / "a.jsonl")).keys == ["0", "1"]
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps({"id": 1, "text": t}) for t in ("a", "b")) + "\n")
    with pytest.raises(ValueError, match="duplicate"):
        open_source("texts", str(tmp_path / "b.jsonl"))


def test_series_grouped_by_id_whatever_the_row_order(batch_inputs):
    src = open_source("series", str(batch_inputs["forecast"]))
    assert src.keys == sorted(src.keys) and "lonely" in src.keys
    line = next(d for d in src.descriptors if d["key"] == LINE_SERIES)
    order = np.argsort(line["timestamps"])
    assert np.array_equal(line["values"][order], 10 + 2 * np.arange(40))
    assert line["timestamps"].dtype == np.dtype("datetime64[s]")
