"""runners/merge.CallMerger: calls that wait while a computation runs are computed together, per slot; results go
back to their callers in order; one slot's failure stays with its callers; a caller that left is skipped."""
from __future__ import annotations

import asyncio
import threading

import pytest

from runners.merge import CallMerger


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
    assert [len(c) for c in calls] == [1, 6, 1]  # a alone, then the three waiting a-calls together, then b
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
