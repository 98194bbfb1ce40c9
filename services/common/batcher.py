"""Gateway-side adaptive batching: coalesce concurrent requests for one model slot into one runner call.

Why: a runner call costs an HTTP hop, serialisation and a dispatcher pass whatever its size, so sending one call per
request spends the server's CPU on plumbing. This batcher sends a lone request at once (no batching window, so
concurrency 1 pays nothing) and, while `max_inflight` calls for the slot are already out, lets the requests that arrive
meanwhile queue up; when a call returns, everything queued (up to `max_batch_size` items) leaves as the next call. The
batch size therefore follows the load by itself (Triton's dynamic batcher with a zero queue delay, "batch while busy"),
without the learned hold-back of BentoML's CorkDispatcher, which kept lone requests queued ~100 ms after a busy phase.

A request is never split across calls; one larger than `max_batch_size` goes alone. A request whose caller gave up
(deadline, disconnect) before its batch left is dropped from the queue, never sent.
"""
from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from prometheus_client import Histogram

GATEWAY_BATCH = Histogram("triserve_gateway_batch_requests", "Requests coalesced into one runner call, per slot.",
                          ["slot"], buckets=(1, 2, 4, 8, 16, 32, 64, 128))

Send = Callable[[list[dict]], Awaitable[list[dict]]]


@dataclass
class _Pending:
    items: list[dict]
    future: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class SlotBatcher:
    """One per (API worker, slot). `submit(items)` resolves to that request's results, in order."""

    def __init__(self, slot: str, send: Send, max_batch_size: int, max_inflight: int):
        self.slot = slot
        self._send = send
        self.max_batch_size = max_batch_size
        self.max_inflight = max_inflight
        self.inflight = 0
        self._queue: deque[_Pending] = deque()
        self._tasks: set[asyncio.Task] = set()

    @property
    def queued_items(self) -> int:
        return sum(len(p.items) for p in self._queue)

    async def submit(self, items: list[dict]) -> list[dict]:
        pending = _Pending(items)
        self._queue.append(pending)
        self._pump()
        return await pending.future  # cancelling this (deadline, disconnect) marks it dropped if not yet sent

    def _pump(self) -> None:
        while self.inflight < self.max_inflight:
            batch = self._take()
            if not batch:
                return
            self.inflight += 1
            task = asyncio.get_running_loop().create_task(self._call(batch))
            self._tasks.add(task)  # a strong reference until done
            task.add_done_callback(self._tasks.discard)

    def _take(self) -> list[_Pending]:
        """Queued live requests, oldest first, up to max_batch_size items (at least one request)."""
        batch: list[_Pending] = []
        size = 0
        while self._queue:
            head = self._queue[0]
            if head.future.done():  # cancelled by its caller before leaving: never sent
                self._queue.popleft()
                continue
            if batch and size + len(head.items) > self.max_batch_size:
                break
            batch.append(self._queue.popleft())
            size += len(head.items)
        return batch

    async def _call(self, batch: list[_Pending]) -> None:
        GATEWAY_BATCH.labels(self.slot).observe(len(batch))
        try:
            results = await self._send([it for p in batch for it in p.items])
            start = 0
            for p in batch:
                end = start + len(p.items)
                if not p.future.done():
                    p.future.set_result(results[start:end])
                start = end
        except asyncio.CancelledError:  # shutdown: nobody will answer these
            for p in batch:
                p.future.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - every waiter of the batch gets the failure
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(exc)
        finally:
            self.inflight -= 1
            self._pump()
