"""Job inputs -> an ordered list of lightweight descriptors, and `load(descriptors)` -> the records a family's adapter
reads (kernel/batch.py).

    images  a local folder (recursively: .jpg .jpeg .png .webp .bmp .gif .tif .tiff), or an object store prefix
            s3://bucket/prefix[?endpoint_url=http://127.0.0.1:9000] (boto3, as the registry's S3 store; credentials
            from boto3's chain); descriptors are (key, location), the bytes are read by the worker that decodes them,
            so on a cluster the folder must be shared storage or the prefix an object store
    texts   JSONL, CSV or Parquet with a text column (default "text") and an optional id column (default "id", else
            the row number); descriptors carry the texts
    series  a long table (CSV, JSONL or Parquet) of (id, timestamp, value) rows, any order, one row per observation
            (null values are missing points), plus the covariate columns the job names (covariate_columns; rows
            after a series' last value carry their future values) and the static categorical columns
            (static_columns, forecast-panel's option); descriptors carry one series each, ordered by id

The order is deterministic (sorted keys, table order, sorted ids) and the fingerprint covers every key and its content
(image sizes, text and series hashes): a rerun over changed inputs is refused instead of mixing two inputs.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

from triserve.kernel.batch import Option

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}
TABLE_SUFFIXES = {".jsonl", ".ndjson", ".csv", ".parquet", ".pq"}


@dataclass
class Source:
    kind: str
    descriptors: list[dict[str, Any]]
    fingerprint: str

    @property
    def keys(self) -> list[str]:
        return [d["key"] for d in self.descriptors]


def _digest(parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode())
        h.update(b"\0")
    return h.hexdigest()


# --- images -----------------------------------------------------------------------------------------------------
def _s3(uri: str):
    import boto3  # the s3 extra (models/stores/s3.py uses it too)

    parts = urlsplit(uri)
    endpoint = (parse_qs(parts.query).get("endpoint_url") or [""])[0] or os.environ.get("TRISERVE_S3_ENDPOINT_URL")
    return boto3.client("s3", endpoint_url=endpoint or None), parts.netloc, parts.path.strip("/")


def _image_source(location: str) -> Source:
    if location.startswith("s3://"):
        client, bucket, prefix = _s3(location)
        found = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                key = obj["Key"]
                if Path(key).suffix.lower() in IMAGE_SUFFIXES:
                    rel = key[len(prefix):].lstrip("/") if prefix else key
                    found.append({"key": rel, "uri": f"{location.split('?')[0].rstrip('/')}/{rel}",
                                  "endpoint": location, "size": int(obj["Size"])})
        found.sort(key=lambda d: d["key"])
    else:
        root = Path(location)
        if not root.is_dir():
            raise FileNotFoundError(f"image input {root} is not a directory")
        found = [{"key": p.relative_to(root).as_posix(), "uri": str(p.resolve()), "size": p.stat().st_size}
                 for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]
        found.sort(key=lambda d: d["key"])
    return Source("images", found, _digest(x for d in found for x in (d["key"], d["size"])))


def _read_image(desc: dict[str, Any], clients: dict) -> dict[str, Any]:
    try:
        if desc["uri"].startswith("s3://"):
            if desc["endpoint"] not in clients:
                clients[desc["endpoint"]] = _s3(desc["endpoint"])
            client, bucket, prefix = clients[desc["endpoint"]]
            key = f"{prefix}/{desc['key']}" if prefix else desc["key"]
            data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        else:
            data = Path(desc["uri"]).read_bytes()
    except Exception as exc:  # noqa: BLE001 - any read failure is that item's error row, never the job's end
        return {"key": desc["key"], "read_error": f"{type(exc).__name__}: {exc}"}
    return {"key": desc["key"], "data": data}


# --- tables -----------------------------------------------------------------------------------------------------
def read_table(path: Path):
    """A pyarrow Table from JSONL, CSV or Parquet (by suffix)."""
    import pyarrow.csv as pacsv
    import pyarrow.json as pajson
    import pyarrow.parquet as pq

    suffix = Path(path).suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise ValueError(f"{path}: expected one of {sorted(TABLE_SUFFIXES)}")
    if suffix in (".parquet", ".pq"):
        return pq.read_table(path)
    if suffix == ".csv":
        return pacsv.read_csv(path)
    return pajson.read_json(path)


def _text_source(location: str, text_column: str, id_column: str) -> Source:
    table = read_table(Path(location))
    if text_column not in table.column_names:
        raise KeyError(f"{location}: no column {text_column!r} (columns: {table.column_names}); --text-column")
    texts = table.column(text_column).to_pylist()
    ids = ([str(x) for x in table.column(id_column).to_pylist()] if id_column in table.column_names
           else [str(i) for i in range(len(texts))])
    if len(set(ids)) != len(ids):
        raise ValueError(f"{location}: column {id_column!r} has duplicate ids")
    found = [{"key": k, "text": t} for k, t in zip(ids, texts)]
    return Source("texts", found, _digest(x for d in found for x in (d["key"], json.dumps(d["text"]))))


def _series_source(location: str, id_column: str, time_column: str, value_column: str,
                   covariate_columns: Sequence[str] = (), static_columns: Sequence[str] = ()) -> Source:
    import pyarrow as pa

    table = read_table(Path(location))
    for col in (id_column, time_column, value_column, *covariate_columns, *static_columns):
        if col not in table.column_names:
            raise KeyError(f"{location}: no column {col!r} (columns: {table.column_names})")
    ids = np.asarray([str(x) for x in table.column(id_column).to_pylist()], dtype=object)
    col = table.column(time_column)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):  # ISO 8601 text (JSONL): numpy parses it
        stamps = np.array([s.rstrip("Z") if s else "NaT" for s in col.to_pylist()], dtype="datetime64[s]")
    else:  # timestamps (UTC when zoned) or dates
        stamps = np.asarray(col.cast(pa.timestamp("s")).to_numpy(zero_copy_only=False), dtype="datetime64[s]")

    def floats(name: str) -> np.ndarray:
        return np.asarray(table.column(name).cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)

    values = floats(value_column)
    covs = {name: floats(name) for name in covariate_columns}
    statics = {name: np.asarray([None if v is None else str(v) for v in table.column(name).to_pylist()], dtype=object)
               for name in static_columns}
    order = np.argsort(ids, kind="stable")
    ids, stamps, values = ids[order], stamps[order], values[order]
    covs = {name: c[order] for name, c in covs.items()}
    statics = {name: c[order] for name, c in statics.items()}
    found: list[dict[str, Any]] = []
    if len(ids):
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        for a, b in zip(starts, np.r_[starts[1:], len(ids)]):
            record = {"key": str(ids[a]), "timestamps": stamps[a:b], "values": values[a:b]}
            if covs:
                record["covariates"] = {name: c[a:b] for name, c in covs.items()}
            if statics:
                record["static"] = {name: c[a:b].tolist() for name, c in statics.items()}
            found.append(record)
    digest = _digest(x for d in found for x in (d["key"], d["timestamps"].tobytes(), d["values"].tobytes(),
                                                 *(c.tobytes() for c in d.get("covariates", {}).values()),
                                                 *(json.dumps(c) for c in d.get("static", {}).values())))
    return Source("series", found, digest)


def column_list(value: Any) -> list[str]:
    """'temp, promo' -> ['temp', 'promo'] (a comma-separated job option)."""
    return [c.strip() for c in str(value or "").split(",") if c.strip()]


# per source kind: the job options that name its columns (`--text-column` ... of `triserve batch`)
OPTIONS: dict[str, tuple[Option, ...]] = {
    "images": (),
    "texts": (Option("text_column", "the column holding the texts", default="text"),
              Option("id_column", "row ids (absent: the row number)", default="id")),
    "series": (Option("id_column", "the series id column", default="id"),
               Option("time_column", "the timestamp column", default="timestamp"),
               Option("value_column", "the value column", default="value"),
               Option("covariate_columns", "known-future covariate columns, comma-separated: a series' rows after "
                      "its last value (value null) carry the covariates over the horizon")),
}


def open_source(kind: str, location: str, options: dict[str, Any] | None = None) -> Source:
    """kind: images | texts | series (the family adapter's SOURCE)."""
    opts = options or {}
    if kind == "images":
        return _image_source(location)
    if kind == "texts":
        return _text_source(location, opts.get("text_column") or "text", opts.get("id_column") or "id")
    if kind == "series":
        return _series_source(location, opts.get("id_column") or "id", opts.get("time_column") or "timestamp",
                              opts.get("value_column") or "value", column_list(opts.get("covariate_columns")),
                              column_list(opts.get("static_columns")))
    raise ValueError(f"unknown source kind {kind!r}")


class Loader:
    """descriptors -> records, in the process that prepares them (images: their bytes read here)."""

    def __init__(self) -> None:
        self.clients: dict[str, Any] = {}

    def __call__(self, kind: str, descriptors: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        if kind == "images":
            return [_read_image(d, self.clients) for d in descriptors]
        return list(descriptors)
