"""A job: its spec, its shard plan, and the record of finished shards (what makes a rerun resume, exactly).

    <output>/_job.json          the spec: family, deployment, pinned model version, input fingerprint, options,
                                shard and chunk sizes, format (a rerun with other arguments is refused)
    <output>/part-00042.parquet one shard's rows (or .jsonl), in input order, written atomically
    <output>/_done/00042.json   the shard's record, written atomically AFTER its part: rows, errors, sha256
    <output>/_SUCCESS.json      the summary, when every shard is done

A shard counts as finished only when its record exists and its part file has the recorded sha256. Anything else (a
part without a record, a temporary file) is what a killed run left: it is removed and that shard runs again. Items are
split into shards by position in the input's deterministic order (sorted image keys, table rows, sorted series ids)
and each shard into chunks of `chunk_size` records, the unit of preprocessing and of model calls, identical on every
engine: so a resumed job, the local engine, Ray and Spark all write the same rows.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

JOB_FILE = "_job.json"
DONE_DIR = "_done"
SUCCESS_FILE = "_SUCCESS.json"
FORMATS = {"parquet": ".parquet", "jsonl": ".jsonl"}


class JobMismatch(RuntimeError):
    """The output directory holds another job's shards."""


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a reader (or a rerun after a kill) sees the whole file or none: a temporary
    file in the same directory, fsynced, renamed over, and the directory fsynced."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class JobSpec:
    family: str
    deployment: str
    role: str
    model: str
    version: str
    input: str
    input_fingerprint: str  # sha256 of the ordered item keys and their content sizes/hashes (batch/sources.py)
    items: int
    shard_size: int
    chunk_size: int
    format: str
    options: dict[str, Any] = field(default_factory=dict)
    command: str = ""  # the `triserve batch` command (a family may have several); "" in older jobs: the family's main

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {sorted(FORMATS)}")
        if self.shard_size < 1 or self.chunk_size < 1:
            raise ValueError("shard_size and chunk_size must be >= 1")

    @property
    def shards(self) -> int:
        return -(-self.items // self.shard_size)

    def shard_range(self, shard: int) -> tuple[int, int]:
        start = shard * self.shard_size
        return start, min(start + self.shard_size, self.items)

    def chunk_ranges(self, shard: int) -> list[tuple[int, int]]:
        """The chunks of a shard, as item ranges: the same on every engine (model calls never span them)."""
        start, stop = self.shard_range(shard)
        return [(k, min(k + self.chunk_size, stop)) for k in range(start, stop, self.chunk_size)]

    def comparable(self) -> dict[str, Any]:
        """What must match for a rerun to resume this job: everything but the pinned version (a rerun keeps the
        version the job started with, wherever the alias points now)."""
        out = asdict(self)
        out.pop("version")
        return out


@dataclass(frozen=True)
class ShardRecord:
    shard: int
    file: str
    rows: int
    errors: int
    sha256: str
    seconds: float


class JobDir:
    """The output directory of one job."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    @property
    def done_dir(self) -> Path:
        return self.root / DONE_DIR

    def part_path(self, spec: JobSpec, shard: int) -> Path:
        return self.root / f"part-{shard:05d}{FORMATS[spec.format]}"

    def record_path(self, shard: int) -> Path:
        return self.done_dir / f"{shard:05d}.json"

    def existing_spec(self) -> JobSpec | None:
        path = self.root / JOB_FILE
        if not path.is_file():
            return None
        return JobSpec(**json.loads(path.read_text())["spec"])

    def start(self, spec: JobSpec) -> JobSpec:
        """Create the job, or resume the one recorded here when its arguments are the same (its pinned version is
        kept); a different job in the same directory is refused."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.done_dir.mkdir(exist_ok=True)
        old = self.existing_spec()
        if old is not None:
            if old.comparable() != spec.comparable():
                diff = sorted(k for k, v in spec.comparable().items() if old.comparable().get(k) != v)
                raise JobMismatch(f"{self.root} holds another job (differs in {', '.join(diff)}): use a new --output "
                                  "or remove it")
            self._clean(old)
            return old
        atomic_write(self.root / JOB_FILE, json.dumps({"spec": asdict(spec)}, indent=1, sort_keys=True).encode())
        return spec

    def _clean(self, spec: JobSpec) -> None:
        """Remove what a killed run left: temporary files, and parts whose record is missing or does not match."""
        for tmp in list(self.root.glob(".*.tmp-*")) + list(self.done_dir.glob(".*.tmp-*")):
            tmp.unlink(missing_ok=True)
        finished = self.finished(spec)
        for part in self.root.glob("part-*"):
            shard = int(part.name.split("-")[1].split(".")[0])
            if shard not in finished:
                part.unlink(missing_ok=True)

    def record(self, shard: int) -> ShardRecord | None:
        path = self.record_path(shard)
        if not path.is_file():
            return None
        return ShardRecord(**json.loads(path.read_text()))

    def finished(self, spec: JobSpec, verify: bool = True) -> dict[int, ShardRecord]:
        """Shards whose record exists and whose part has the recorded sha256 (verify=False: size not read)."""
        out = {}
        for path in sorted(self.done_dir.glob("[0-9]*.json")):
            rec = self.record(int(path.stem))
            if rec is None or rec.shard >= spec.shards:
                continue
            part = self.root / rec.file
            if not part.is_file():
                continue
            if verify and sha256_bytes(part.read_bytes()) != rec.sha256:
                continue
            out[rec.shard] = rec
        return out

    def pending(self, spec: JobSpec) -> list[int]:
        done = self.finished(spec)
        return [s for s in range(spec.shards) if s not in done]

    def commit(self, spec: JobSpec, shard: int, data: bytes, rows: int, errors: int, seconds: float) -> ShardRecord:
        """Write a shard's part, then its record (both atomic): the record is the commit point."""
        part = self.part_path(spec, shard)
        atomic_write(part, data)
        rec = ShardRecord(shard=shard, file=part.name, rows=rows, errors=errors, sha256=sha256_bytes(data),
                          seconds=round(seconds, 4))
        atomic_write(self.record_path(shard), json.dumps(asdict(rec), sort_keys=True).encode())
        return rec

    def write_success(self, summary: dict[str, Any]) -> None:
        atomic_write(self.root / SUCCESS_FILE, json.dumps(summary, indent=1, sort_keys=True).encode())
