"""A small load generator for drills and benchmarks: open loop (a steady arrival rate) or closed loop (a fixed number
of clients), always bounded in count and in time, loopback targets only. Every request becomes a `Row`
(scripts/drills/common.py): status or transport error, send and completion times relative to the caller's t0, and
whether the answer was degraded. The summaries (phase, per_second) count as every benchmark does
(common.answer_kind): "ok" is primary answers only, degraded answers are counted apart, "failed" is everything else.

Open loop: request i is sent at t0 + i / rate whatever the server does, so a stall shows up as latency and failures
instead of slowing the load down; when `max_inflight` requests are already outstanding an arrival is not sent and is
counted in `skipped` (the client's own limit, reported, never hidden).
"""
from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

from scripts.drills.common import DEGRADED, FAILED, PRIMARY, Row, assert_loopback, by_kind, by_status, lat, post


@dataclass
class LoadResult:
    rows: list[Row] = field(default_factory=list)
    skipped: int = 0  # open loop: arrivals not sent because max_inflight requests were outstanding
    sent: int = 0


def session(limit: int, fresh_connections: bool = False) -> aiohttp.ClientSession:
    """`fresh_connections`: a new TCP connection per request (many independent clients). With keep-alive, one client
    process holds a few long-lived connections and each stays with the API worker that accepted it, so the load
    reaches the workers of one instance as unevenly as those accepts happened (measured: one of 4 workers with 65%
    of the CPU time); new connections are accepted by whichever worker is free."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit, limit_per_host=limit,
                                                                force_close=fresh_connections))


async def open_loop(urls: Sequence[str], path: str, bodies: Sequence[dict], rate: float, max_seconds: float,
                    max_requests: int, t0: float, stop: Callable[[], bool] = lambda: False, max_inflight: int = 128,
                    timeout_s: float = 30.0, result: LoadResult | None = None,
                    fresh_connections: bool = False) -> LoadResult:
    """Arrivals at `rate`/s until stop() says so, `max_seconds` pass or `max_requests` are sent; the targets take
    turns (round robin over `urls`). Returns when every request sent has completed."""
    for u in urls:
        assert_loopback(u)
    res = result if result is not None else LoadResult()
    inflight: set[asyncio.Task] = set()

    def done(task: asyncio.Task) -> None:
        inflight.discard(task)
        res.rows.append(task.result())

    start = time.monotonic()
    async with session(max_inflight, fresh_connections) as s:
        for i in range(max_requests):
            due = start + i / rate
            now = time.monotonic()
            if due > now:
                await asyncio.sleep(due - now)
            if stop() or time.monotonic() - start > max_seconds:
                break
            if len(inflight) >= max_inflight:
                res.skipped += 1
                continue
            task = asyncio.create_task(post(s, urls[i % len(urls)], path, bodies[i % len(bodies)], t0,
                                            timeout=timeout_s))
            task.add_done_callback(done)
            inflight.add(task)
            res.sent += 1
        if inflight:
            await asyncio.gather(*list(inflight))
    return res


async def closed_loop(url: str, path: str, bodies: Sequence[dict], concurrency: int, max_seconds: float,
                      max_requests: int, t0: float, timeout_s: float = 30.0,
                      fresh_connections: bool = False) -> LoadResult:
    """`concurrency` clients, each sending its next request when its previous one completes."""
    assert_loopback(url)
    res = LoadResult()
    counter = itertools.count()
    stop_at = time.monotonic() + max_seconds
    async with session(concurrency + 4, fresh_connections) as s:

        async def client() -> None:
            while time.monotonic() < stop_at:
                i = next(counter)
                if i >= max_requests:
                    return
                res.sent += 1
                res.rows.append(await post(s, url, path, bodies[i % len(bodies)], t0, timeout=timeout_s))

        await asyncio.gather(*(client() for _ in range(concurrency)))
    return res


def phase(rows: Sequence[Row], start: float | None, end: float | None) -> dict:
    """Requests *sent* in [start, end): primary answers ("ok"), degraded answers and failed requests, counts by
    status, latency of all of them, of the primary answers ("latency_ok_ms") and of the degraded ones."""
    sel = [r for r in rows if (start is None or r.sent >= start) and (end is None or r.sent < end)]
    kinds = by_kind(sel)
    return {"from_s": start, "to_s": end, "requests": len(sel), "ok": len(kinds[PRIMARY]),
            "degraded": len(kinds[DEGRADED]), "failed": len(kinds[FAILED]), "status": by_status(sel),
            "latency_ms": lat(sel), "latency_ok_ms": lat(kinds[PRIMARY]), "latency_degraded_ms": lat(kinds[DEGRADED])}


def per_second(rows: Sequence[Row]) -> list[dict]:
    """Per second of send time: requests, primary answers (ok), degraded answers, failed, p50 and p99 latency (ms)."""
    import numpy as np

    buckets: dict[int, list[Row]] = {}
    for r in rows:
        buckets.setdefault(int(r.sent), []).append(r)
    out = []
    for sec in sorted(buckets):
        b = buckets[sec]
        ms = [r.ms for r in b]
        kinds = by_kind(b)
        out.append({"t": sec, "n": len(b), "ok": len(kinds[PRIMARY]), "degraded": len(kinds[DEGRADED]),
                    "failed": len(kinds[FAILED]), "p50_ms": round(float(np.percentile(ms, 50)), 1),
                    "p99_ms": round(float(np.percentile(ms, 99)), 1)})
    return out
