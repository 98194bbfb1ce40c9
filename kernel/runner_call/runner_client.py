"""Calls into the runner tier: gateway-side batching (kernel/runner_call/batcher.py) and idempotent retry.

Why: inference calls are pure functions of their inputs, so a call lost in transport (a recycled connection, a runner
worker restarting) can be sent again safely; without this, such blips surface as client-visible 5xx under load.
Application errors coming back from the runner (4xx/5xx with a body) are not retried.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from triserve.kernel.errors import ApiError
from triserve.kernel.runner_call.batcher import SlotBatcher, approaching
from triserve.kernel.runner_call.fast_path import FastPath
from triserve.observability.metrics import RUNNER_INFLIGHT, RUNNER_RETRIES, labelled

log = logging.getLogger("triserve.runner_client")

_TRANSPORT_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ServerDisconnectedError, ConnectionError,
                     asyncio.IncompleteReadError)
LOADING_FIRST_PAUSE_S, LOADING_MAX_PAUSE_S = 0.05, 0.25  # resending items of a deployment that is loading
_TRANSPORT_MARKERS = ("Connector is closed", "Server disconnected", "Connection reset", "Cannot connect")


def _is_transport_error(exc: BaseException) -> bool:
    if isinstance(exc, _TRANSPORT_ERRORS):
        return True
    text = str(exc)
    return any(m in text for m in _TRANSPORT_MARKERS)


def runner_lost(exc: BaseException) -> bool:
    """A runner call that failed because its connection to the runner tier was lost (call_runner's 503 from a
    transport error), not an answer of the runner."""
    return isinstance(exc, ApiError) and exc.code == "runner_unavailable" and exc.__cause__ is not None \
        and _is_transport_error(exc.__cause__)


def _retried(exc: BaseException) -> bool:
    return isinstance(exc, Exception) and _is_transport_error(exc)  # never a cancellation


def runner_retrying(slot: str, retries: int, backoff_ms: int) -> AsyncRetrying:
    """tenacity policy of one runner call: transport errors retried `retries` times (retries + 1 attempts), the n-th
    wait backoff_ms * 2**(n-1) plus a uniform random jitter in [0, backoff_ms], so the API workers that lost the same
    runner connection do not come back in step; anything else is raised at once, and so is the last transport error."""
    backoff = backoff_ms / 1000.0

    def count_retry(state: RetryCallState) -> None:
        RUNNER_RETRIES.labels(slot).inc()
        error = state.outcome.exception() if state.outcome is not None else None  # set before every sleep
        log.warning("runner %s transport error (%s); retry %d/%d in %.3fs", slot, error, state.attempt_number,
                    retries, state.upcoming_sleep)

    return AsyncRetrying(stop=stop_after_attempt(max(0, retries) + 1),
                         wait=wait_exponential_jitter(multiplier=backoff, exp_base=2, jitter=backoff),
                         retry=retry_if_exception(_retried), before_sleep=count_retry, reraise=True)


async def call_runner(runner: Any, slot: str, payload: Any, retries: int, backoff_ms: int,
                      fast: FastPath | None = None, wait_out_restarts: bool = True) -> list[dict]:
    """runner.infer(payload) (items of `slot`) with bounded retries on transport errors; failures become a 503. With
    `fast`, over the runner's fast path where it has one (kernel/runner_call/fast_path.py), else BentoML's. A fast
    call refused or cut in transport goes on over BentoML's socket when `wait_out_restarts`: the arbiter holds that
    socket while it starts a killed runner again, so the call is answered by the new runner instead of failing (as
    before the fast path); a slot that fails over to a fallback elsewhere passes False and fails at once."""
    method = runner.to_async.infer

    async def attempt() -> list[dict]:  # BentoML's proxy methods return awaitables without being coroutine functions
        if fast is not None:
            try:
                answer = await fast.send(payload)
            except Exception as exc:
                if not (wait_out_restarts and _is_transport_error(exc)):
                    raise
                answer = None
            if answer is not None:
                return answer
        return await method(payload)

    labelled(RUNNER_INFLIGHT, slot).inc()
    try:
        return await runner_retrying(slot, retries, backoff_ms)(attempt)
    except Exception as exc:  # the last attempt's failure, whatever it is, is the runner failing this call
        log.error("runner %s failed: %s", slot, exc)
        raise ApiError(503, "runner_unavailable", f"model runner for {slot} failed",
                       {"slot": slot, "reason": type(exc).__name__}, headers={"Retry-After": "1"}) from exc
    finally:
        labelled(RUNNER_INFLIGHT, slot).dec()


class RunnerClient:
    """The gateway's way to call a model slot. With runner.batching == "gateway" concurrent requests of this API
    worker are coalesced per slot (one runner call per batch); with "runner" each request is its own call and BentoML's
    dispatcher in the runner merges them (across slots: every item names its slot)."""

    def __init__(self, runner: Any, settings: Any, max_batch: Callable[[str], int], family_of: Callable[[str], str],
                 fails_over: Callable[[str], bool] | None = None):
        """fails_over(slot): the slot has a fallback elsewhere (runner.fallbacks='gateway'), so a transport error on
        its call is not retried and also fails the requests queued behind that call: a SIGKILLed runner's listening
        socket (held by BentoML's arbiter) accepts the retry and never answers until the restart, so a retry would
        wait for the attempt timeout (runner.primary_attempt_ms) while the fallback could answer now."""
        self.runner = runner
        self._fails_over = fails_over or (lambda slot: False)
        cfg = settings.gateway
        self._retries, self._backoff = cfg.runner_retries, cfg.runner_retry_backoff_ms
        self._gateway_batching = settings.runner.batching == "gateway"
        self._max_batch, self._family_of = max_batch, family_of
        self._inflight, self._wait_s = cfg.batch_inflight, cfg.coalesce_wait_ms / 1000.0
        self.batchers: dict[str, SlotBatcher] = {}
        self._caller = uuid.uuid4().hex[:12]  # this API worker, as the runner tells its callers apart
        self.fast = FastPath(runner, settings.runner.timeout_s, settings.observability.trace_sample_rate > 0) \
            if settings.runner.fast_path and self._gateway_batching else None

    async def close(self) -> None:
        """Release what this client holds open across calls (the fast path's connection to the runner)."""
        if self.fast is not None:
            await self.fast.close()

    def batcher(self, slot: str) -> SlotBatcher | None:
        """The slot's batcher, made on first use (deployments are added at run time). Requests on their way are
        counted per family (the body, which names the deployment, is not parsed yet when they are counted)."""
        if not self._gateway_batching:
            return None
        b = self.batchers.get(slot)
        if b is None:
            b = self.batchers[slot] = SlotBatcher(slot, self._sender(slot), self._max_batch(slot), self._inflight,
                                                  approaching(self._family_of(slot)), self._wait_s,
                                                  fail_queue_on=lambda exc: self._fails_over(slot) and runner_lost(exc))
        return b

    def _retries_of(self, slot: str) -> int:
        """Asked per call, like fail_queue_on per failure: deployments (and their fallbacks) change at run time."""
        return 0 if self._fails_over(slot) else self._retries

    def _sender(self, slot: str):
        async def send(items: list[dict]) -> list[dict]:
            if items:  # who sends: the runner gathers the calls of callers that arrive together (runners/merge.py)
                items = [{**items[0], "caller": self._caller}, *items[1:]]
            return await call_runner(self.runner, slot, items, self._retries_of(slot), self._backoff, self.fast,
                                     wait_out_restarts=not self._fails_over(slot))
        return send

    async def call(self, slot: str, payload: list[dict], arrived: Callable[[], None] | None = None) -> list[dict]:
        """`arrived`: see SlotBatcher.submit. A slot whose on-demand deployment is still loading answers "loading"
        (runners/residency.py): the items are sent again, with growing pauses, until they are answered or their
        deadline is too close for another try (the caller then reports the load)."""
        pause = LOADING_FIRST_PAUSE_S
        while True:
            items = await self._send_once(slot, payload, arrived)
            arrived = None
            if not any(it.get("error") == "loading" for it in items):
                return items
            deadline = payload[0].get("deadline") if payload else None
            if deadline is not None and deadline - time.time() <= pause:
                return items
            await asyncio.sleep(pause)
            pause = min(pause * 2, LOADING_MAX_PAUSE_S)

    async def _send_once(self, slot: str, payload: list[dict], arrived: Callable[[], None] | None) -> list[dict]:
        batcher = self.batcher(slot)
        if batcher is None:
            if arrived is not None:
                arrived()
            return await call_runner(self.runner, slot, payload, self._retries_of(slot), self._backoff)
        batcher.max_batch_size = self._max_batch(slot)  # follows the memory cap of the model loaded now
        return await batcher.submit(payload, arrived)
