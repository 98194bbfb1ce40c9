"""Opt-in heap snapshots for leak hunts (observability.heap_snapshot_dir).

Why: RSS growth alone cannot tell a Python-level leak from allocator or library growth. With the setting on, each
process traces allocations made after startup and writes `<dir>/<service>-<pid>-<n>.tracemalloc` on SIGUSR2;
scripts/bench/heap_diff compares two snapshots of the same process and names the lines whose memory grew.
"""
from __future__ import annotations

import itertools
import logging
import os
import signal
import tracemalloc
from pathlib import Path

log = logging.getLogger("triserve.heapdump")

FRAMES = 8  # traceback depth kept per allocation: enough to see which of our calls reached a library


def install(service: str, directory: Path | None) -> bool:
    """Start tracing and arm SIGUSR2 (main thread only); False when the setting is off."""
    if directory is None or signal.getsignal(signal.SIGUSR2) not in (signal.SIG_DFL, None):
        return False  # off, or already armed in this process (runner.placement=local)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    counter = itertools.count()
    if not tracemalloc.is_tracing():
        tracemalloc.start(FRAMES)

    def dump(_signum, _frame) -> None:
        path = directory / f"{service}-{os.getpid()}-{next(counter)}.tracemalloc"
        tracemalloc.take_snapshot().dump(str(path))
        log.warning("heap snapshot written: %s", path)

    try:
        signal.signal(signal.SIGUSR2, dump)
    except ValueError:  # not the main thread: tracing on, but no way to ask for a snapshot
        log.error("heap snapshots need the main thread; SIGUSR2 not armed in %s", service)
        return False
    log.warning("tracing allocations for leak hunts; SIGUSR2 writes a snapshot into %s", directory)
    return True
