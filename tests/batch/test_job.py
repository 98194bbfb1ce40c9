"""batch/job.py: the shard plan, atomic writes, what a rerun keeps and what it cleans."""
from __future__ import annotations

import json

import pytest

from triserve.batch.job import JobDir, JobMismatch, JobSpec, atomic_write


def spec(**over) -> JobSpec:
    base = dict(family="text", deployment="text", role="primary", model="m", version="1", input="in.jsonl",
                input_fingerprint="f", items=23, shard_size=10, chunk_size=4, format="parquet", options={"top_k": 3})
    return JobSpec(**{**base, **over})


def test_shards_and_chunks_cover_every_item_once():
    s = spec()
    assert s.shards == 3
    assert [s.shard_range(i) for i in range(3)] == [(0, 10), (10, 20), (20, 23)]
    assert s.chunk_ranges(0) == [(0, 4), (4, 8), (8, 10)]
    assert s.chunk_ranges(2) == [(20, 23)]
    covered = [i for shard in range(s.shards) for a, b in s.chunk_ranges(shard) for i in range(a, b)]
    assert covered == list(range(23))


def test_atomic_write_leaves_only_the_file(tmp_path):
    atomic_write(tmp_path / "a.bin", b"one")
    atomic_write(tmp_path / "a.bin", b"two")
    assert [p.name for p in tmp_path.iterdir()] == ["a.bin"]
    assert (tmp_path / "a.bin").read_bytes() == b"two"


def test_resume_keeps_the_pinned_version_and_refuses_another_job(tmp_path):
    jobdir = JobDir(tmp_path)
    assert jobdir.start(spec(version="1")).version == "1"
    assert jobdir.start(spec(version="2")).version == "1"  # the alias moved: the job keeps its version
    with pytest.raises(JobMismatch, match="input_fingerprint"):
        jobdir.start(spec(input_fingerprint="other"))
    with pytest.raises(JobMismatch, match="shard_size"):
        jobdir.start(spec(shard_size=5))


def test_only_recorded_verified_shards_count_and_leftovers_are_cleaned(tmp_path):
    s = spec()
    jobdir = JobDir(tmp_path)
    jobdir.start(s)
    jobdir.commit(s, 0, b"shard zero", rows=10, errors=1, seconds=0.1)
    jobdir.commit(s, 1, b"shard one", rows=10, errors=0, seconds=0.1)
    assert sorted(jobdir.finished(s)) == [0, 1] and jobdir.pending(s) == [2]
    # a kill between a part and its record, a temporary file, a part changed after its record
    jobdir.part_path(s, 2).write_bytes(b"half written shard two")
    (tmp_path / ".part-00002.parquet.tmp-1-abc").write_bytes(b"partial")
    jobdir.part_path(s, 1).write_bytes(b"tampered")
    assert jobdir.pending(s) == [1, 2]
    jobdir.start(s)  # the rerun's start cleans what is not a finished shard
    assert sorted(p.name for p in tmp_path.glob("part-*")) == ["part-00000.parquet"]
    assert not list(tmp_path.glob(".*tmp*"))
    record = json.loads(jobdir.record_path(0).read_text())
    assert record["rows"] == 10 and record["errors"] == 1
