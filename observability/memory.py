"""Smaller, steadier resident memory for long-running workers (memory.* settings).

Why: glibc gives every thread that allocates an arena of its own (up to 8 per core), and each keeps what it freed;
an inference worker has several such threads (event loop, thread pools, ONNX Runtime callers). Capping the arenas and
trimming periodically measured 24 MB (5%) less RSS in the runner and 4-5 MB less in the gateway at the end of a
50,000-request soak, at the same throughput (docs/bench/soak_rss*.md). A tracemalloc diff over 30,000 requests
(docs/bench/heap_diff.md) shows no Python-level growth to fix. No-ops where the C library is not glibc.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import threading
import time

from prometheus_client import Histogram

log = logging.getLogger("triserve.memory")
TRIM_SECONDS = Histogram("triserve_malloc_trim_seconds", "Duration of each periodic malloc_trim: allocations in "
                         "this process wait on the allocator's locks meanwhile.",
                         buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0))

_M_ARENA_MAX = -8  # mallopt parameter number in glibc's malloc.h
_installed = False
_stop = threading.Event()  # set to end the trimming thread (tests)


@functools.cache
def _glibc():
    """glibc, loaded once (find_library runs ldconfig); None elsewhere."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def trim() -> bool:
    """Return freed heap pages to the OS now (ctypes releases the GIL for the call); False without glibc."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def install(cfg) -> bool:
    """Once per process, early (before request threads exist): cap the arenas, start the trimming thread."""
    global _installed
    libc = _glibc()
    if _installed or libc is None:
        return False
    _installed = True
    if cfg.malloc_arena_max:
        libc.mallopt(_M_ARENA_MAX, cfg.malloc_arena_max)
    if cfg.trim_interval_s > 0:
        def loop() -> None:
            while not _stop.wait(cfg.trim_interval_s):
                started = time.perf_counter()
                trim()
                took = time.perf_counter() - started
                TRIM_SECONDS.observe(took)
                if took > 0.05:
                    log.warning("malloc_trim took %.0f ms", took * 1000)
        threading.Thread(target=loop, name="malloc-trim", daemon=True).start()
    log.info("malloc arenas capped at %s, trimmed every %s s", cfg.malloc_arena_max or "default",
             cfg.trim_interval_s or "never")
    return True
