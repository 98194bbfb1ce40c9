"""Arena cap and periodic trim: installed once per process, trimming from a background thread."""
from __future__ import annotations

import threading
import time

import pytest

from triserve.configs.settings import MemorySettings
from triserve.observability import memory


def _trims_observed() -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("triserve_malloc_trim_seconds_count") or 0.0


def test_installs_once_and_trims_in_the_background(monkeypatch):
    if memory._glibc() is None:
        pytest.skip("not glibc")
    calls = []
    observed_before = _trims_observed()
    monkeypatch.setattr(memory, "_installed", False)
    monkeypatch.setattr(memory, "trim", lambda: calls.append(time.monotonic()) or True)
    assert memory.install(MemorySettings(malloc_arena_max=2, trim_interval_s=0.05)) is True
    assert memory.install(MemorySettings()) is False  # once per process
    deadline = time.monotonic() + 5
    while len(calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(calls) >= 2
    assert _trims_observed() >= observed_before + 2  # each trim is timed into triserve_malloc_trim_seconds
    assert any(t.name == "malloc-trim" and t.daemon for t in threading.enumerate())
    memory._stop.set()  # end this test's trimming thread
    for t in [t for t in threading.enumerate() if t.name == "malloc-trim"]:
        t.join(timeout=5)
    memory._stop.clear()


def test_trim_returns_freed_memory_without_error():
    if memory._glibc() is None:
        pytest.skip("not glibc")
    junk = [bytearray(4096) for _ in range(20_000)]
    del junk
    assert memory.trim() is True
