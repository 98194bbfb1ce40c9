"""batch/sinks.py: one schema per family (an all-error shard too), Parquet and JSONL read back alike."""
from __future__ import annotations

import datetime as dt

import pyarrow.parquet as pq

from triserve.batch.sinks import encode, read_rows, schema
from triserve.families.forecast.batch import Adapter as Forecast
from triserve.kernel.batch import error_row


def test_all_error_shard_has_the_family_schema(tmp_path):
    row = {"key": "a", "deployment": "d", "model": "m", "version": "1",
           **error_row(Forecast.COLUMNS, "no_values", "series has no finite values")}
    ok = {**row, "error_code": None, "error": None, "frequency": "D", "timestamps": [dt.datetime(2024, 1, 1)],
          "point": [1.0], "lower_50": [1.0], "upper_50": [1.0], "lower_90": [1.0], "upper_90": [1.0],
          "quantile_levels": [0.5], "quantiles": [[1.0]], "method": "naive", "backtest_mase": 0.0, "points": 3,
          "imputed": 0, "duplicates_merged": 0, "used": 3, "padded": 0}
    (tmp_path / "part-00000.parquet").write_bytes(encode([row], Forecast.COLUMNS, "parquet"))
    (tmp_path / "part-00001.parquet").write_bytes(encode([ok], Forecast.COLUMNS, "parquet"))
    errors, full = (pq.read_schema(tmp_path / f"part-0000{i}.parquet") for i in (0, 1))
    assert errors.equals(full, check_metadata=False)
    assert errors.names == schema(Forecast.COLUMNS).names
    assert pq.read_table(tmp_path).num_rows == 2  # the parts read as one table


def test_parquet_and_jsonl_hold_the_same_rows(tmp_path):
    row = {"key": "a", "deployment": "d", "model": "m", "version": "1", "error_code": None, "error": None,
           "frequency": "D", "timestamps": [dt.datetime(2024, 1, 1)], "point": [1.5], "quantiles": [[1.0, 2.0]]}
    (tmp_path / "p").mkdir()
    (tmp_path / "j").mkdir()
    (tmp_path / "p" / "part-00000.parquet").write_bytes(encode([row], Forecast.COLUMNS, "parquet"))
    (tmp_path / "j" / "part-00000.jsonl").write_bytes(encode([row], Forecast.COLUMNS, "jsonl"))
    p, j = read_rows(tmp_path / "p")[0], read_rows(tmp_path / "j")[0]
    assert p["point"] == j["point"] == [1.5] and p["quantiles"] == j["quantiles"]
    assert p["timestamps"] == [dt.datetime(2024, 1, 1)] and j["timestamps"] == ["2024-01-01T00:00:00"]
    assert set(p) == set(j)
