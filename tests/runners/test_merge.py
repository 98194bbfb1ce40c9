"""runners/merge.CallMerger: calls that wait while a computation runs are computed together, per slot; results go
back to their callers in order; one slot's failure stays with its callers; a caller that left is skipped; the next
slot to compute is the one with the highest response ratio (short computations first, long waits aged)."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from triserve.runners.merge import CallMerger


def _items(slot: str, *values: int) -> list[dict]:
    return [{"slot": slot, "x": v} for v in values]


class SlowCompute:
    """Doubles every item; the first computation blocks until released, so the next calls pile up behind it."""

    def __init__(self, fail_slot: str | None = None):
        self.calls: list[list[dict]] = []
        self.release = threading.Event()
        self.fail_slot = fail_slot

    def __call__(self, items: list[dict]) -> list[dict]:
        if not self.calls:
            self.release.wait(5)
        self.calls.append(items)
        if items[0]["slot"] == self.fail_slot:
            raise RuntimeError("model failed")
        return [{"y": it["x"] * 2} for it in items]


def test_waiting_calls_of_a_slot_become_one_computation_and_answers_go_back_in_order():
    async def main():
        compute = SlowCompute()
        merger = CallMerger(compute)
        first = asyncio.create_task(merger.submit(_items("a", 1)))
        await asyncio.sleep(0.05)  # the first computation is running (blocked)
        waiting = [asyncio.create_task(merger.submit(_items("a", 10 * k, 10 * k + 1))) for k in range(1, 4)]
        other = asyncio.create_task(merger.submit(_items("b", 7)))
        await asyncio.sleep(0.05)
        compute.release.set()
        results = await asyncio.gather(first, *waiting, other)
        return compute.calls, results

    calls, results = asyncio.run(main())
    # a alone, then b (never computed: no cost known, so it goes first), then the three waiting a-calls together
    assert [len(c) for c in calls] == [1, 1, 6]
    assert results[1] == [{"y": 20}, {"y": 22}] and results[3] == [{"y": 60}, {"y": 62}] and results[4] == [{"y": 14}]


def test_one_slots_failure_stays_with_its_callers_and_a_departed_caller_is_skipped():
    async def main():
        compute = SlowCompute(fail_slot="bad")
        merger = CallMerger(compute)
        first = asyncio.create_task(merger.submit(_items("a", 1)))
        await asyncio.sleep(0.05)
        bad = asyncio.create_task(merger.submit(_items("bad", 1)))
        gone = asyncio.create_task(merger.submit(_items("a", 5)))
        good = asyncio.create_task(merger.submit(_items("a", 3)))
        await asyncio.sleep(0.05)
        gone.cancel()
        compute.release.set()
        await first
        with pytest.raises(RuntimeError, match="model failed"):
            await bad
        return compute.calls, await good

    calls, good = asyncio.run(main())
    assert good == [{"y": 6}]
    computed = [(c[0]["slot"], [it["x"] for it in c]) for c in calls]
    assert computed == [("a", [1]), ("bad", [1]), ("a", [3])]  # the cancelled call's item never computed


def _record(calls: list[list[int]]):
    def compute(items: list[dict]) -> list[dict]:
        calls.append([it["x"] for it in items])
        return [{"y": it["x"]} for it in items]
    return compute


def _call(merger: CallMerger, k: int, deadline: float | None = None):
    """Caller k's call (one API worker each) with one item."""
    return merger.submit([{"slot": "a", "x": k, "deadline": deadline, "caller": f"worker-{k}"}])


async def _staggered(merger: CallMerger, gaps_s: list[float], deadline: float | None = None) -> list:
    """Caller k's call `gaps_s[k]` seconds after caller k-1's (the way several API workers' calls arrive)."""
    tasks = []
    for k, gap in enumerate(gaps_s):
        await asyncio.sleep(gap)
        tasks.append(asyncio.create_task(_call(merger, k, deadline)))
    return await asyncio.gather(*tasks)


def test_a_busy_runner_gathers_the_calls_of_its_active_callers():
    async def main(max_gather_s: float):
        calls: list[list[int]] = []
        merger = CallMerger(_record(calls), max_gather_s=max_gather_s)
        await asyncio.gather(*[_call(merger, k) for k in range(3)])  # three callers seen, the slot just computed
        merger.pace("a").compute_s = 0.2  # a computation takes 0.2 s: the slot is busy, gathers up to 0.1 s
        calls.clear()
        await _staggered(merger, [0, 0.01, 0.01])
        return calls

    assert asyncio.run(main(0.1)) == [[0, 1, 2]]  # waited until the three callers were there
    assert len(asyncio.run(main(0.0))) >= 2  # gathering off: the first call leaves alone


def test_a_lone_caller_or_a_quiet_slot_never_waits():
    async def main(callers: int, busy: bool) -> float:
        merger = CallMerger(_record([]), max_gather_s=1.0)
        await asyncio.gather(*[_call(merger, k) for k in range(callers)])
        merger.pace("a").compute_s = 0.5
        if not busy:
            merger.pace("a").ended -= 10  # the last computation was long ago
        started = time.monotonic()
        await _call(merger, 0)
        return time.monotonic() - started

    assert asyncio.run(main(1, busy=True)) < 0.2  # one caller: nobody to wait for
    assert asyncio.run(main(3, busy=False)) < 0.2  # three callers, but the slot is quiet
    assert asyncio.run(main(3, busy=True)) >= 0.2  # the control: busy with three callers, it waits (up to 0.25 s)


def test_gathering_never_passes_an_items_deadline():
    async def main():
        calls: list[list[int]] = []
        merger = CallMerger(_record(calls), max_gather_s=1.0, gather_share=10.0)
        await asyncio.gather(*[_call(merger, k) for k in range(4)])
        merger.pace("a").compute_s = 0.2
        calls.clear()
        started = time.monotonic()
        await _staggered(merger, [0], deadline=time.time() + 0.25)  # 0.25 s left, 0.2 s of it for the computation
        return time.monotonic() - started, calls

    waited_s, calls = asyncio.run(main())
    assert calls == [[0]] and waited_s < 0.2  # would have waited up to 1 s (3 more callers active) without it


def _order_after_first(costs: dict[str, float], submit_order: list[str], blocked_s: float,
                       late: str | None = None) -> list[str]:
    """Slots in the order they computed after a first blocked computation, with `costs` as their mean computation
    seconds; the calls of `submit_order` arrive while it is blocked, `late` just before it is released."""
    async def main():
        compute = SlowCompute()
        merger = CallMerger(compute)
        for slot, cost in costs.items():
            merger.pace(slot).compute_s = cost
        first = asyncio.create_task(merger.submit(_items("first", 0)))
        await asyncio.sleep(0.02)
        tasks = [asyncio.create_task(merger.submit(_items(slot, 1))) for slot in submit_order]
        await asyncio.sleep(blocked_s)
        if late:
            tasks.append(asyncio.create_task(merger.submit(_items(late, 1))))
            await asyncio.sleep(0.01)
        compute.release.set()
        await asyncio.gather(first, *tasks)
        return [c[0]["slot"] for c in compute.calls[1:]]

    return asyncio.run(main())


def test_a_short_computation_goes_before_long_ones_that_arrived_first():
    # text (10 ms) arrived after two image slots (1 s each): first-come order would make it wait ~2 s
    assert _order_after_first({"det": 1.0, "pose": 1.0, "text": 0.01}, ["det", "pose", "text"], 0.05) \
        == ["text", "det", "pose"]


def test_a_long_computation_that_waited_goes_before_a_short_one_that_just_came():
    # det waited ~0.5 s for a 20 ms computation (ratio ~26); text came 10 ms before the release (ratio ~2)
    assert _order_after_first({"det": 0.02, "text": 0.01}, ["det"], 0.5, late="text") == ["det", "text"]


class GatedBySlot:
    """Doubles every item; computations of `gated` block until released. Records (slot, thread name) per call."""

    def __init__(self, gated: str):
        self.gated, self.release, self.calls = gated, threading.Event(), []

    def __call__(self, items: list[dict]) -> list[dict]:
        self.calls.append((items[0]["slot"], threading.current_thread().name))
        if items[0]["slot"] == self.gated:
            self.release.wait(5)
        return [{"y": it["x"] * 2} for it in items]


def test_with_two_lanes_a_short_slot_computes_while_a_long_one_is_busy():
    async def main(lanes: int):
        compute = GatedBySlot("det")
        merger = CallMerger(compute, lanes=lanes, short_item_s=0.01)
        merger.pace("det").item_s, merger.pace("text").item_s = 0.09, 0.002  # measured per item
        det = asyncio.create_task(merger.submit(_items("det", 1)))
        await asyncio.sleep(0.02)
        text = asyncio.create_task(merger.submit(_items("text", 2)))
        done, _ = await asyncio.wait({text}, timeout=0.5)
        answered_while_det_computes = text in done
        compute.release.set()
        await asyncio.gather(det, text)
        return answered_while_det_computes, compute.calls

    answered, calls = asyncio.run(main(lanes=2))
    assert answered and calls == [("det", "triserve-compute-1_0"), ("text", "triserve-compute-0_0")]
    answered, calls = asyncio.run(main(lanes=1))  # one lane: text waits for det's computation to end
    assert not answered and [slot for slot, _ in calls] == ["det", "text"]


def test_a_slot_takes_the_lane_its_measured_cost_per_item_gives():
    merger = CallMerger(SlowCompute(), lanes=2, short_item_s=0.01)
    assert merger.lane("new") == 0  # not measured yet: short until its first computation says otherwise
    merger.pace("text").observe(1, 0.03, items=8)  # 3.75 ms per item
    merger.pace("det").observe(1, 0.4, items=4)  # 100 ms per item
    assert (merger.lane("text"), merger.lane("det")) == (0, 1)
    merger.pace("text").observe(1, 0.06, items=2)  # 30 ms per item: slowed by the other lane, not its own cost
    assert merger.lane("text") == 0 and merger.pace("text").item_s == pytest.approx(0.03 / 8)
    assert CallMerger(SlowCompute(), lanes=1).lane("det") == 0


def test_an_empty_call_is_answered_at_once():
    assert asyncio.run(CallMerger(SlowCompute(), lanes=2).submit([])) == []
