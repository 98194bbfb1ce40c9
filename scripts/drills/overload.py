"""Drill: open-loop overload at 3x measured capacity, then back to a low rate.

    python -m scripts.drills.overload [--registry models/store] [--factor 3] [--overload-seconds 60]

Phases, all on /v1/classify (1-4 texts, model auto) unless --mix says otherwise:
  1. capacity  - closed loop (--capacity-concurrency, --capacity-seconds): successful requests per second;
  2. baseline  - open loop at the low rate (--low-fraction x capacity): baseline p50/p99;
  3. overload  - open loop at --factor x capacity for --overload-seconds: arrivals are scheduled at fixed intervals
                 whatever the responses do, with at most --max-inflight requests outstanding (beyond that an arrival
                 is counted as not sent, so the drill stays bounded);
  4. recovery  - open loop at the low rate for --recovery-seconds.
Reports accepted vs rejected by status and error code, latency of rejects, p50/p99 of accepted during overload, and
how long after the overload the per-second p99 is back within --recovery-tolerance x the baseline p99.
The server runs with env knobs (printed and saved) so that admission, not the per-address rate limit, does the
rejecting: every drill request comes from 127.0.0.1.
"""
from __future__ import annotations

import asyncio
import os
import random
import time

import aiohttp
import numpy as np

from scripts.bench.load_mix import payloads
from scripts.drills.common import (
    Row,
    access_log,
    assert_loopback,
    base_parser,
    by_status,
    degraded_reasons,
    lat,
    log_path,
    pct,
    post,
    save,
    text_body,
    transport_errors,
)
from scripts.drills.server import Server

NAME = "overload"
DEFAULT_ENV = {
    # one client address sends everything: lift the per-address token bucket so admission decides
    "TRISERVE_ACCESS__RATE_PER_S": "1000000",
    "TRISERVE_ACCESS__BURST": "1000000",
    # bounded per-slot queue: reject beyond 128 items in flight; route a share of 'auto' to the fallback above 64
    "TRISERVE_ADMISSION__MAX_INFLIGHT_ITEMS": "128",
    "TRISERVE_ADMISSION__OVERLOAD_QUEUE_ITEMS": "64",
}


class Load:
    def __init__(self, url: str, mix: str, deadline_ms: int | None, seed: int = 0):
        self.url, self.mix, self.rng = url, mix, random.Random(seed)
        self.headers = {"X-Request-Timeout-Ms": str(deadline_ms)} if deadline_ms else None
        self.mixed = payloads(seed) if mix == "mixed" else None
        self.i = 0

    def next(self) -> tuple[str, dict]:
        self.i += 1
        if self.mixed:
            return self.mixed[self.i % len(self.mixed)]
        return "/v1/classify", text_body(self.rng)


async def closed_loop(session, load: Load, t0: float, concurrency: int, seconds: float, max_requests: int) -> list[Row]:
    rows: list[Row] = []
    stop = time.monotonic() + seconds
    counter = iter(range(max_requests))

    async def worker():
        for _ in counter:
            if time.monotonic() > stop:
                return
            path, body = load.next()
            rows.append(await post(session, load.url, path, body, t0, load.headers, timeout=30))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return rows


async def open_loop(session, load: Load, t0: float, rate: float, seconds: float,
                    max_inflight: int) -> tuple[list[Row], dict]:
    """Arrivals at fixed intervals (1/rate), never waiting for responses; bounded by count and in-flight cap."""
    rows: list[Row] = []
    n = int(rate * seconds)
    interval = 1.0 / rate
    inflight = 0
    skipped = 0
    tasks: set[asyncio.Task] = set()

    async def one(path, body):
        nonlocal inflight
        try:
            rows.append(await post(session, load.url, path, body, t0, load.headers, timeout=30))
        finally:
            inflight -= 1

    start = time.monotonic()
    max_lag = 0.0
    for i in range(n):
        target = start + i * interval
        delay = target - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            max_lag = max(max_lag, -delay)
        if inflight >= max_inflight:
            skipped += 1
            continue
        inflight += 1
        path, body = load.next()
        task = asyncio.create_task(one(path, body))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    send_seconds = time.monotonic() - start
    if tasks:
        await asyncio.wait(tasks, timeout=40)
    return rows, {"target_rate": round(rate, 1), "scheduled": n, "sent": n - skipped,
                  "not_sent_inflight_cap": skipped, "send_seconds": round(send_seconds, 2),
                  "achieved_send_rate": round((n - skipped) / max(send_seconds, 1e-9), 1),
                  "max_schedule_lag_ms": round(max_lag * 1000, 1)}


def per_second_p99(rows: list[Row], start: float, end: float) -> list[dict]:
    """p99 per 1 s bucket of sent time, relative to `start`."""
    out = []
    for s in range(int(np.ceil(end - start))):
        b = [r for r in rows if start + s <= r.sent < start + s + 1]
        ok = [r.ms for r in b if r.ok]
        out.append({"s": s, "n": len(b), "ok": len(ok), "degraded": sum(1 for r in b if r.ok and r.degraded),
                    "p50": pct(ok, 50), "p99": pct(ok, 99)})
    return out


async def drill(url: str, args) -> dict:
    assert_loopback(url)
    load = Load(url, args.mix, args.deadline_ms)
    res: dict = {}
    wall: dict[str, float] = {}
    res["_wall"] = wall
    loadavg = {"start": os.getloadavg()}
    t0 = time.monotonic()
    connector = aiohttp.TCPConnector(limit=args.max_inflight + 16)
    async with aiohttp.ClientSession(connector=connector) as session:
        # warm the connection pool and the batching latency estimate
        await closed_loop(session, load, t0, 4, 2, 200)

        cap_rows = await closed_loop(session, load, t0, args.capacity_concurrency, args.capacity_seconds, 50_000)
        ok = [r for r in cap_rows if r.ok]
        span = max(r.done for r in cap_rows) - min(r.sent for r in cap_rows)
        capacity = len(ok) / span
        res["capacity"] = {"concurrency": args.capacity_concurrency, "seconds": round(span, 1),
                           "requests": len(cap_rows), "status": by_status(cap_rows), "ok_rps": round(capacity, 1),
                           "latency_ms": lat(ok)}
        if capacity <= 0:
            raise SystemExit("no successful request while measuring capacity")
        low, high = capacity * args.low_fraction, capacity * args.factor
        print(f"capacity {capacity:.1f} req/s -> low rate {low:.1f}/s, overload rate {high:.1f}/s", flush=True)

        wall["baseline"] = time.time()
        base_rows, base_sched = await open_loop(session, load, t0, low, args.baseline_seconds, args.max_inflight)
        base_ok = [r for r in base_rows if r.ok]
        res["baseline"] = {**base_sched, "status": by_status(base_rows), "latency_ms": lat(base_ok),
                           "degraded": degraded_reasons(base_ok)}
        loadavg["overload_start"] = os.getloadavg()

        over_start = time.monotonic() - t0
        wall["overload"] = time.time()
        cpu0 = time.process_time()
        over_rows, over_sched = await open_loop(session, load, t0, high, args.overload_seconds, args.max_inflight)
        over_end = over_start + args.overload_seconds
        client_cpu = time.process_time() - cpu0
        client_wall = time.monotonic() - t0 - over_start
        wall["recovery"] = time.time()
        rec_start = time.monotonic() - t0
        loadavg["recovery_start"] = os.getloadavg()
        rec_rows, rec_sched = await open_loop(session, load, t0, low, args.recovery_seconds, args.max_inflight)

    accepted = [r for r in over_rows if r.ok]
    rejected = [r for r in over_rows if not r.ok]
    fast = [r for r in rejected if isinstance(r.status, int) and r.status in (429, 503)]
    res["overload"] = {
        **over_sched, "responses": len(over_rows), "accepted": len(accepted), "rejected": len(rejected),
        "accepted_rps": round(len(accepted) / args.overload_seconds, 1),
        "status": by_status(over_rows),
        "accepted_latency_ms": lat(accepted),
        "accepted_handler_ms": {"p50": pct([r.server_ms for r in accepted if r.server_ms], 50),
                                "p99": pct([r.server_ms for r in accepted if r.server_ms], 99)},
        "transport_errors": transport_errors(over_rows),
        "answered_after_deadline_plus_100ms": ({
            "all": sum(1 for r in over_rows if r.ms > args.deadline_ms + 100),
            "accepted_200": sum(1 for r in accepted if r.ms > args.deadline_ms + 100),
            "of": len(over_rows)} if args.deadline_ms else None),
        "client_cpu_share_of_one_core": round(client_cpu / max(client_wall, 1e-9), 2),
        "rejected_latency_ms": lat(rejected),
        "rejected_latency_ms_by_status": {k: lat([r for r in rejected if f"{r.status}:{r.code}" == k])
                                          for k in sorted({f"{r.status}:{r.code}" for r in rejected})},
        "fast_rejects_429_503_latency_ms": lat(fast),
        "degraded": degraded_reasons(accepted),
        "per_second": per_second_p99(over_rows, over_start, over_end),
    }
    base_p99 = res["baseline"]["latency_ms"]["p99"] or 0.0
    threshold = base_p99 * args.recovery_tolerance
    buckets = per_second_p99(rec_rows, rec_start, rec_start + args.recovery_seconds)
    back = None
    first_within = next((b["s"] for b in buckets if b["p99"] is not None and b["p99"] <= threshold), None)
    for i, b in enumerate(buckets):
        if all(x["p99"] is not None and x["p99"] <= threshold and x["ok"] == x["n"] for x in buckets[i:] if x["n"]):
            back = b["s"]
            break
    res["recovery"] = {
        **rec_sched, "status": by_status(rec_rows), "latency_ms": lat([r for r in rec_rows if r.ok]),
        "baseline_p99_ms": base_p99, "threshold_p99_ms": round(threshold, 1),
        "p99_back_to_baseline_after_s": (round(rec_start - over_end + back, 2) if back is not None else None),
        "first_second_within_threshold_after_s": (round(rec_start - over_end + first_within, 2)
                                                  if first_within is not None else None),
        "degraded": degraded_reasons([r for r in rec_rows if r.ok]),
        "latency_ms_primary": lat([r for r in rec_rows if r.ok and not r.degraded]),
        "latency_ms_fallback": lat([r for r in rec_rows if r.ok and r.degraded]),
        "transport_errors": transport_errors(rec_rows),
        "per_second": buckets,
    }
    wall["end"] = time.time()
    res["seconds_total"] = round(time.monotonic() - t0, 1)
    loadavg["end"] = os.getloadavg()
    res["host_loadavg_1_5_15"] = {k: [round(x, 2) for x in v] for k, v in loadavg.items()}
    return res


def server_side(log, wall: dict[str, float]) -> dict:
    """Entry-service access-log durations (second-resolution timestamps) of requests logged during the overload."""
    lines = [x for x in access_log(log) if x[1] == "/v1/classify"
             and int(wall["overload"]) + 1 <= x[0] < int(wall["recovery"])]
    out = {}
    for status in sorted({x[2] for x in lines}):
        ms = [x[3] for x in lines if x[2] == status]
        out[str(status)] = {"n": len(ms), "p50": pct(ms, 50), "p99": pct(ms, 99), "max": round(max(ms), 1)}
    return out


def summary(res: dict) -> str:
    c, b, o, r = res["capacity"], res["baseline"], res["overload"], res["recovery"]
    return "\n".join([
        f"overload drill, env knobs: {res['env']}; request deadline header: {res['deadline_ms']} ms; mix: {res['mix']}",
        f"  capacity (closed loop, {c['concurrency']} conc, {c['seconds']} s): {c['ok_rps']} req/s, "
        f"status {c['status']}, latency {c['latency_ms']}",
        f"  baseline at {b['target_rate']}/s: status {b['status']}, latency {b['latency_ms']}",
        f"  overload at {o['target_rate']}/s for {res['overload_seconds']} s: sent {o['sent']} "
        f"(achieved {o['achieved_send_rate']}/s, not sent at in-flight cap {o['not_sent_inflight_cap']}, "
        f"max schedule lag {o['max_schedule_lag_ms']} ms)",
        f"    accepted {o['accepted']} ({o['accepted_rps']}/s), rejected {o['rejected']}: {o['status']}",
        f"    accepted latency {o['accepted_latency_ms']} (inside the handler: {o['accepted_handler_ms']})",
        f"    answered later than deadline + 100 ms (client clock): {o['answered_after_deadline_plus_100ms']}",
        f"    rejected latency {o['rejected_latency_ms_by_status']}",
        f"    server-side (access log) ms by status: {o.get('server_side_ms_by_status')}",
        f"    degraded accepted answers: {o['degraded']}; transport errors: {o['transport_errors']}; "
        f"client CPU {o['client_cpu_share_of_one_core']} of one core",
        f"  recovery at {r['target_rate']}/s: status {r['status']}, latency {r['latency_ms']}, "
        f"degraded {r['degraded']}, transport errors {r['transport_errors']}",
        f"    recovery latency served by primary {r['latency_ms_primary']}, by fallback {r['latency_ms_fallback']}",
        f"    p99 back within {r['threshold_p99_ms']} ms (baseline p99 {r['baseline_p99_ms']} ms x tolerance) for good "
        f"{r['p99_back_to_baseline_after_s']} s after the overload ended (first 1-s bucket within it: "
        f"{r['first_second_within_threshold_after_s']} s; None = not within the recovery phase)",
        f"  host load average (1/5/15 min; 2 cores shared): {res['host_loadavg_1_5_15']}",
    ])


def main() -> None:
    ap = base_parser(__doc__, NAME)
    ap.add_argument("--mix", choices=("text", "mixed"), default="text")
    ap.add_argument("--factor", type=float, default=3.0, help="overload rate = factor x capacity")
    ap.add_argument("--capacity-concurrency", type=int, default=32)
    ap.add_argument("--capacity-seconds", type=float, default=10)
    ap.add_argument("--low-fraction", type=float, default=0.25, help="low rate = fraction x capacity")
    ap.add_argument("--baseline-seconds", type=float, default=10)
    ap.add_argument("--overload-seconds", type=float, default=60)
    ap.add_argument("--recovery-seconds", type=float, default=15)
    ap.add_argument("--max-inflight", type=int, default=2000, help="client-side cap on outstanding requests")
    ap.add_argument("--deadline-ms", type=int, default=2000, help="X-Request-Timeout-Ms on every request (0: none)")
    ap.add_argument("--recovery-tolerance", type=float, default=1.5, help="p99 <= tolerance x baseline p99")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra/overriding server env (repeatable)")
    ap.add_argument("--no-default-env", action="store_true", help="do not apply the drill's default knobs")
    args = ap.parse_args()
    for name in ("capacity_seconds", "baseline_seconds", "overload_seconds", "recovery_seconds"):
        setattr(args, name, min(getattr(args, name), 300))
    env = {} if args.no_default_env else dict(DEFAULT_ENV)
    env.update(kv.split("=", 1) for kv in args.env)
    print(f"server env knobs: {env}", flush=True)
    log = log_path(args, NAME)
    with Server(args.registry, env=env, log_path=log) as srv:
        ready_s = srv.wait_ready()
        res = asyncio.run(drill(srv.url, args))
    res["overload"]["server_side_ms_by_status"] = server_side(log, res.pop("_wall"))
    res = {"drill": NAME, "registry": str(args.registry), "server_ready_s": round(ready_s, 1), "server_log": str(log),
           "env": env, "deadline_ms": args.deadline_ms or None, "mix": args.mix,
           "overload_seconds": args.overload_seconds, "factor": args.factor, **res}
    print(summary(res))
    save(res, args.out)


if __name__ == "__main__":
    main()
