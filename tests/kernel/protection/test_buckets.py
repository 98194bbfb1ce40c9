"""Token buckets shared by the API workers of one server: a memory-mapped table under a lock, across processes."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from triserve.kernel.protection.buckets import (
    HEADER,
    SLOT,
    LocalBuckets,
    SharedBuckets,
    remove_stale,
    server_table,
)

ROOT = Path(__file__).resolve().parents[3]

WORKER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from triserve.kernel.protection.buckets import SharedBuckets
    table, me, other = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    store = SharedBuckets(table, 100)
    (table.parent / me).touch()
    deadline = time.monotonic() + 30
    while not (table.parent / other).exists() and time.monotonic() < deadline:  # both begin together
        time.sleep(0.001)
    allowed = 0
    for _ in range(300):  # interleaved: a short pause between checks
        allowed += store.take("client:addr:198.51.100.7", 1e-9, 100, time.monotonic()) == 0
        time.sleep(0.0005)
    print(allowed)
""")


def test_two_processes_share_one_budget(tmp_path):
    table = tmp_path / "limits.bin"
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(table), me, other], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE) for me, other in (("a", "b"), ("b", "a"))]
    allowed = [int(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(allowed) == 100, allowed  # one burst of 100 between them, not 100 each
    assert all(a > 0 for a in allowed), allowed  # both took part


def test_shared_refill_and_wait(tmp_path):
    store = SharedBuckets(tmp_path / "t.bin", 10)
    assert store.take("k", 2.0, 2, 0.0) == 0 and store.take("k", 2.0, 2, 0.0) == 0
    assert store.take("k", 2.0, 2, 0.0) == pytest.approx(0.5)
    assert store.take("k", 2.0, 2, 0.5) == 0
    other = SharedBuckets(tmp_path / "t.bin", 10)  # another worker sees the same bucket
    assert other.take("k", 2.0, 2, 0.5) == pytest.approx(0.5)
    assert other.take("j", 2.0, 2, 0.5) == 0  # and other keys are full


def test_table_is_bounded_and_replaces_the_least_recently_used(tmp_path):
    store = SharedBuckets(tmp_path / "t.bin", 4)  # 8 slots
    assert store.slots == 8 and (tmp_path / "t.bin").stat().st_size == HEADER.size + 8 * SLOT.size
    for i in range(50):  # far more keys than slots: never grows, never fails
        store.take(f"k{i}", 1.0, 1, float(i))
    assert (tmp_path / "t.bin").stat().st_size == HEADER.size + 8 * SLOT.size
    assert store.take("k49", 1.0, 1, 49.0) > 0  # the most recent key kept its (empty) bucket


def test_a_table_of_another_layout_starts_over(tmp_path):
    path = tmp_path / "t.bin"
    path.write_bytes(b"garbage" * 10)
    store = SharedBuckets(path, 10)
    assert store.take("k", 1.0, 1, 0.0) == 0 and path.read_bytes()[:8] == b"TSBKT001"


def test_the_table_is_named_after_the_server_and_stale_ones_are_removed(tmp_path):
    mine = server_table(tmp_path)  # this process's parent plays the arbiter
    assert mine.parent == tmp_path and mine.name.startswith(f"triserve-limits-{os.getppid()}-")
    SharedBuckets(mine, 10)
    gone = tmp_path / "triserve-limits-999999999-12345.bin"  # a pid that cannot exist
    gone.write_bytes(b"")
    reused = tmp_path / f"triserve-limits-{os.getppid()}-1.bin"  # this pid, but another start time
    reused.write_bytes(b"")
    assert sorted(remove_stale(tmp_path)) == sorted([gone, reused]) and mine.exists()


def test_local_buckets_are_bounded():
    store = LocalBuckets(3)
    for i in range(10):
        store.take(f"k{i}", 1.0, 1, 0.0)
    assert list(store.buckets) == ["k7", "k8", "k9"]
