"""Bounded per-slot queues with wait estimation: reject at once instead of letting queues grow.

Per API worker: each slot counts the items it has in flight at the runner and fits the runner's batch time as
fixed + per-item cost (least squares over recent batches: a = per-batch overhead, c = per-item cost). The wait for a
request is then  batches_ahead x a + items_ahead x c  with batches of the slot's max batch size, plus what the other
slots of its runner compute lane have in flight (the runner computes one call per lane at a time: `lane_backlog`). A
request is refused when the slot is full, or when that wait would outlast its deadline: a fast 503 with Retry-After
beats a slow 504.
Under overload, the slot's standing-queue control (kernel/protection/queue_control.py, fed by the gateway batcher)
refuses what the next runner call cannot carry, so accepted requests keep the latency of a service at capacity.
"""
from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from triserve.configs.settings import Admission
from triserve.kernel.errors import ApiError
from triserve.kernel.protection import queue_control
from triserve.kernel.protection.deadlines import Deadline
from triserve.kernel.protection.queue_control import StandingQueue
from triserve.kernel.runner_call.lanes import lane_of, least_per_item


@dataclass
class SlotLoad:
    inflight_items: int = 0
    batches: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=64))  # recent (size, seconds)
    per_batch: float = 0.0  # fitted fixed cost of one runner call
    per_item: float = 0.0  # fitted cost of each item in it
    least_item_s: float = 0.0  # least seconds per item of its calls so far (0: none yet): its runner compute lane
    _sums: list[float] = field(default_factory=lambda: [0.0] * 5)  # n, sum x, sum y, sum xx, sum xy over `batches`

    def observe(self, size: int, seconds: float) -> None:
        """O(1) per call (it runs once per request): running sums over the window, closed-form least squares."""
        self.least_item_s = least_per_item(self.least_item_s, seconds, size)
        if len(self.batches) == self.batches.maxlen:
            self._add(*self.batches[0], sign=-1.0)
        self.batches.append((size, seconds))
        self._add(size, seconds, sign=1.0)
        n, sx, sy, sxx, sxy = self._sums
        var = n * sxx - sx * sx
        if var <= 1e-9 * max(n * sxx, 1.0):  # one batch size seen so far: all per-batch cost as far as we know
            self.per_batch, self.per_item = sy / n, 0.0
            return
        c = (n * sxy - sx * sy) / var
        a = (sy - c * sx) / n
        self.per_item, self.per_batch = max(c, 0.0), max(a, 0.0)

    def _add(self, x: float, y: float, sign: float) -> None:
        s = self._sums
        s[0] += sign
        s[1] += sign * x
        s[2] += sign * y
        s[3] += sign * x * x
        s[4] += sign * x * y

    @property
    def seconds_per_item(self) -> float:
        """Average cost per item at the recent batch sizes (for display)."""
        if not self.batches:
            return 0.0
        return float(np.mean([t / b for b, t in self.batches]))


class AdmissionControl:
    def __init__(self, cfg: Admission, max_batch: Callable[[str], int] = lambda slot: 1,
                 queues: Callable[[str], StandingQueue | None] = queue_control.lookup,
                 clock: Callable[[], float] = time.monotonic, lanes: int = 1, short_item_s: float = 0.01,
                 shares_runner: Callable[[str], bool] = lambda slot: True):
        """`max_batch(slot)`: the slot's batch limit, looked up per call (deployments come and go at run time);
        `queues(slot)`: the slot's gateway batcher queue view (None: no gateway batcher, no standing-queue control);
        `clock`: monotonic seconds (tests pass a fake one); `lanes`, `short_item_s`: the runner's compute lanes
        (runner.compute_lanes, runner.short_item_ms: runners/merge.py); `shares_runner(slot)`: whether the slot
        computes on the shared runner (False: a fallback hosted in this API worker)."""
        self.cfg = cfg
        self.max_batch = max_batch
        self.queues = queues
        self.clock = clock
        self.lanes = lanes
        self.short_item_s = short_item_s
        self.shares_runner = shares_runner
        self.slots: dict[str, SlotLoad] = {}

    def load(self, slot: str) -> SlotLoad:
        return self.slots.setdefault(slot, SlotLoad())

    def estimated_wait(self, slot: str, items: int) -> float:
        s = self.load(slot)
        queued = s.inflight_items + items
        batches = math.ceil(queued / max(self.max_batch(slot), 1))
        return batches * s.per_batch + queued * s.per_item

    def lane(self, slot: str) -> int:
        """The runner's compute lane the slot computes in, by runners/merge.py's rule (kernel/runner_call/lanes.py)."""
        return lane_of(self.load(slot).least_item_s, self.lanes, self.short_item_s)

    def lane_backlog(self, slot: str, items: int) -> float:
        """Seconds of computation ahead of a request of `items` items joining `slot` now: its own estimated wait plus
        what the other slots of its runner compute lane have in flight from this API worker. The runner computes one
        call per lane at a time, so that work is ahead of it too, however short the slot's own queue is: at a 3x
        burst's start every slot admitted its own round of calls, and the lane then needed more than the deadline
        to compute them all (504s after 10 s; docs/bench/runner_order.md)."""
        own = self.estimated_wait(slot, items)
        if not self.shares_runner(slot):
            return own
        lane = self.lane(slot)
        return own + sum(self.estimated_wait(other, 0) for other, load in self.slots.items()
                         if other != slot and load.inflight_items and self.shares_runner(other)
                         and self.lane(other) == lane)

    def overloaded(self, slot: str) -> bool:
        return self.load(slot).inflight_items >= self.cfg.overload_queue_items

    def admit(self, slot: str, items: int, deadline: Deadline) -> None:
        s = self.load(slot)
        if s.inflight_items + items > self.cfg.max_inflight_items:
            raise ApiError(503, "overloaded", f"{slot} queue is full", {"slot": slot, "queued": s.inflight_items,
                           "limit": self.cfg.max_inflight_items}, headers={"Retry-After": "1"})
        queue = self.queues(slot) if self.cfg.queue_control else None
        if queue is not None:
            self._standing_queue(queue, slot, items)  # before the deadline: a standing queue is overload
        wait = self.lane_backlog(slot, items)
        if queue is not None:  # measured wall-clock call times see what the compute fit cannot (hop, other slots)
            wait = max(wait, queue.predicted_answer_s(self.clock(), items))
        if wait > deadline.remaining():
            raise ApiError(503, "deadline_unattainable", f"estimated wait {wait * 1000:.0f} ms exceeds the deadline",
                           {"slot": slot, "estimated_wait_ms": round(wait * 1000), "budget_ms": deadline.budget_ms},
                           headers={"Retry-After": str(max(1, math.ceil(wait)))})

    def _standing_queue(self, queue: StandingQueue, slot: str, items: int) -> None:
        """Overload: refuse what the next runner call(s) cannot carry (queue_control.py). Code 'overloaded', so that
        'auto' requests spill to the fallback as with a full queue; details.reason tells the two apart."""
        cfg = self.cfg
        if queue.admit(self.clock(), items, cfg.queue_interval_ms / 1000, cfg.queue_calls, cfg.queue_front_door):
            return
        raise ApiError(503, "overloaded", f"{slot} is over capacity: the request would wait for more than "
                       f"{cfg.queue_calls:g} runner call(s)", {"slot": slot, "reason": "standing_queue",
                                                               "queued": queue.waiting,
                                                               "limit": queue.limit(cfg.queue_calls)},
                       headers={"Retry-After": "1"})

    def started(self, slot: str, items: int) -> None:
        self.load(slot).inflight_items += items

    def finished(self, slot: str, items: int, infer_ms: float | None = None, batch: int | None = None) -> None:
        s = self.load(slot)
        s.inflight_items = max(0, s.inflight_items - items)
        if infer_ms is not None and batch:
            s.observe(batch, infer_ms / 1000)
