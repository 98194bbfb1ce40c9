"""Standing-queue control (kernel/protection/queue_control.py): deterministic, on a fake clock; the batcher feeding it;
admission refusing with it; and one check through a real server."""
from __future__ import annotations

import asyncio

import pytest

from triserve.configs.settings import Admission
from triserve.kernel.errors import ApiError
from triserve.kernel.protection import queue_control
from triserve.kernel.protection.admission import AdmissionControl
from triserve.kernel.protection.deadlines import Deadline
from triserve.kernel.protection.queue_control import CALL_WINDOW, StandingQueue
from triserve.kernel.runner_call.batcher import SlotBatcher, approaching

INTERVAL = 0.1


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch):
    """Each test sees only the queues it registers (the registry is per process)."""
    monkeypatch.setattr(queue_control, "_QUEUES", {})


def _queue(round_items: int = 8, waiting: int = 0) -> StandingQueue:
    q = StandingQueue("text", "text", round_items)
    q.waiting = waiting
    return q


def test_what_fits_in_the_next_call_always_joins():
    q = _queue(8, waiting=5)
    assert q.admit(0.0, 3, INTERVAL, 1.0)  # 5 + 3 <= 8
    q.standing_since = -10.0  # even with a long-standing queue
    assert q.admit(0.0, 3, INTERVAL, 1.0)
    assert q.refused == 0


def test_a_burst_beyond_the_next_call_is_tolerated_for_one_interval_then_refused():
    q = _queue(8, waiting=8)
    assert q.admit(0.00, 1, INTERVAL, 1.0)  # the queue starts standing now: a burst so far
    assert q.standing_since == 0.0
    assert q.admit(0.05, 1, INTERVAL, 1.0)
    assert not q.admit(0.10, 1, INTERVAL, 1.0)  # stood for an interval: overload
    assert q.refused == 1


def test_an_empty_queue_admits_a_request_larger_than_a_batch():
    q = _queue(8, waiting=0)
    q.standing_since, q.controlled_until = -1.0, 10.0
    assert q.admit(0.0, 20, INTERVAL, 1.0)


def test_a_departure_that_takes_everything_ends_the_standing_queue():
    q = _queue(8)
    q.departed(0.0, left_behind=3)
    q.departed(0.05, left_behind=2)
    assert q.standing_since == 0.0  # still standing since the first call that left requests behind
    q.departed(0.08, left_behind=0)
    assert q.standing_since is None
    q.waiting = 8
    assert q.admit(0.2, 1, INTERVAL, 1.0)  # a new burst, not the old standing queue


def test_calls_left_behind_for_an_interval_switch_control_on():
    q = _queue(8, waiting=9)
    q.departed(0.0, left_behind=9)
    assert q.admit(0.05, 1, INTERVAL, 1.0)  # burst: admitted although over the limit
    assert not q.admit(0.11, 1, INTERVAL, 1.0)


def test_control_stays_on_while_it_refuses_and_ends_an_interval_after_the_last_refusal():
    q = _queue(8, waiting=9)
    q.departed(0.0, left_behind=9)
    assert not q.admit(0.2, 1, INTERVAL, 1.0)
    q.departed(0.25, left_behind=0)  # the call took everything: no standing queue any more
    q.waiting = 8
    assert not q.admit(0.28, 1, INTERVAL, 1.0)  # still on: refused 0.08 s ago
    assert not q.admit(0.37, 1, INTERVAL, 1.0)  # each refusal extends control
    q.departed(0.40, left_behind=0)
    assert q.controlled(0.46, INTERVAL)
    assert not q.controlled(0.48, INTERVAL)  # an interval after the last refusal
    assert q.admit(0.48, 1, INTERVAL, 1.0)  # over the limit again: a burst again, not refused


@pytest.mark.parametrize("calls,limit", [(1.0, 16), (0.5, 8), (2.0, 32), (0.01, 1)])
def test_the_limit_is_rounds_of_calls(calls, limit):
    q = _queue(16)
    assert q.limit(calls) == limit


def test_zero_interval_refuses_as_soon_as_the_queue_stands():
    q = _queue(4, waiting=4)
    assert not q.admit(1.0, 1, 0.0, 1.0)


def test_a_slot_without_a_batcher_view_is_never_refused():
    q = StandingQueue("text")  # round_items 0: no batcher
    q.waiting, q.standing_since = 100, -5.0
    assert q.admit(0.0, 4, INTERVAL, 1.0)
    assert not q.full(0.0)


def test_a_familys_slots_share_one_budget():
    primary = queue_control.register("intent", 8, "text")
    fallback = queue_control.register("intent_fallback", 8, "text")
    other = queue_control.register("coco", 8, "detection")
    primary.waiting, other.waiting = 6, 8
    assert fallback.ahead() == 6 and primary.ahead() == 6 and other.ahead() == 8
    fallback.standing_since = -1.0  # control on whenever something does not fit
    assert fallback.admit(0.0, 2, INTERVAL, 1.0)  # 6 + 2 fit the family's round
    assert not fallback.admit(0.0, 3, INTERVAL, 1.0)  # the primary's queue leaves no room for the spill
    assert StandingQueue("text", "", 8, waiting=6).ahead() == 6  # no family known: its own queue only


def test_full_and_shedding_per_task():
    primary = queue_control.register("intent", 8, "text")
    fallback = queue_control.register("intent_fallback", 8, "text")
    queue_control.register("coco", 4, "detection")
    assert not queue_control.shedding("text", 0.0)
    primary.waiting = 9
    for q in (primary, fallback):
        q.departed(0.0, left_behind=1)
        assert not q.full(0.2)  # standing, but control has not acted yet
        assert not q.admit(0.2, 1, INTERVAL, 1.0)
    assert primary.full(0.2) and fallback.full(0.2)
    assert queue_control.shedding("text", 0.25)  # every slot of the task is full: refuse before the body
    assert not queue_control.shedding("detection", 0.25)
    assert not queue_control.shedding("forecast", 0.25)  # no slot known: never
    primary.waiting = 6  # a call left: a typical (1-item) request fits again
    assert not queue_control.shedding("text", 0.26)
    primary.waiting = 8
    assert queue_control.shedding("text", 0.28)
    assert not queue_control.shedding("text", 0.5)  # control ended an interval after the last refusals
    primary.admit(0.3, 4, INTERVAL, 1.0, front_door=False)
    assert not queue_control.shedding("text", 0.31)  # admission.queue_front_door off


def test_full_means_a_typical_request_would_not_fit():
    q = _queue(16, waiting=17)
    q.standing_since = 0.0
    for _ in range(30):
        assert not q.admit(1.0, 4, INTERVAL, 1.0)  # requests of 4 items lately
    q.waiting = 12
    assert not q.full(1.0)  # 12 + 4 fits
    q.waiting = 13
    assert q.full(1.0)


# -- admission ------------------------------------------------------------------------------------------------------

class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _admission(queue: StandingQueue | None, **cfg) -> tuple[AdmissionControl, FakeClock]:
    clock = FakeClock()
    ac = AdmissionControl(Admission(**{"queue_control": True, **cfg}), {"text": 8}.__getitem__,
                          queues=lambda slot: queue, clock=clock)
    return ac, clock


def test_admission_refuses_the_standing_queue_with_overloaded_and_retry_after():
    queue = _queue(8, waiting=8)
    ac, clock = _admission(queue)
    queue.departed(clock.now, left_behind=8)
    ac.admit("text", 1, Deadline.from_budget(10_000))  # a burst for now
    clock.now += 0.15
    with pytest.raises(ApiError) as e:
        ac.admit("text", 1, Deadline.from_budget(10_000))
    err = e.value
    assert (err.status, err.code, err.headers["Retry-After"]) == (503, "overloaded", "1")
    assert err.details == {"slot": "text", "reason": "standing_queue", "queued": 8, "limit": 8}
    queue.waiting = 4
    ac.admit("text", 4, Deadline.from_budget(10_000))  # fits in the next call


def test_admission_without_queue_control_or_without_a_batcher_never_refuses_for_the_queue():
    queue = _queue(8, waiting=50)
    queue.standing_since = 0.0
    off, _ = _admission(queue, queue_control=False)
    off.admit("text", 1, Deadline.from_budget(10_000))
    none, _ = _admission(None)
    none.admit("text", 1, Deadline.from_budget(10_000))


def test_the_item_cap_answers_first_then_the_standing_queue_then_the_deadline():
    queue = _queue(8, waiting=8)
    queue.standing_since = 0.0
    ac, _ = _admission(queue, max_inflight_items=4)
    ac.started("text", 4)
    with pytest.raises(ApiError) as e:
        ac.admit("text", 1, Deadline.from_budget(10_000))
    assert e.value.details["limit"] == 4 and "reason" not in e.value.details  # the full-queue refusal, as before
    ac.finished("text", 4, infer_ms=1000.0, batch=1)
    ac.started("text", 3)
    with pytest.raises(ApiError) as e:
        ac.admit("text", 1, Deadline.from_budget(100))
    assert e.value.details["reason"] == "standing_queue"  # overload is said as such, whatever the deadline
    queue.waiting = 0
    with pytest.raises(ApiError) as e:
        ac.admit("text", 1, Deadline.from_budget(100))
    assert e.value.code == "deadline_unattainable"


def test_the_deadline_check_also_uses_measured_call_times():
    queue = _queue(8)
    ac, clock = _admission(queue)
    queue.call_began(clock.now)
    queue.call_ended(clock.now, clock.now + 0.6)  # the runner's wall time, whatever the compute fit says
    clock.now += 1.0
    ac.admit("text", 1, Deadline.from_budget(1000))
    with pytest.raises(ApiError) as e:
        ac.admit("text", 1, Deadline.from_budget(500))
    assert e.value.code == "deadline_unattainable" and e.value.details["estimated_wait_ms"] == 600
    off, _ = _admission(queue, queue_control=False)
    off.admit("text", 1, Deadline.from_budget(500))  # without queue control: the compute fit only, as before


def test_a_call_is_predicted_to_take_as_long_as_the_longest_of_the_last_ones():
    queue = _queue(8)
    ac, clock = _admission(queue)
    for seconds in (0.2, 0.2, 0.9, 0.2, 0.2):  # one call waited behind another slot's computation at the runner
        queue.call_began(clock.now)
        queue.call_ended(clock.now, clock.now + seconds)
    clock.now += 1.0
    assert queue.predicted_answer_s(clock.now, 1) == pytest.approx(0.9)  # the average (~0.4) would admit below
    with pytest.raises(ApiError) as e:
        ac.admit("text", 1, Deadline.from_budget(800))
    assert e.value.code == "deadline_unattainable" and e.value.details["estimated_wait_ms"] == 900
    for _ in range(CALL_WINDOW):  # the slow call leaves the window: short calls predict short calls again
        queue.call_began(clock.now)
        queue.call_ended(clock.now, clock.now + 0.2)
    ac.admit("text", 1, Deadline.from_budget(800))


# -- the batcher feeding it ----------------------------------------------------------------------------------------

class GatedRunner:
    """Holds every call until released; records the items of each call."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.gates: list[asyncio.Event] = []

    async def send(self, items: list[dict]) -> list[dict]:
        self.calls.append([it["x"] for it in items])
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        return [{"y": it["x"]} for it in items]


def test_the_batcher_keeps_waiting_items_and_reports_what_each_call_leaves_behind():
    async def main():
        runner = GatedRunner()
        b = SlotBatcher("qc-text", runner.send, max_batch_size=4, max_inflight=1)
        assert queue_control.lookup("qc-text") is b.queue and b.queue.round_items == 4
        first = asyncio.create_task(b.submit([{"x": 0}]))
        await asyncio.sleep(0)
        assert b.queue.waiting == 0 and b.queue.standing_since is None  # left at once, nothing behind
        rest = [asyncio.create_task(b.submit([{"x": i}, {"x": i + 10}])) for i in range(1, 4)]
        await asyncio.sleep(0)
        assert b.queue.waiting == 6 and b.queued_items == 6
        runner.gates[0].set()
        await first
        await asyncio.sleep(0)
        assert runner.calls[1] == [1, 11, 2, 12]  # the next call takes 4 items; one request stays behind
        assert b.queue.waiting == 2 and b.queue.standing_since is not None
        runner.gates[1].set()
        await asyncio.sleep(0.01)
        assert runner.calls[2] == [3, 13] and b.queue.waiting == 0 and b.queue.standing_since is None
        assert len(b.queue.starts) == 1 and b.queue.call_s > 0  # two calls measured, one in flight
        runner.gates[2].set()
        await asyncio.gather(*rest)
        await asyncio.sleep(0)
        assert b.queue.starts == []

    asyncio.run(main())


def test_requests_cancelled_while_queued_stop_counting_when_their_turn_comes():
    async def main():
        runner = GatedRunner()
        b = SlotBatcher("qc-cancel", runner.send, max_batch_size=8, max_inflight=1)
        first = asyncio.create_task(b.submit([{"x": 0}]))
        await asyncio.sleep(0)
        gone = asyncio.create_task(b.submit([{"x": 1}, {"x": 2}]))
        kept = asyncio.create_task(b.submit([{"x": 3}]))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.sleep(0)
        assert b.queue.waiting == 3
        runner.gates[0].set()
        await first
        await asyncio.sleep(0)
        assert runner.calls[1] == [3] and b.queue.waiting == 0
        runner.gates[1].set()
        assert await kept == [{"y": 3}]

    asyncio.run(main())


def test_batchers_register_under_their_task():
    async def main():
        runner = GatedRunner()
        b = SlotBatcher("qc-task", runner.send, 4, 1, approaching("qc-family"), 0.002)
        assert b.queue.task == "qc-family" and queue_control.lookup("qc-task") is b.queue

    asyncio.run(main())


# -- through a real server -----------------------------------------------------------------------------------------

SLOW_S = 2.5  # the text primary's injected compute time per batch


@pytest.fixture(scope="module")
def slow_text(tiny_registry, tmp_path_factory):
    import json

    from tests.conftest import NO_CAPACITY_LIMITS, Server

    env = {**NO_CAPACITY_LIMITS,
           "TRISERVE_RUNNER__FAULTS__LATENCY_MS": json.dumps({"text": int(SLOW_S * 1000)}),
           "TRISERVE_SLOTS__TEXT__BATCHING__MAX_BATCH_SIZE": "2",  # the next call carries 2 texts
           "TRISERVE_ADMISSION__QUEUE_CONTROL": "true", "TRISERVE_ADMISSION__QUEUE_INTERVAL_MS": "0"}
    log = tmp_path_factory.mktemp("logs") / "queue_control.log"
    with Server(tiny_registry.root, env=env, log_path=log) as srv:
        srv.wait_ready()
        yield srv, log


def test_a_standing_queue_is_refused_at_once_and_never_reaches_the_runner(slow_text):
    import json
    import time
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    srv, log = slow_text

    def classify(delay: float, model: str) -> tuple[httpx.Response, float]:
        time.sleep(delay)  # spaced arrivals: each admission sees the ones before it queued
        started = time.monotonic()
        resp = httpx.post(f"{srv.url}/v1/classify", json={"texts": ["book a table"], "model": model}, timeout=30)
        return resp, time.monotonic() - started

    plan = [(0.0, "primary")] + [(0.8 + 0.15 * i, "primary") for i in range(5)] + [(1.6, "auto")]
    with ThreadPoolExecutor(len(plan)) as pool:
        results = list(pool.map(lambda p: classify(*p), plan))
    statuses = [r.status_code for r, _ in results]
    # one call in flight, the next one full (2 texts): the primary requests beyond it are refused, fast (a loaded
    # host may reorder arrivals by a few ms, so counts rather than positions)
    spaced = results[1:6]
    admitted = [r for r, _ in spaced if r.status_code == 200]
    refused_ones = [(r, t) for r, t in spaced if r.status_code == 503]
    assert statuses[0] == 200 and admitted and len(refused_ones) >= 2 and len(admitted) + len(refused_ones) == 5, \
        statuses
    for resp, seconds in refused_ones:
        error = resp.json()["error"]
        assert error["code"] == "overloaded" and error["details"]["reason"] == "standing_queue"
        assert resp.headers["retry-after"] == "1" and seconds < SLOW_S / 2
    auto = results[6][0]
    assert auto.status_code == 200 and auto.json()["degraded_reason"] in (None, "overload")  # spilled, not refused
    assert auto.json()["degraded_reason"] == "overload" or len(admitted) < 2
    refused = {r.json()["error"]["request_id"] for r, _ in refused_ones}
    batches = [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"event": "batch"')]
    carried = {rid for b in batches for rid in b.get("request_ids", [])}
    assert carried and not refused & carried
