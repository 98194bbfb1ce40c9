"""Memory accounting for the models one runner process holds: what each costs, what the process may use.

Why: one runner holds many deployments on one device. A batch cap set too high overflows memory, one model's batch
eats what its neighbours need, and a model that does not fit should be refused at load with the numbers, never
discovered by an out-of-memory kill under traffic (seed articles: "batch cap too high overflows device memory").

What is measured, per loaded model (runners/pool.py does it while loading and warming):
  resident   process memory the model holds after its session is created (on CPU: RSS after - before; ONNX
             Runtime's arena is grown by warm-up, so the part that scales with the batch is measured separately);
  per_item   working memory per batch item: (RSS after the largest warm-up batch - RSS after batch 1) / (B - 1),
             with the family's largest warm-up sizes (text: the longest sequence), so it is a per-item upper bound.
RSS is process-wide, so models are measured one at a time (loads run under the runner's control lock); a model
loaded while traffic runs can see other models' transient memory: the measurement is then conservative.

The budget: `runner.memory.budget_mb`, or derived from the machine at start: `fraction` x (memory available now +
what the process already holds), the cgroup v2 limit included when one is set. Each model reserves
resident + per_item x its batch cap; a model that does not fit even at batch 1 is refused (MemoryRefused, with the
numbers). At startup every model is first reserved at batch 1, then the rest of the budget is shared among them
(share_caps: everyone's configured max_batch_size when all fit, else the same share of each one's wish); a model
added later (admin API) gets the largest batch <= its max_batch_size that fits in what is free.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

MB = 2 ** 20


class MemoryRefused(RuntimeError):
    """A model that does not fit the runner's memory budget; the message carries the numbers."""


@dataclass(frozen=True)
class Footprint:
    """What one loaded model costs (MB)."""

    resident_mb: float
    per_item_mb: float
    measured_batch: int  # the warm-up batch the per-item figure comes from (1: no per-item measurement)

    def need(self, batch: int) -> float:
        return self.resident_mb + self.per_item_mb * max(batch, 1)


def rss_mb() -> float:
    """This process's resident set size (Linux /proc; 0 where unavailable)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / MB


def available_mb() -> float:
    """Memory this process could still get: MemAvailable, or less when a cgroup v2 limit is closer."""
    avail = float("inf")
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) / 1024
                break
    except OSError:
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
            avail = min(avail, (int(limit) - used) / MB)
    except (OSError, ValueError):
        pass
    return avail if avail != float("inf") else 0.0


def derived_budget_mb(fraction: float) -> float:
    """fraction x (available now + held now): the share of the machine this runner plans with."""
    return fraction * (available_mb() + rss_mb())


def share_caps(models: dict[str, tuple[Footprint, int]], free_mb: float) -> dict[str, int]:
    """Batch caps for models already reserved at batch 1, sharing `free_mb` among them: every model gets its
    configured max batch when all fit; otherwise each gets the same share of its wish (the memory of its extra items),
    so the first model loaded no longer takes what the last one needs. models: key -> (footprint, max_batch)."""
    wish = {k: fp.per_item_mb * (max(mb, 1) - 1) for k, (fp, mb) in models.items()}
    total = sum(wish.values())
    share = 1.0 if total <= max(free_mb, 0.0) else max(free_mb, 0.0) / total
    caps = {}
    for key, (fp, mb) in models.items():
        if fp.per_item_mb <= 0 or share >= 1.0:
            extra = mb - 1
        else:  # the tolerance keeps float rounding (254.99999 items) from costing an item
            extra = int(wish[key] * share / fp.per_item_mb + 1e-9)
        caps[key] = max(1, min(mb, 1 + extra))
    return caps


class MemoryBudget:
    """Reservations of the loaded models against one budget (thread-safe: loads and unloads come from the control
    API while batches run)."""

    def __init__(self, budget_mb: float):
        self.budget_mb = float(budget_mb)
        self.reserved: dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def used_mb(self) -> float:
        return sum(self.reserved.values())

    @property
    def free_mb(self) -> float:
        return self.budget_mb - self.used_mb

    def precheck(self, key: str, file_mb: float) -> None:
        """Before loading: the weights alone (a model's file) must fit in what is free."""
        with self._lock:
            free = self.budget_mb - sum(v for k, v in self.reserved.items() if k != key)
        if file_mb > free:
            raise MemoryRefused(f"{key}: its weights ({file_mb:.1f} MB) exceed the free memory budget "
                                f"({free:.1f} of {self.budget_mb:.1f} MB free)")

    def reserve(self, key: str, footprint: Footprint, max_batch: int, limit_mb: float | None = None) -> int:
        """Reserve resident + per_item x batch for the largest batch <= max_batch that fits; returns that batch cap.
        limit_mb: the model's deployment budget left for it (Deployment.memory_mb), when it has one. Raises
        MemoryRefused when not even one item fits."""
        with self._lock:
            free = self.budget_mb - sum(v for k, v in self.reserved.items() if k != key)
            where = (f"{free:.1f} of {self.budget_mb:.1f} MB free (reserved: "
                     f"{', '.join(f'{k} {v:.1f}' for k, v in sorted(self.reserved.items())) or 'none'})")
            if limit_mb is not None and limit_mb < free:
                free, where = limit_mb, f"{limit_mb:.1f} MB left of its deployment's memory_mb"
            cap = max_batch
            if footprint.per_item_mb > 0:
                cap = min(max_batch, int((free - footprint.resident_mb) // footprint.per_item_mb))
            if cap < 1 or footprint.need(1) > free:
                raise MemoryRefused(
                    f"{key}: needs {footprint.need(1):.1f} MB at batch 1 (resident {footprint.resident_mb:.1f} MB + "
                    f"{footprint.per_item_mb:.2f} MB per item), {where}")
            self.reserved[key] = footprint.need(cap)
            return cap

    def release(self, key: str) -> None:
        with self._lock:
            self.reserved.pop(key, None)

    def set_cap(self, key: str, footprint: Footprint, cap: int) -> None:
        """Re-reserve a loaded model at another batch cap (share_caps decided it fits)."""
        with self._lock:
            self.reserved[key] = footprint.need(cap)

    def describe(self) -> dict:
        with self._lock:
            reserved = dict(self.reserved)
        return {"budget_mb": round(self.budget_mb, 1), "reserved_mb": round(sum(reserved.values()), 1),
                "free_mb": round(self.budget_mb - sum(reserved.values()), 1), "process_rss_mb": round(rss_mb(), 1),
                "by_model": {k: round(v, 1) for k, v in sorted(reserved.items())}}
