"""call_runner's retry policy (tenacity): transport errors retried `retries` times with exponential backoff and
jitter, everything else (and the last transport error) a 503 at once, cancellation never retried."""
from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from triserve.kernel.errors import ApiError
from triserve.kernel.runner_call.runner_client import call_runner, runner_retrying
from triserve.observability.metrics import RUNNER_INFLIGHT, RUNNER_RETRIES


class ProxyRunner:
    """Like BentoML's RemoteProxy: `to_async.infer` is a plain callable that returns an awaitable. The first `fails`
    calls raise `error`."""

    def __init__(self, fails: int = 0, error: BaseException | None = None):
        self.to_async = self
        self.fails, self.error = fails, error
        self.calls: list[float] = []  # time.monotonic() of each call

    def infer(self, payload):
        self.calls.append(time.monotonic())
        failing = len(self.calls) <= self.fails

        async def answer():
            if failing:
                raise self.error
            return [{"y": payload}]

        return answer()


def _retries(slot: str) -> float:
    return RUNNER_RETRIES.labels(slot)._value.get()


def test_transport_errors_are_retried_with_growing_jittered_waits():
    runner = ProxyRunner(fails=2, error=aiohttp.ServerDisconnectedError())
    before = _retries("rc-retry")
    assert asyncio.run(call_runner(runner, "rc-retry", 7, retries=3, backoff_ms=40)) == [{"y": 7}]
    assert len(runner.calls) == 3 and _retries("rc-retry") - before == 2
    first, second = (b - a for a, b in zip(runner.calls, runner.calls[1:]))
    assert 0.04 <= first and 0.08 <= second < 1  # backoff * 2**(n-1) + jitter in [0, backoff] (+ scheduling)
    assert RUNNER_INFLIGHT.labels("rc-retry")._value.get() == 0


def test_retries_are_bounded_and_the_last_transport_error_is_a_503():
    runner = ProxyRunner(fails=10, error=RuntimeError("Connector is closed"))
    with pytest.raises(ApiError) as info:
        asyncio.run(call_runner(runner, "rc-bounded", 1, retries=2, backoff_ms=1))
    assert len(runner.calls) == 3
    assert (info.value.status, info.value.code) == (503, "runner_unavailable")
    assert info.value.details == {"slot": "rc-bounded", "reason": "RuntimeError"}
    assert info.value.headers == {"Retry-After": "1"} and isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.parametrize("retries", [0, 3])
def test_application_errors_are_not_retried(retries):
    runner = ProxyRunner(fails=10, error=ValueError("bad input"))
    with pytest.raises(ApiError) as info:
        asyncio.run(call_runner(runner, "rc-app", 1, retries=retries, backoff_ms=1))
    assert len(runner.calls) == 1 and info.value.details["reason"] == "ValueError"


def test_cancellation_is_neither_retried_nor_turned_into_a_503():
    runner = ProxyRunner(fails=10, error=asyncio.CancelledError("Server disconnected"))  # even with a marker
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(call_runner(runner, "rc-cancel", 1, retries=3, backoff_ms=1))
    assert len(runner.calls) == 1 and RUNNER_INFLIGHT.labels("rc-cancel")._value.get() == 0


def test_policy_attempts_and_wait_bounds():
    policy = runner_retrying("rc-policy", retries=4, backoff_ms=100)
    assert policy.stop.max_attempt_number == 5
    assert (policy.wait.multiplier, policy.wait.exp_base, policy.wait.jitter) == (0.1, 2, 0.1)


class RecordingRunner:
    """Answers each item with itself; keeps every call's items."""

    def __init__(self):
        self.to_async = self
        self.calls: list[list[dict]] = []

    def infer(self, items):
        self.calls.append(items)

        async def answer():
            return [{"y": it["x"]} for it in items]

        return answer()


def test_each_client_names_itself_in_its_calls_without_touching_the_callers_items():
    """The runner gathers the calls of callers that arrive together (runners/merge.py): it needs to tell them apart."""
    from triserve.configs.settings import get_settings
    from triserve.kernel.runner_call.runner_client import RunnerClient

    settings = get_settings()
    assert settings.runner.batching == "gateway"
    runner = RecordingRunner()
    clients = [RunnerClient(runner, settings, lambda slot: 8, lambda slot: "text") for _ in range(2)]
    payload = [{"slot": "s", "x": 1, "deadline": None}, {"slot": "s", "x": 2, "deadline": None}]

    async def main():
        return [await c.call("s", payload) for c in clients]

    answers = asyncio.run(main())
    assert answers == [[{"y": 1}, {"y": 2}]] * 2
    callers = [call[0]["caller"] for call in runner.calls]
    assert len(callers) == 2 and callers[0] != callers[1] and all(callers)
    assert all("caller" not in it for call in runner.calls for it in call[1:])  # once per call, on its first item
    assert all("caller" not in it for it in payload)  # the request's own items are not changed


class LostRunner:
    """A runner tier whose first call loses its connection (the worker SIGKILLed) after `hold_s`; every later call
    hangs (BentoML's arbiter still holds the listening socket: connections are accepted, never answered)."""

    def __init__(self, hold_s: float = 0.05):
        self.to_async = self
        self.hold_s = hold_s
        self.calls: list[list[dict]] = []

    def infer(self, payload):
        self.calls.append(payload)
        first = len(self.calls) == 1

        async def answer():
            if first:
                await asyncio.sleep(self.hold_s)
                raise aiohttp.ServerDisconnectedError()
            await asyncio.sleep(3600)

        return answer()


@pytest.mark.parametrize("fails_over", [True, False])
def test_a_lost_runner_fails_the_call_and_its_queue_at_once_when_a_fallback_answers_elsewhere(fails_over):
    """fails_over: no retry into the lost runner, and the requests queued behind the lost call fail with it (their
    fallback answers now); otherwise the transport error is retried and everyone waits (here: until the timeout)."""
    from triserve.configs.settings import get_settings
    from triserve.kernel.runner_call.runner_client import RunnerClient

    runner = LostRunner()
    hosted = {"text": not fails_over}  # the deployment changes after its batcher was made: the failure asks anew
    client = RunnerClient(runner, get_settings(), lambda slot: 1, lambda slot: "text",
                          fails_over=lambda slot: hosted.get(slot, False))
    client.batcher("text")
    hosted["text"] = fails_over

    async def main():
        calls = [asyncio.create_task(client.call("text", [{"slot": "text", "x": i, "deadline": None}]))
                 for i in range(3)]  # max batch 1: one call in flight, two queued behind it
        done, pending = await asyncio.wait(calls, timeout=1.0)
        for task in pending:
            task.cancel()
        return [t.exception() if t in done else "pending" for t in calls]

    began = time.monotonic()
    outcomes = asyncio.run(main())
    if fails_over:
        assert all(isinstance(e, ApiError) and e.code == "runner_unavailable" for e in outcomes)
        assert len(runner.calls) == 1 and time.monotonic() - began < 0.5  # no retry, the queue never sent
    else:
        assert outcomes == ["pending"] * 3 and len(runner.calls) == 2  # retried into the hanging runner
