"""Bounded per-slot queues with wait estimation: reject at once instead of letting queues grow.

Per API worker: each slot counts the items it has in flight at the runner and fits the runner's batch time as
fixed + per-item cost (least squares over recent batches: a = per-batch overhead, c = per-item cost). The wait for a
request is then  batches_ahead x a + items_ahead x c  with batches of the slot's max batch size. A request is refused
when the slot is full, or when that wait would outlast its deadline: a fast 503 with Retry-After beats a slow 504.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from configs.settings import Admission
from services.common.deadlines import Deadline
from services.common.errors import ApiError


@dataclass
class SlotLoad:
    inflight_items: int = 0
    batches: deque = field(default_factory=lambda: deque(maxlen=64))  # recent (batch size, seconds)
    per_batch: float = 0.0  # fitted fixed cost of one runner call
    per_item: float = 0.0  # fitted cost of each item in it

    def observe(self, size: int, seconds: float) -> None:
        self.batches.append((size, seconds))
        sizes = np.array([b for b, _ in self.batches], dtype=np.float64)
        times = np.array([t for _, t in self.batches], dtype=np.float64)
        if len(set(sizes.tolist())) < 2:  # one batch size seen so far: it is all per-batch cost as far as we know
            self.per_batch, self.per_item = float(times.mean()), 0.0
            return
        c, a = np.polyfit(sizes, times, 1)
        self.per_item, self.per_batch = max(float(c), 0.0), max(float(a), 0.0)

    @property
    def seconds_per_item(self) -> float:
        """Average cost per item at the recent batch sizes (for display)."""
        if not self.batches:
            return 0.0
        return float(np.mean([t / b for b, t in self.batches]))


class AdmissionControl:
    def __init__(self, cfg: Admission, max_batch: dict[str, int] | None = None):
        self.cfg = cfg
        self.max_batch = max_batch or {}
        self.slots: dict[str, SlotLoad] = {}

    def load(self, slot: str) -> SlotLoad:
        return self.slots.setdefault(slot, SlotLoad())

    def estimated_wait(self, slot: str, items: int) -> float:
        s = self.load(slot)
        queued = s.inflight_items + items
        batches = math.ceil(queued / max(self.max_batch.get(slot, 1), 1))
        return batches * s.per_batch + queued * s.per_item

    def overloaded(self, slot: str) -> bool:
        return self.load(slot).inflight_items >= self.cfg.overload_queue_items

    def admit(self, slot: str, items: int, deadline: Deadline) -> None:
        s = self.load(slot)
        if s.inflight_items + items > self.cfg.max_inflight_items:
            raise ApiError(503, "overloaded", f"{slot} queue is full", {"slot": slot, "queued": s.inflight_items,
                           "limit": self.cfg.max_inflight_items}, headers={"Retry-After": "1"})
        wait = self.estimated_wait(slot, items)
        if wait > deadline.remaining():
            raise ApiError(503, "deadline_unattainable", f"estimated wait {wait * 1000:.0f} ms exceeds the deadline",
                           {"slot": slot, "estimated_wait_ms": round(wait * 1000), "budget_ms": deadline.budget_ms},
                           headers={"Retry-After": str(max(1, math.ceil(wait)))})

    def started(self, slot: str, items: int) -> None:
        self.load(slot).inflight_items += items

    def finished(self, slot: str, items: int, infer_ms: float | None = None, batch: int | None = None) -> None:
        s = self.load(slot)
        s.inflight_items = max(0, s.inflight_items - items)
        if infer_ms is not None and batch:
            s.observe(batch, infer_ms / 1000)
