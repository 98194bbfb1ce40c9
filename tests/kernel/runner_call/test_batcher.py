"""Gateway-side batching: lone requests go at once, concurrent ones coalesce, results return to their owners."""
from __future__ import annotations

import asyncio

import pytest

from triserve.kernel.runner_call.batcher import Approaching, SlotBatcher, approaching


class FakeRunner:
    """Answers each item with its own value after `delay`; records the calls it saw."""

    def __init__(self, delay: float = 0.02, fail: bool = False):
        self.delay, self.fail = delay, fail
        self.calls: list[list[int]] = []

    async def send(self, items: list[dict]) -> list[dict]:
        self.calls.append([it["x"] for it in items])
        await asyncio.sleep(self.delay)
        if self.fail:
            raise RuntimeError("runner down")
        return [{"y": it["x"] * 10} for it in items]


def _items(*xs: int) -> list[dict]:
    return [{"x": x} for x in xs]


def test_lone_request_is_sent_immediately():
    async def main():
        runner = FakeRunner(delay=0.0)
        b = SlotBatcher("text", runner.send, max_batch_size=8, max_inflight=1)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        out = await b.submit(_items(1, 2))
        return out, runner.calls, loop.time() - t0

    out, calls, elapsed = asyncio.run(main())
    assert out == [{"y": 10}, {"y": 20}]
    assert calls == [[1, 2]]
    assert elapsed < 0.5  # no batching window: nothing waits for company


def test_requests_arriving_while_busy_share_the_next_call_and_get_their_own_rows():
    async def main():
        runner = FakeRunner(delay=0.05)
        b = SlotBatcher("text", runner.send, max_batch_size=64, max_inflight=1)
        first = asyncio.create_task(b.submit(_items(0)))
        await asyncio.sleep(0.01)  # the first call is in flight now
        rest = [asyncio.create_task(b.submit(_items(i, i + 100))) for i in range(1, 6)]
        return await first, await asyncio.gather(*rest), runner.calls

    first, rest, calls = asyncio.run(main())
    assert first == [{"y": 0}]
    assert rest == [[{"y": i * 10}, {"y": (i + 100) * 10}] for i in range(1, 6)]
    assert calls == [[0], [1, 101, 2, 102, 3, 103, 4, 104, 5, 105]]


def _waiting_batcher(runner: FakeRunner, wait_s: float, max_batch_size: int = 64) -> tuple[SlotBatcher, Approaching]:
    coming = Approaching()
    return SlotBatcher("text", runner.send, max_batch_size, 1, coming, wait_s), coming


def test_lone_request_with_nobody_on_the_way_leaves_at_once_even_with_a_wait_configured():
    async def main():
        runner = FakeRunner(delay=0.0)
        b, coming = _waiting_batcher(runner, wait_s=5.0)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        out = await b.submit(_items(1), coming.enter())  # the request itself was the only one approaching
        return out, runner.calls, loop.time() - t0, coming.count

    out, calls, elapsed, left = asyncio.run(main())
    assert out == [{"y": 10}] and calls == [[1]]
    assert elapsed < 1.0  # far below the 5 s cap: concurrency 1 never waits
    assert left == 0


def test_an_idle_slot_waits_for_a_request_already_on_its_way_and_sends_both_in_one_call():
    async def main():
        runner = FakeRunner(delay=0.0)
        b, coming = _waiting_batcher(runner, wait_s=5.0)
        first_token, second_token = coming.enter(), coming.enter()
        first = asyncio.create_task(b.submit(_items(1), first_token))
        await asyncio.sleep(0.05)
        sent_before_second = list(runner.calls)
        second = asyncio.create_task(b.submit(_items(2), second_token))
        return await first, await second, sent_before_second, runner.calls

    first, second, before, calls = asyncio.run(main())
    assert before == []  # held: another request was still being preprocessed
    assert calls == [[1, 2]]
    assert first == [{"y": 10}] and second == [{"y": 20}]


def test_the_wait_is_bounded_when_the_request_on_its_way_never_submits():
    async def main():
        runner = FakeRunner(delay=0.0)
        b, coming = _waiting_batcher(runner, wait_s=0.05)
        coming.enter()  # admitted, then stuck (never arrives, never leaves)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        out = await b.submit(_items(1), coming.enter())
        return out, loop.time() - t0

    out, elapsed = asyncio.run(main())
    assert out == [{"y": 10}]
    assert 0.04 <= elapsed < 1.0


def test_a_request_that_ends_without_submitting_releases_the_waiting_batch_at_once():
    async def main():
        runner = FakeRunner(delay=0.0)
        b, coming = _waiting_batcher(runner, wait_s=5.0)
        rejected = coming.enter()  # e.g. a 422 after validation: its middleware calls the token on the way out
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        task = asyncio.create_task(b.submit(_items(1), coming.enter()))
        await asyncio.sleep(0.05)
        held = runner.calls == []
        rejected()
        rejected()  # idempotent: the count never goes below the requests really on their way
        out = await task
        return held, out, loop.time() - t0, coming.count

    held, out, elapsed, left = asyncio.run(main())
    assert held and out == [{"y": 10}]
    assert elapsed < 1.0
    assert left == 0


def test_a_full_batch_does_not_wait_for_more():
    async def main():
        runner = FakeRunner(delay=0.0)
        b, coming = _waiting_batcher(runner, wait_s=5.0, max_batch_size=2)
        coming.enter()  # someone else on the way, but the batch is already full
        out = await asyncio.wait_for(b.submit(_items(1, 2), coming.enter()), timeout=1.0)
        return out, runner.calls

    out, calls = asyncio.run(main())
    assert out == [{"y": 10}, {"y": 20}] and calls == [[1, 2]]


def test_batches_respect_max_batch_size_without_splitting_a_request():
    async def main():
        runner = FakeRunner(delay=0.03)
        b = SlotBatcher("text", runner.send, max_batch_size=4, max_inflight=1)
        blocker = asyncio.create_task(b.submit(_items(0)))
        await asyncio.sleep(0.005)
        tasks = [asyncio.create_task(b.submit(_items(*range(10 * i, 10 * i + 3)))) for i in range(1, 4)]
        big = asyncio.create_task(b.submit(_items(*range(100, 106))))  # larger than the cap: goes alone
        await asyncio.gather(blocker, big, *tasks)
        return runner.calls

    calls = asyncio.run(main())
    assert calls[0] == [0]
    assert all(len(c) <= 4 or len(c) == 6 for c in calls)
    assert [100, 101, 102, 103, 104, 105] in calls
    assert sorted(x for c in calls for x in c) == sorted([0, *range(10, 13), *range(20, 23), *range(30, 33),
                                                          *range(100, 106)])


def test_inflight_limit_bounds_concurrent_calls():
    async def main():
        runner = FakeRunner(delay=0.02)
        b = SlotBatcher("text", runner.send, max_batch_size=1, max_inflight=2)
        peak = 0

        async def watch():
            nonlocal peak
            while True:
                peak = max(peak, b.inflight)
                await asyncio.sleep(0.001)

        w = asyncio.create_task(watch())
        await asyncio.gather(*(b.submit(_items(i)) for i in range(8)))
        w.cancel()
        return peak, len(runner.calls)

    peak, n_calls = asyncio.run(main())
    assert peak == 2
    assert n_calls == 8


def test_a_request_cancelled_before_its_batch_left_is_never_sent():
    async def main():
        runner = FakeRunner(delay=0.05)
        b = SlotBatcher("text", runner.send, max_batch_size=8, max_inflight=1)
        first = asyncio.create_task(b.submit(_items(1)))
        await asyncio.sleep(0.01)
        doomed = asyncio.create_task(b.submit(_items(2)))
        kept = asyncio.create_task(b.submit(_items(3)))
        await asyncio.sleep(0.005)
        doomed.cancel()
        await first
        return await kept, runner.calls

    kept, calls = asyncio.run(main())
    assert kept == [{"y": 30}]
    assert calls == [[1], [3]]


def test_a_failed_call_fails_every_request_of_its_batch_and_the_batcher_recovers():
    async def main():
        runner = FakeRunner(delay=0.01, fail=True)
        b = SlotBatcher("text", runner.send, max_batch_size=8, max_inflight=1)
        results = await asyncio.gather(*(b.submit(_items(i)) for i in range(3)), return_exceptions=True)
        runner.fail = False
        after = await b.submit(_items(7))
        return results, after, b.inflight, b.queued_items

    results, after, inflight, queued = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) for r in results)
    assert after == [{"y": 70}]
    assert (inflight, queued) == (0, 0)


@pytest.mark.parametrize("mode,batchers", [("gateway", True), ("runner", False)])
def test_runner_client_uses_batchers_only_in_gateway_mode(mode, batchers, monkeypatch):
    from triserve.configs.settings import Settings
    from triserve.kernel.runner_call.runner_client import RunnerClient

    monkeypatch.setenv("TRISERVE_RUNNER__BATCHING", mode)
    sizes = {"intent": 64, "intent_fallback": 8, "coco": 16}
    client = RunnerClient(runner=None, settings=Settings(), max_batch=sizes.__getitem__,
                          family_of=lambda slot: "detection" if slot == "coco" else "text")
    batcher = client.batcher("intent")
    assert (batcher is not None) is batchers
    if batchers:  # made on first use, per slot, with that slot's limit and its family's approaching count
        assert batcher.max_batch_size == 64 and client.batcher("intent") is batcher
        assert client.batcher("intent_fallback").max_batch_size == 8
        assert client.batcher("coco").max_batch_size == 16
        assert batcher.coming is approaching("text") and client.batcher("coco").coming is approaching("detection")


def test_a_batcher_that_is_gone_stops_listening():
    import gc

    coming = Approaching()
    b = SlotBatcher("text", FakeRunner().send, 8, 1, coming, 0.01)
    assert len(coming._listeners) == 1
    del b
    gc.collect()
    coming.enter()()  # the count falls to zero: nobody is called, nothing raises
    alive = SlotBatcher("text", FakeRunner().send, 8, 1, coming, 0.01)  # registering prunes the dead reference
    assert [ref() for ref in coming._listeners] == [alive._pump]
