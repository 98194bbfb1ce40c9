"""Rows -> the bytes of one shard's part file (Parquet or JSONL), and an output directory read back.

Every row has kernel/batch.COMMON_COLUMNS (key, deployment, model, version, error_code, error) then the family's
columns (its adapter's COLUMNS); a refused item has its family columns null. The schema is fixed per family, so an
all-error shard has the same columns as any other and the parts read as one table.
"""
from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from triserve.kernel.batch import COMMON_COLUMNS

_SCALARS = {"str": "string", "f64": "float64", "i64": "int64", "bool": "bool_"}


def arrow_type(name: str):
    import pyarrow as pa

    if name.startswith("list<") and name.endswith(">"):
        return pa.list_(arrow_type(name[5:-1]))
    if name == "ts":
        return pa.timestamp("s")
    return getattr(pa, _SCALARS[name])()


def schema(family_columns: dict[str, str]):
    import pyarrow as pa

    return pa.schema([(n, arrow_type(t)) for n, t in {**COMMON_COLUMNS, **family_columns}.items()])


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, list):
        return [_json_value(x) for x in v]
    return v


def encode(rows: Sequence[dict[str, Any]], family_columns: dict[str, str], fmt: str) -> bytes:
    """One shard's part file."""
    columns = list({**COMMON_COLUMNS, **family_columns})
    if fmt == "jsonl":
        return "".join(json.dumps({c: _json_value(r.get(c)) for c in columns}, ensure_ascii=False) + "\n"
                       for r in rows).encode()
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows], schema=schema(family_columns))
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def read_rows(output: Path | str) -> list[dict[str, Any]]:
    """Every row of a job's output directory, shard by shard (part files in name order)."""
    out: list[dict[str, Any]] = []
    for part in sorted(Path(output).glob("part-*")):
        if part.suffix == ".jsonl":
            out += [json.loads(line) for line in part.read_text().splitlines() if line]
        else:
            import pyarrow.parquet as pq

            out += pq.read_table(part).to_pylist()
    return out
