"""Leak-hunt snapshots: SIGUSR2 writes a tracemalloc snapshot, and the diff names the line that allocated."""
from __future__ import annotations

import os
import signal
import time
import tracemalloc

from scripts.bench.heap_diff import top_growth
from triserve.observability import heapdump

_kept: list[bytes] = []


def _grow() -> None:
    _kept.extend(bytes(1024) + bytes([i % 256]) for i in range(2000))  # ~2 MB that stays referenced


def _wait_for(directory, n: int):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        files = sorted(directory.glob("*.tracemalloc"), key=lambda p: p.stat().st_mtime)
        if len(files) >= n:
            return files
        time.sleep(0.05)
    raise AssertionError(f"expected {n} snapshots in {directory}")


def test_off_by_default_and_snapshot_diff_names_the_growing_line(tmp_path):
    previous = signal.getsignal(signal.SIGUSR2)
    try:
        assert heapdump.install("unit", None) is False
        assert heapdump.install("unit", tmp_path) is True
        assert heapdump.install("unit", tmp_path) is False  # armed once per process
        os.kill(os.getpid(), signal.SIGUSR2)
        first = _wait_for(tmp_path, 1)[0]
        _grow()
        os.kill(os.getpid(), signal.SIGUSR2)
        second = _wait_for(tmp_path, 2)[-1]
        assert first.name.startswith(f"unit-{os.getpid()}-")
        traced_mb, rows = top_growth(first, second, 5)
        assert traced_mb > 1.5
        assert "test_heapdump.py" in rows[0]["where"] and rows[0]["grew_kb"] > 1500
    finally:
        signal.signal(signal.SIGUSR2, previous)
        tracemalloc.stop()
        _kept.clear()
