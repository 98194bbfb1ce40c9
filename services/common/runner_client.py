"""Calls into the runner tier: gateway-side batching (services/common/batcher.py) and idempotent retry.

Why: inference calls are pure functions of their inputs, so a call lost in transport (a recycled connection, a runner
worker restarting) can be sent again safely; without this, such blips surface as client-visible 5xx under load.
Application errors coming back from the runner (4xx/5xx with a body) are not retried.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from services.common.batcher import SlotBatcher, approaching
from services.common.errors import ApiError
from services.common.metrics import RUNNER_INFLIGHT, RUNNER_RETRIES, labelled

log = logging.getLogger("triserve.runner_client")

_TRANSPORT_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ServerDisconnectedError, ConnectionError,
                     asyncio.IncompleteReadError)
_TRANSPORT_MARKERS = ("Connector is closed", "Server disconnected", "Connection reset", "Cannot connect")


def _is_transport_error(exc: BaseException) -> bool:
    if isinstance(exc, _TRANSPORT_ERRORS):
        return True
    text = str(exc)
    return any(m in text for m in _TRANSPORT_MARKERS)


async def call_runner(runner: Any, slot: str, payload: Any, retries: int, backoff_ms: int) -> list[dict]:
    """runner.<slot>(payload) with bounded retries on transport errors; failures become a 503 ApiError."""
    method = getattr(runner.to_async, slot)
    attempt = 0
    labelled(RUNNER_INFLIGHT, slot).inc()
    try:
        while True:
            try:
                return await method(payload)
            except Exception as exc:  # noqa: BLE001 - classified below
                if attempt < retries and _is_transport_error(exc):
                    attempt += 1
                    RUNNER_RETRIES.labels(slot).inc()
                    log.warning("runner %s transport error (%s); retry %d/%d", slot, exc, attempt, retries)
                    await asyncio.sleep(backoff_ms * (2 ** (attempt - 1)) / 1000.0)
                    continue
                log.error("runner %s failed: %s", slot, exc)
                raise ApiError(503, "runner_unavailable", f"model runner for {slot} failed",
                               {"slot": slot, "reason": type(exc).__name__}, headers={"Retry-After": "1"}) from exc
    finally:
        labelled(RUNNER_INFLIGHT, slot).dec()


class RunnerClient:
    """The gateway's way to call a model slot. With runner.batching == "gateway" concurrent requests of this API
    worker are coalesced per slot (one runner call per batch); with "runner" each request is its own call and BentoML's
    dispatcher in the runner merges them."""

    def __init__(self, runner: Any, settings: Any, slots: dict[str, int]):
        self.runner = runner
        cfg = settings.gateway
        self._retries, self._backoff = cfg.runner_retries, cfg.runner_retry_backoff_ms
        self.batchers: dict[str, SlotBatcher] = {}
        if settings.runner.batching == "gateway":
            wait_s = cfg.coalesce_wait_ms / 1000.0
            self.batchers = {slot: SlotBatcher(slot, self._sender(slot), size, cfg.batch_inflight,
                                               approaching(slot.removesuffix("_fallback")), wait_s)
                             for slot, size in slots.items()}

    def _sender(self, slot: str):
        async def send(items: list[dict]) -> list[dict]:
            return await call_runner(self.runner, slot, items, self._retries, self._backoff)
        return send

    async def call(self, slot: str, payload: list[dict], arrived: Callable[[], None] | None = None) -> list[dict]:
        """`arrived`: see SlotBatcher.submit."""
        batcher = self.batchers.get(slot)
        if batcher is None:
            if arrived is not None:
                arrived()
            return await call_runner(self.runner, slot, payload, self._retries, self._backoff)
        return await batcher.submit(payload, arrived)
