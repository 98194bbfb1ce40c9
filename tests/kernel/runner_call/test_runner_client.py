"""call_runner's retry policy (tenacity): transport errors retried `retries` times with exponential backoff and
jitter, everything else (and the last transport error) a 503 at once, cancellation never retried."""
from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from kernel.errors import ApiError
from kernel.runner_call.runner_client import call_runner, runner_retrying
from observability.metrics import RUNNER_INFLIGHT, RUNNER_RETRIES


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
    from configs.settings import get_settings
    from kernel.runner_call.runner_client import RunnerClient

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
