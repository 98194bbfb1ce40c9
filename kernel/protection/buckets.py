"""Token buckets by key, kept where the processes that must share them can reach them (access.limits_scope).

- `LocalBuckets`: one process (an API worker on its own, or the only one): a bounded LRU dict.
- `SharedBuckets`: every API worker of one server: a fixed-size open-addressing table in a memory-mapped file
  (under /dev/shm: memory, no disk), read-modified-written under an exclusive flock. A check costs a few microseconds
  (one blake2b, two flock syscalls, a struct read and write;
  `python -m triserve.kernel.protection.buckets` measures it),
  where asking the runner would cost a runner round trip (~0.4-0.5 ms of the runner's and the worker's event loops,
  docs/performance.md) for every request, before its body is read, and would tie the limit to the runner tier.
- `RedisBuckets` (kernel/protection/redis_buckets.py): every replica of a cluster, one Lua script per check.

The file is named after the server's arbiter (the API workers' parent process, by its pid and start time), so the
workers of one server find the same table and another server on the host has its own; tables of servers that are
gone are removed by the arbiter's exit (services/gateway.py registers it) or, after a crash, by the next server to
start. Memory is bounded (max_clients x 2 slots of 32 bytes); when a key's probe
window is full its least recently used entry is replaced, as the LRU does.
"""
from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import re
import struct
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

MAGIC = b"TSBKT001"
HEADER = struct.Struct("<8sII48x")  # magic, slot count, slot size; 64 bytes
SLOT = struct.Struct("<Qddd")  # key hash (0: empty), tokens, updated, last used; 32 bytes
PROBES = 32  # slots searched from a key's home slot before the least recently used one is replaced


class BucketStore(Protocol):
    def take(self, key: str, rate: float, burst: float, now: float, n: float = 1.0) -> float:
        """Take n tokens from key's bucket (created full): 0 if allowed, else the seconds until enough tokens."""


def _refill_and_take(tokens: float, updated: float, rate: float, burst: float, now: float,
                     n: float) -> tuple[float, float]:
    """(tokens left, wait): the bucket refilled up to `now` (never beyond burst), then n taken if there are enough."""
    tokens = min(burst, tokens + max(0.0, now - updated) * rate)
    if tokens >= n:
        return tokens - n, 0.0
    return tokens, (n - tokens) / rate


class LocalBuckets:
    """The buckets of one process, least recently used evicted beyond `max_keys`."""

    def __init__(self, max_keys: int):
        self.max_keys = max_keys
        self.buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, updated)

    def take(self, key: str, rate: float, burst: float, now: float, n: float = 1.0) -> float:
        state = self.buckets.get(key)
        if state is None:
            state = (float(burst), now)
            if len(self.buckets) >= self.max_keys:
                self.buckets.popitem(last=False)
        else:
            self.buckets.move_to_end(key)
        tokens, wait = _refill_and_take(state[0], state[1], rate, burst, now, n)
        self.buckets[key] = (tokens, max(now, state[1]))
        return wait


def _key_hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") or 1


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux /proc), which tells a pid from its reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 of stat; fields after the command name start at 3


def default_dir() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def server_table(directory: Path | None = None, arbiter: int | None = None) -> Path:
    """The shared table of the server this process is an API worker of (named after its parent, the arbiter), or
    of the server whose arbiter is `arbiter`."""
    parent = os.getppid() if arbiter is None else arbiter
    return (directory or default_dir()) / f"triserve-limits-{parent}-{_start_time(parent) or 0}.bin"


def remove_own_table(directory: Path | None = None) -> None:
    """At the arbiter's exit: remove the table its API workers shared (nothing to do in any other process, whose
    pid names no table)."""
    try:
        server_table(directory, arbiter=os.getpid()).unlink(missing_ok=True)
    except OSError:
        pass


_NAME = re.compile(r"^triserve-limits-(\d+)-(\d+)\.bin$")


def remove_stale(directory: Path) -> list[Path]:
    """Remove the tables of servers that are gone (their arbiter's pid is dead or now another process)."""
    removed = []
    for path in directory.glob("triserve-limits-*.bin"):
        m = _NAME.match(path.name)
        if m is None or m.group(2) == "0":  # named without /proc: cannot tell
            continue
        if _start_time(int(m.group(1))) != m.group(2):
            try:
                path.unlink()
                removed.append(path)
            except OSError:
                pass
    return removed


class SharedBuckets:
    """Buckets shared by the processes that open the same file (see the module docstring)."""

    def __init__(self, path: Path, max_keys: int):
        slots = 1
        while slots < 2 * max_keys:  # load factor at most 1/2: probes stay short
            slots *= 2
        self.path, self.slots = path, slots
        self._mask = slots - 1
        self._lock = threading.Lock()  # flock does not exclude threads of one process (one open file description)
        size = HEADER.size + slots * SLOT.size
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_size != size or os.pread(fd, 8, 0) != MAGIC:  # new, or another layout: start over
                    os.ftruncate(fd, 0)
                    os.ftruncate(fd, size)
                    os.pwrite(fd, HEADER.pack(MAGIC, slots, SLOT.size), 0)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            self._map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def take(self, key: str, rate: float, burst: float, now: float, n: float = 1.0) -> float:
        h = _key_hash(key)
        m, home = self._map, h & self._mask
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                found, victim, victim_used = -1, home, float("inf")
                for i in range(PROBES):
                    pos = HEADER.size + ((home + i) & self._mask) * SLOT.size
                    kh, tokens, updated, used = SLOT.unpack_from(m, pos)
                    if kh == h:
                        found = pos
                        break
                    if kh == 0:  # slots are never emptied, so the key is not further on
                        found, tokens, updated = pos, float(burst), now
                        break
                    if used < victim_used:
                        victim, victim_used = pos, used
                if found < 0:  # the window is full: replace its least recently used bucket
                    found, tokens, updated = victim, float(burst), now
                tokens, wait = _refill_and_take(tokens, updated, rate, burst, now, n)
                SLOT.pack_into(m, found, h, tokens, max(now, updated), now)
                return wait
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)


def _measure(n: int = 20_000) -> None:  # pragma: no cover - `python -m triserve.kernel.protection.buckets`
    import time

    with tempfile.TemporaryDirectory() as d:
        stores: dict[str, BucketStore] = {"local": LocalBuckets(10_000),
                                          "shared": SharedBuckets(Path(d) / "t.bin", 10_000)}
        for name, store in stores.items():
            keys = [f"addr:10.0.{i // 256}.{i % 256}" for i in range(1000)]
            started = time.perf_counter()
            for i in range(n):
                store.take(keys[i % 1000], 1e6, 1e6, time.monotonic())
            print(f"{name}: {(time.perf_counter() - started) / n * 1e6:.2f} us per check")


if __name__ == "__main__":  # pragma: no cover
    _measure()
