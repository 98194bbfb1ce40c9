"""Bounded per-slot queues with wait estimation: reject at once instead of letting queues grow.

Per API worker: each slot counts the items it has in flight at the runner and keeps an EWMA of the runner's compute
time per item. A request is refused when the slot is full, or when (items ahead + its own) x time per item would
outlast its deadline: a fast 503 with Retry-After beats a slow 504.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from configs.settings import Admission
from services.common.deadlines import Deadline
from services.common.errors import ApiError


@dataclass
class SlotLoad:
    inflight_items: int = 0
    seconds_per_item: float = 0.0  # EWMA of runner compute time per item


class AdmissionControl:
    def __init__(self, cfg: Admission):
        self.cfg = cfg
        self.slots: dict[str, SlotLoad] = {}

    def load(self, slot: str) -> SlotLoad:
        return self.slots.setdefault(slot, SlotLoad())

    def estimated_wait(self, slot: str, items: int) -> float:
        s = self.load(slot)
        return (s.inflight_items + items) * s.seconds_per_item

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
            per_item = infer_ms / 1000 / batch
            a = self.cfg.latency_ewma_alpha
            s.seconds_per_item = per_item if s.seconds_per_item == 0 else (1 - a) * s.seconds_per_item + a * per_item
