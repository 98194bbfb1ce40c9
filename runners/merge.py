"""Merging concurrent runner calls from different callers into one model call per slot ("batch while busy").

Why: with runner.batching='gateway' each API worker (and each gateway instance) coalesces only the requests it holds,
so with N workers every runner call carries about 1/N of what is in flight (docs/bench/scaleout_batching.md: a mean
batch of 12.3 items with one API worker, 4.5 with four). The runner sees every caller: calls that arrive while a
computation runs wait, and the next computation takes all of them at once, one model call per slot with every
caller's items (the runner then groups them per version and splits at the memory cap). No waiting window: a lone
call starts at once, so concurrency 1 pays nothing.

Calls of different slots are never merged into one computation: a failing model fails only its own callers.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import Histogram

MERGED_CALLS = Histogram("triserve_runner_merged_calls", "Runner calls (from any API worker or gateway instance) "
                         "served by one computation, per slot.", ["slot"], buckets=(1, 2, 3, 4, 6, 8, 12, 16, 32))

Compute = Callable[[list[dict]], list[dict]]


class CallMerger:
    """`await merger.submit(items)` -> one result per item, computed together with the calls of the same slot that
    were waiting at the same time. Computations run one at a time on one thread (ONNX Runtime releases the GIL;
    the event loop keeps accepting calls meanwhile)."""

    def __init__(self, compute: Compute):
        self._compute = compute
        self._pending: list[tuple[list[dict], asyncio.Future]] = []
        self._draining: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="triserve-compute")

    async def submit(self, items: list[dict]) -> list[dict]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        self._pending.append((items, future))
        if self._draining is None or self._draining.done():
            self._draining = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            calls, self._pending = self._pending, []
            by_slot: dict[str, list[tuple[list[dict], asyncio.Future]]] = {}
            for items, future in calls:
                if not future.done() and items:  # a caller that went away is not computed for
                    by_slot.setdefault(str(items[0].get("slot")), []).append((items, future))
                elif not future.done():
                    future.set_result([])
            for slot, group in by_slot.items():
                merged = [item for items, _ in group for item in items]
                MERGED_CALLS.labels(slot).observe(len(group))
                try:
                    results = await loop.run_in_executor(self._executor, self._compute, merged)
                except Exception as exc:  # noqa: BLE001 - handed to this slot's callers, as one call would have
                    for _, future in group:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                start = 0
                for items, future in group:
                    if not future.done():
                        future.set_result(results[start: start + len(items)])
                    start += len(items)
