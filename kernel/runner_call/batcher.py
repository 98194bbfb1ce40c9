"""Gateway-side adaptive batching: coalesce concurrent requests for one model slot into one runner call.

Why: a runner call costs an HTTP hop, serialisation and a dispatcher pass whatever its size, so sending one call per
request spends the server's CPU on plumbing. This batcher sends a lone request at once (no batching window, so
concurrency 1 pays nothing) and, while `max_inflight` calls for the slot are already out, lets the requests that arrive
meanwhile queue up; when a call returns, everything queued (up to `max_batch_size` items) leaves as the next call. The
batch size therefore follows the load by itself (Triton's dynamic batcher with a zero queue delay, "batch while busy"),
without the learned hold-back of BentoML's CorkDispatcher, which kept lone requests queued ~100 ms after a busy phase.

A request is never split across calls; one larger than `max_batch_size` goes alone. A request whose caller gave up
(deadline, disconnect) before its batch left is dropped from the queue, never sent.

One exception to "a lone request leaves at once": when other requests of the same task are already inside this API
worker (admitted, still being parsed or preprocessed; `Approaching`), a batch for an idle slot waits for them, up to
`coalesce_wait_s` from its oldest request. Under a closed-loop load at c=32 the first request back after a batch
otherwise left alone each time, and half of the runner calls carried one text (docs/performance.md). At concurrency 1
nobody is on the way, so nothing waits.

Each batcher also keeps its slot's queue view for admission (kernel/protection/queue_control.py): the items waiting
for a call, and at each departure how many it left behind (a standing queue), so that admission can refuse under
overload what the next call cannot carry. The wait of the oldest request of each call is exported
(triserve_gateway_queue_wait_seconds).
"""
from __future__ import annotations

import asyncio
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from triserve.kernel.protection import queue_control
from triserve.observability.metrics import GATEWAY_BATCH, QUEUE_WAIT

Send = Callable[[list[dict]], Awaitable[list[dict]]]


class Approaching:
    """Requests of one task inside this API worker that have not reached their slot's batcher yet.

    `enter()` when a request of the task arrives; the function it returns is called once the request submits (or ends
    without submitting) and may be called again harmlessly. Batchers listen for the count falling to zero, the moment
    nobody else is on the way.
    """

    def __init__(self, task: str = "") -> None:
        self.task = task
        self.count = 0
        self._listeners: list[weakref.WeakMethod] = []

    def listen(self, callback: Callable[[], None]) -> None:
        """`callback` is a bound method, held weakly: a batcher that is gone stops listening."""
        self._listeners = [ref for ref in self._listeners if ref() is not None]
        self._listeners.append(weakref.WeakMethod(callback))

    def enter(self) -> Callable[[], None]:
        self.count += 1
        pending = [True]

        def arrived() -> None:
            if pending:
                pending.clear()
                self.count -= 1
                if self.count == 0:
                    for ref in self._listeners:
                        callback = ref()
                        if callback is not None:
                            callback()
        return arrived


_APPROACHING: dict[str, Approaching] = {}


def approaching(task: str) -> Approaching:
    """This process's count for `task` (one event loop per API worker process)."""
    found = _APPROACHING.get(task)
    if found is None:
        found = _APPROACHING[task] = Approaching(task)
    return found


@dataclass
class _Pending:
    items: list[dict]
    future: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    enqueued: float = field(default_factory=time.monotonic)


class SlotBatcher:
    """One per (API worker, slot). `submit(items)` resolves to that request's results, in order."""

    def __init__(self, slot: str, send: Send, max_batch_size: int, max_inflight: int,
                 coming: Approaching | None = None, coalesce_wait_s: float = 0.0,
                 fail_queue_on: Callable[[BaseException], bool] | None = None):
        """fail_queue_on(exc): a call failure that fails the queued requests too (they would be sent to the same
        lost runner; runner_client.runner_lost), so that their callers move on to a fallback now."""
        self.slot = slot
        self._fail_queue_on = fail_queue_on
        self._send = send
        self.max_batch_size = max_batch_size
        self.max_inflight = max_inflight
        self.inflight = 0
        self._queue: deque[_Pending] = deque()
        # what admission (and the front door, per task) sees of this queue
        self.queue = queue_control.register(slot, max_batch_size * max_inflight, coming.task if coming else "")
        self._tasks: set[asyncio.Task] = set()
        self.coming = coming
        self.coalesce_wait_s = coalesce_wait_s
        self._timer: asyncio.TimerHandle | None = None
        if coming is not None and coalesce_wait_s > 0:
            coming.listen(self._pump)

    @property
    def queued_items(self) -> int:
        """Items waiting for a call (requests cancelled while queued count until their turn comes)."""
        return self.queue.waiting

    async def submit(self, items: list[dict], arrived: Callable[[], None] | None = None) -> list[dict]:
        """`arrived`: the request's Approaching.enter() callback, called once it is queued (so that a batch waiting
        for it leaves with it)."""
        pending = _Pending(items)
        self._queue.append(pending)
        self.queue.waiting += len(items)
        if arrived is not None:
            arrived()
        self._pump()
        return await pending.future  # cancelling this (deadline, disconnect) marks it dropped if not yet sent

    def _pump(self) -> None:
        while self.inflight < self.max_inflight:
            wait = self._wait_for_companions()
            if wait > 0:
                if self._timer is None:
                    self._timer = asyncio.get_running_loop().call_later(wait, self._on_timer)
                return
            batch = self._take()
            if not batch:
                return
            now = time.monotonic()
            self.queue.departed(now, self.queue.waiting)
            QUEUE_WAIT.labels(self.slot).observe(now - batch[0].enqueued)
            self.inflight += 1
            task = asyncio.get_running_loop().create_task(self._call(batch))
            self._tasks.add(task)  # a strong reference until done
            task.add_done_callback(self._tasks.discard)

    def _wait_for_companions(self) -> float:
        """Seconds the next batch should still wait for requests on their way (0: leave now)."""
        if not self._queue or self.coming is None or self.coming.count <= 0 or self.coalesce_wait_s <= 0:
            return 0.0
        if self.queued_items >= self.max_batch_size:
            return 0.0
        return self._queue[0].enqueued + self.coalesce_wait_s - time.monotonic()

    def _on_timer(self) -> None:
        self._timer = None
        self._pump()

    def _take(self) -> list[_Pending]:
        """Queued live requests, oldest first, up to max_batch_size items (at least one request)."""
        batch: list[_Pending] = []
        size = 0
        while self._queue:
            head = self._queue[0]
            if head.future.done():  # cancelled by its caller before leaving: never sent
                self._queue.popleft()
                self.queue.waiting -= len(head.items)
                continue
            if batch and size + len(head.items) > self.max_batch_size:
                break
            batch.append(self._queue.popleft())
            self.queue.waiting -= len(head.items)
            size += len(head.items)
        return batch

    def _drain(self) -> list[_Pending]:
        """Take every queued request out of the queue."""
        drained = list(self._queue)
        self._queue.clear()
        self.queue.waiting -= sum(len(p.items) for p in drained)
        return drained

    async def _call(self, batch: list[_Pending]) -> None:
        GATEWAY_BATCH.labels(self.slot).observe(len(batch))
        started = time.monotonic()
        self.queue.call_began(started)
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
            queued = self._drain() if self._fail_queue_on is not None and self._fail_queue_on(exc) else []
            for p in [*batch, *queued]:
                if not p.future.done():
                    p.future.set_exception(exc)
        finally:
            self.queue.call_ended(started, time.monotonic())
            self.inflight -= 1
            self._pump()
