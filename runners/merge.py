"""Merging concurrent runner calls from different callers into one model call per slot ("batch while busy").

Why: with runner.batching='gateway' each API worker (and each gateway instance) coalesces only the requests it holds,
so with N workers every runner call carries about 1/N of what is in flight (docs/bench/scaleout_batching.md: a mean
batch of 12.3 items with one API worker, 4.5 with four). The runner sees every caller: calls that arrive while a
computation runs wait, and the next computation takes all of them at once, one model call per slot with every
caller's items (the runner then groups them per version and splits at the memory cap).

Batch while busy alone left the 4-worker batch at 0.71 of the 1-worker one (docs/bench/scaleout_batching_merge.md):
on a runner that is not saturated a call often finds it idle and starts alone, and the other workers' calls arrive
a few milliseconds later. So an idle runner gathers, but only under load, when several callers are active: when the
slot's calls came from more than one caller (items[0]["caller"], one per API worker) in the last second and the slot
is busy (it finished a computation less than one computation time ago, or its computations have been merging calls),
a call that finds the runner idle waits until as many calls of the slot are pending as there are active callers, or
until `gather_share` of the slot's recent computation time (at most `max_gather_s`, never past the earliest item
deadline less that computation time) has passed. One caller (one API worker) or a quiet slot never waits.

Calls of different slots are never merged into one computation: a failing model fails only its own callers. Which
slot computes next, when several have calls waiting, is decided by highest response ratio next (HRRN): (the oldest
call's wait + the slot's mean computation) / its mean computation. First-come order made a text call (~10 ms) wait
behind every image slot's computation queued before it (~0.1-1.6 s each): in the hour-long soak every deployment,
text included, had the image models' p99 (~550 ms), and in its 3x burst text waited ~5 s per call, up to its
deadline (docs/drills/soak.md). HRRN runs short computations first but ages long ones: a slot's ratio grows with
its wait, so no slot starves; each computation still takes every waiting call of its slot.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from triserve.kernel.runner_call.lanes import lane_of, least_per_item
from triserve.runners.metrics import GATHER_SECONDS, MERGED_CALLS

Compute = Callable[[list[dict]], list[dict]]
SMOOTHING = 0.2  # weight of the newest computation in the moving means
TOGETHER = 1.5  # a slot's callers arrive together when its computations merge at least this many calls on average
CALLER_MEMORY_S = 1.0  # a caller counts as active this long after its last call


@dataclass
class SlotPace:
    """What a slot's recent computations looked like: calls merged per computation and seconds per computation."""

    calls: float = 1.0
    compute_s: float = 0.0
    item_s: float = 0.0  # least seconds per item of its computations so far (0: never computed): its lane
    ended: float = float("-inf")  # monotonic end of the last computation

    def observe(self, calls: int, seconds: float, items: int = 1) -> None:
        self.calls += SMOOTHING * (calls - self.calls)
        self.compute_s = seconds if self.compute_s == 0 else self.compute_s + SMOOTHING * (seconds - self.compute_s)
        self.item_s = least_per_item(self.item_s, seconds, items)
        self.ended = time.monotonic()

    def busy(self) -> bool:
        """The slot computed a moment ago (idle for less than one computation): a loaded slot, not a quiet one."""
        return time.monotonic() - self.ended < self.compute_s


class CallMerger:
    """`await merger.submit(items)` -> one result per item, computed together with the calls of the same slot that
    were waiting at the same time. Computations run one at a time per lane, each lane on its own thread (ONNX
    Runtime releases the GIL; the event loop keeps accepting calls meanwhile). With `lanes=2`, slots whose items
    cost at most `short_item_s` each (or not measured yet) compute in lane 0, the others in lane 1: a short
    computation then never waits for a long one to finish, and at most two computations share the cores."""

    def __init__(self, compute: Compute, max_gather_s: float = 0.0, gather_share: float = 0.5, lanes: int = 1,
                 short_item_s: float = 0.01):
        self._compute = compute
        self._max_gather_s = max_gather_s
        self._gather_share = gather_share
        self._lanes = max(1, min(lanes, 2))
        self._short_item_s = short_item_s
        self._pending: list[tuple[list[dict], asyncio.Future]] = []
        self._arrivals: dict[int, float] = {}  # id(future) -> when its call arrived (monotonic): the wait HRRN ages
        self._draining: dict[int, asyncio.Task] = {}  # lane -> its drain task
        self._computing: set[str] = set()  # slots in a computation now: never two at once of one slot
        self._arrived: asyncio.Event | None = None
        self._pace: dict[str, SlotPace] = {}
        self._callers: dict[str, dict[str, float]] = {}  # slot -> caller -> when its last call came (monotonic)
        self._executors = [ThreadPoolExecutor(1, thread_name_prefix=f"triserve-compute-{lane}")
                           for lane in range(self._lanes)]

    async def submit(self, items: list[dict]) -> list[dict]:
        if not items:
            return []
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        self._pending.append((items, future))
        self._arrivals[id(future)] = time.monotonic()
        if items[0].get("caller"):
            self._callers.setdefault(str(items[0].get("slot")), {})[items[0]["caller"]] = time.monotonic()
        if self._arrived is not None:
            self._arrived.set()
        self._kick()
        return await future

    def _kick(self) -> None:
        """A drain task for every lane that has a call to compute and none running (a slot changes lanes as its
        measured cost does, so a computation's end may hand waiting calls to the other lane)."""
        loop = asyncio.get_running_loop()
        for lane in range(self._lanes):
            task = self._draining.get(lane)
            if (task is None or task.done()) and self._next_slot(lane) is not None:
                self._draining[lane] = loop.create_task(self._drain(lane))

    def pace(self, slot: str) -> SlotPace:
        return self._pace.setdefault(slot, SlotPace())

    def lane(self, slot: str) -> int:
        """0: short items (or not measured yet), 1: long ones (one lane: always 0)."""
        return lane_of(self.pace(slot).item_s, self._lanes, self._short_item_s)

    def _next_slot(self, lane: int = 0) -> str | None:
        """The slot of `lane` to compute next: highest response ratio (wait of its oldest call + its mean
        computation) / its mean computation; a slot never computed yet (mean 0) goes first. None: no live call of
        the lane waits (a slot in a computation is not chosen again until it ends)."""
        now = time.monotonic()
        oldest: dict[str, float] = {}
        for items, future in self._pending:
            if not future.done():
                slot = str(items[0].get("slot"))
                if slot in self._computing or self.lane(slot) != lane:
                    continue
                oldest[slot] = min(oldest.get(slot, now), self._arrivals.get(id(future), now))

        def ratio(slot: str) -> float:
            cost = self.pace(slot).compute_s
            return float("inf") if cost <= 0 else (now - oldest[slot] + cost) / cost

        return max(oldest, key=lambda slot: (ratio(slot), now - oldest[slot]), default=None)

    def _take(self, slot: str | None) -> list[tuple[list[dict], asyncio.Future]]:
        """Removes the waiting calls of `slot` (in arrival order) and every call nobody waits for any more."""
        group, kept = [], []
        for items, future in self._pending:
            if future.done():  # its caller went away (submit answers an empty call at once)
                self._arrivals.pop(id(future), None)
            elif str(items[0].get("slot")) == slot:
                group.append((items, future))
                self._arrivals.pop(id(future), None)
            else:
                kept.append((items, future))
        self._pending = kept
        return group

    def _gather_until(self, slot: str) -> tuple[str, int, float] | None:
        """(slot, calls to wait for, monotonic deadline) when the next computation should wait for more calls."""
        if self._max_gather_s <= 0:
            return None
        pace = self.pace(slot)
        want = self._active_callers(slot)
        if want <= 1 or not (pace.busy() or pace.calls >= TOGETHER):
            return None
        window = min(self._max_gather_s, self._gather_share * pace.compute_s)
        deadlines = [it["deadline"] for items, _ in self._pending for it in items if it.get("deadline")]
        if deadlines:  # items carry epoch deadlines; leave room for the computation itself
            window = min(window, min(deadlines) - time.time() - pace.compute_s)
        return (slot, want, time.monotonic() + window) if window > 0 else None

    def _active_callers(self, slot: str) -> int:
        """Callers (API workers, gateway instances: items[0]["caller"]) whose calls of this slot came lately."""
        seen = self._callers.get(slot, {})
        now = time.monotonic()
        for caller in [c for c, t in seen.items() if now - t > CALLER_MEMORY_S]:
            del seen[caller]
        return len(seen)

    def _pending_calls(self, slot: str) -> int:
        return sum(1 for items, future in self._pending if items and not future.done()
                   and str(items[0].get("slot")) == slot)

    async def _gather(self, slot: str) -> None:
        plan = self._gather_until(slot)
        if plan is None:
            return
        slot, want, until = plan
        started = time.monotonic()
        if self._arrived is None:
            self._arrived = asyncio.Event()
        while self._pending_calls(slot) < want and (left := until - time.monotonic()) > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except TimeoutError:
                break
        GATHER_SECONDS.labels(slot).observe(time.monotonic() - started)

    async def _drain(self, lane: int) -> None:
        loop = asyncio.get_running_loop()
        while (slot := self._next_slot(lane)) is not None:
            await self._gather(slot)
            group = self._take(slot)
            if not group:
                continue
            merged = [item for items, _ in group for item in items]
            MERGED_CALLS.labels(slot).observe(len(group))
            self._computing.add(slot)
            started = time.monotonic()
            try:
                results = await loop.run_in_executor(self._executors[lane], self._compute, merged)
            except Exception as exc:  # noqa: BLE001 - handed to this slot's callers, as one call would have
                for _, future in group:
                    if not future.done():
                        future.set_exception(exc)
                continue
            finally:
                self._computing.discard(slot)
                self.pace(slot).observe(len(group), time.monotonic() - started, len(merged))
                self._kick()
            start = 0
            for items, future in group:
                if not future.done():
                    future.set_result(results[start: start + len(items)])
                start += len(items)
        self._take(None)  # calls nobody waits for any more are not computed for
