"""Drill: SIGKILL the runner worker in the middle of closed-loop mixed load.

    python -m scripts.drills.kill_runner [--registry models/store] [--concurrency 16] [--seconds 35] [--kill-at 12]
    python -m scripts.drills.kill_runner --fallbacks gateway --concurrency 8 --seconds 60
        # -> docs/drills/kill_runner_fallbacks_gateway.json

Reports failed requests (by status and error code), time from the kill until requests succeed again, whether and
when a fallback answered (degraded responses), and whether BentoML restarted the runner by itself (PID change,
/readyz back to 200). Nothing here supervises the runner: the drill only observes. With `--fallbacks gateway`
(runner.fallbacks='gateway': fallbacks in the API worker, another failure domain) the side probes alternate 'auto'
and 'primary' requests and the drill checks issue 21's goals: 'auto' requests in flight at the kill answered within
1 s (p99), no 5xx for 'auto', 'primary' requests 503 + Retry-After during the outage, full recovery measured.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import time
from collections.abc import Iterator

import aiohttp
import numpy as np

from scripts.bench.load_mix import payloads
from scripts.drills.common import (
    OUT_DIR,
    Row,
    assert_loopback,
    base_parser,
    by_status,
    degraded_reasons,
    lat,
    log_path,
    post,
    save,
    text_body,
)
from scripts.drills.server import Server
from scripts.drills.starts import Attempt, StartCheckFailed, StartOnce, check_answer, drill_main, serve_once

NAME = "kill_runner"


async def drill(srv: Server, concurrency: int, seconds: float, kill_at: float, max_requests: int,
                probe_interval: float = 0.25, probe_deadline_ms: int = 2000, with_primary_probes: bool = False) -> dict:
    assert_loopback(srv.url)
    mix = payloads()
    rows: list[Row] = []
    probes: list[Row] = []
    primary_probes: list[Row] = []
    timeline: list[dict] = []  # changes of runner PIDs and /readyz
    events: dict = {}
    counter = iter(range(max_requests))
    t0 = time.monotonic()
    stop_at = t0 + seconds
    connector = aiohttp.TCPConnector(limit=concurrency + 4)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            for i in counter:
                if time.monotonic() > stop_at:
                    return
                path, body = mix[i % len(mix)]
                rows.append(await post(session, srv.url, path, body, t0, timeout=30))

        async def killer() -> None:
            await asyncio.sleep(kill_at)
            pids = srv.runner_pids()
            events["runner_pids_before"] = pids
            events["kill_s"] = round(time.monotonic() - t0, 3)
            for pid in pids:
                os.kill(pid, signal.SIGKILL)

        async def monitor() -> None:
            last = None
            while time.monotonic() < stop_at + 2:
                pids = srv.runner_pids()
                ready: int | str  # the status, or the failure's name
                try:
                    async with session.get(srv.url + "/readyz", timeout=aiohttp.ClientTimeout(total=2)) as r:
                        ready = r.status
                except Exception as exc:  # noqa: BLE001  # a failed probe is a state of the timeline
                    ready = type(exc).__name__
                state = (tuple(pids), ready)
                if state != last:
                    timeline.append({"t": round(time.monotonic() - t0, 2), "runner_pids": pids, "readyz": ready})
                    last = state
                await asyncio.sleep(0.2)

        async def prober() -> None:
            """Open-loop side stream: a short-deadline text request every probe_interval, whatever the load does,
            so arrivals during the outage are seen (the closed loop itself stalls when its requests hang)."""
            if probe_interval <= 0:
                return
            rng = random.Random(1)
            tasks: list[asyncio.Task[Row]] = []
            primary_tasks: list[asyncio.Task[Row]] = []
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as own:
                for i in range(int(seconds / probe_interval)):
                    if time.monotonic() > stop_at:
                        break
                    primary = with_primary_probes and i % 2 == 1
                    (primary_tasks if primary else tasks).append(asyncio.create_task(post(
                        own, srv.url, "/v1/classify", text_body(rng, model="primary" if primary else "auto"), t0,
                        headers={"X-Request-Timeout-Ms": str(probe_deadline_ms)}, timeout=30)))
                    await asyncio.sleep(probe_interval)
                probes.extend(await asyncio.gather(*tasks))
                primary_probes.extend(await asyncio.gather(*primary_tasks))

        mon = asyncio.create_task(monitor())
        await asyncio.gather(killer(), prober(), *(worker() for _ in range(concurrency)))
        await mon
    res = analyse(rows, timeline, events, time.monotonic() - t0, concurrency)
    if probe_interval > 0:
        res["probes"] = probe_report(probes, events.get("kill_s"), res, probe_interval, probe_deadline_ms)
    if with_primary_probes:
        res["primary_probes"] = probe_report(primary_probes, events.get("kill_s"), res, probe_interval,
                                             probe_deadline_ms)
        res["checks"] = fallback_checks(rows, probes, primary_probes, res)
    return res


def fallback_checks(rows: list[Row], probes: list[Row], primary_probes: list[Row], res: dict) -> dict:
    """Issue 21's goals for fallbacks outside the runner's failure domain (every closed-loop request is 'auto')."""
    kill = res["kill_at_s"]
    in_flight = [r for r in rows + probes if kill is not None and r.sent < kill <= r.done]
    auto_after = [r for r in rows + probes if kill is not None and r.done >= kill]
    # the primary's outage: from the kill until a 'primary' probe sent after it is answered again (the runner is back)
    back = min((r.sent for r in primary_probes if kill is not None and r.sent > kill and r.ok), default=None)
    outage_end = back if back is not None else res["seconds"]
    primary_outage = [r for r in primary_probes if kill is not None and kill < r.sent < outage_end]
    # how long after the kill the requests that were in flight got their answer (their queueing before it is the
    # load's, not the outage's)
    after_kill_ms = sorted((r.done - kill) * 1000 for r in in_flight) if kill is not None else []
    p99 = round(float(np.percentile(after_kill_ms, 99)), 1) if after_kill_ms else None
    return {
        "auto_in_flight_at_kill": len(in_flight),
        "auto_in_flight_answered_ms_after_kill_p99": p99,
        "auto_in_flight_answered_within_1s": bool(in_flight) and p99 is not None and p99 <= 1000
        and all(r.ok for r in in_flight),
        "auto_5xx_after_kill": sum(1 for r in auto_after if isinstance(r.status, int) and r.status >= 500),
        "auto_zero_5xx": not any(isinstance(r.status, int) and r.status >= 500 for r in auto_after),
        "primary_back_after_kill_s": round(back - kill, 3) if back is not None and kill is not None else None,
        "primary_during_outage": by_status(primary_outage),
        "primary_refused_503_during_outage": bool(primary_outage) and all(
            r.status == 503 for r in primary_outage),  # every 503 of the service carries Retry-After
        "recovered": res["time_to_recovery_s"] is not None and res["latency_ms_after_recovery"]["n"] > 0,
    }


def probe_report(probes: list[Row], kill: float | None, res: dict, interval: float, deadline_ms: int) -> dict:
    """What a new arrival with a short deadline saw before, during and after the outage."""
    rec = res["time_to_recovery_s"]
    end = kill + rec if kill is not None and rec is not None else None
    during = [p for p in probes if kill is not None and p.sent >= kill and (end is None or p.sent < end)]
    after = [p for p in probes if end is not None and p.sent >= end]
    before = [p for p in probes if kill is None or p.sent < kill]
    return {"interval_s": interval, "deadline_ms": deadline_ms, "n": len(probes),
            "before_kill": {"status": by_status(before), "latency_ms": lat(before)},
            "during_outage": {"status": by_status(during), "latency_ms": lat(during),
                              "degraded": degraded_reasons(during)},
            "after_recovery": {"status": by_status(after), "latency_ms": lat(after)}}


def analyse(rows: list[Row], timeline: list[dict], events: dict, elapsed: float, concurrency: int) -> dict:
    kill = events.get("kill_s")
    before = [r for r in rows if kill is None or r.done < kill]
    after = [r for r in rows if kill is not None and r.done >= kill]
    failed = [r for r in after if not r.ok]
    last_fail = max((r.done for r in failed), default=None)
    first_ok_sent_after = min((r.done for r in after if r.ok and kill is not None and r.sent >= kill), default=None)
    recovered = (min((r.done for r in after if r.ok and r.done > last_fail), default=None)
                 if last_fail is not None else first_ok_sent_after)
    in_flight = [r for r in rows if kill is not None and r.sent < kill <= r.done]
    pids_before = events.get("runner_pids_before", [])
    restart = next((e for e in timeline if kill is not None and e["t"] >= kill and e["runner_pids"]
                    and not set(e["runner_pids"]) & set(pids_before)), None)
    gone = next((e for e in timeline if kill is not None and e["t"] >= kill and not e["runner_pids"]), None)
    ready_again = next((e for e in timeline if kill is not None and e["t"] >= kill and e["readyz"] == 200
                        and any(x["readyz"] != 200 for x in timeline if kill <= x["t"] < e["t"])), None)
    degraded = [r for r in after if r.ok and r.degraded]
    buckets: dict[int, dict] = {}
    for r in rows:
        b = buckets.setdefault(int(r.done), {"t": int(r.done), "ok": 0, "failed": 0, "degraded": 0})
        b["ok" if r.ok else "failed"] += 1
        b["degraded"] += bool(r.ok and r.degraded)

    def rel(t):
        return None if t is None or kill is None else round(t - kill, 3)

    return {
        "concurrency": concurrency, "seconds": round(elapsed, 1), "requests": len(rows),
        "kill_at_s": kill, "runner_pids_before": pids_before,
        "status_all": by_status(rows), "status_before_kill": by_status(before), "status_after_kill": by_status(after),
        "failed_after_kill": len(failed),
        "failed_by_path": {p: sum(1 for r in failed if r.path == p) for p in sorted({r.path for r in failed})},
        "in_flight_at_kill": {"n": len(in_flight), "status": by_status(in_flight), "latency_ms": lat(in_flight)},
        "first_failure_after_kill_s": rel(min((r.done for r in failed), default=None)),
        "last_failure_after_kill_s": rel(last_fail),
        "first_success_sent_after_kill_s": rel(first_ok_sent_after),
        "time_to_recovery_s": rel(recovered),
        "degraded_after_kill": {"n": len(degraded), "reasons": degraded_reasons(degraded),
                                "first_s": rel(min((r.done for r in degraded), default=None))},
        "degraded_all": degraded_reasons(rows),
        "runner_restarted_by_bentoml": restart is not None,
        "runner_pids_after": restart["runner_pids"] if restart else None,
        "runner_gone_seen_s": rel(gone["t"]) if gone else None,
        "new_runner_pid_seen_s": rel(restart["t"]) if restart else None,
        "readyz_200_again_s": rel(ready_again["t"]) if ready_again else None,
        "latency_ms_before_kill": lat([r for r in before if r.ok]),
        "latency_ms_after_recovery": lat([r for r in after if r.ok and recovered is not None and r.sent > recovered]),
        "timeline": timeline,
        "per_second": [buckets[k] for k in sorted(buckets)],
    }


def summary(res: dict) -> str:
    lines = [
        f"kill_runner: {res['requests']} requests in {res['seconds']} s at concurrency {res['concurrency']}; "
        f"SIGKILL runner {res['runner_pids_before']} at t={res['kill_at_s']} s",
        f"  status before kill: {res['status_before_kill']}",
        f"  status after kill:  {res['status_after_kill']}  (failed: {res['failed_after_kill']}, "
        f"by path {res['failed_by_path']})",
        f"  in flight at kill: {res['in_flight_at_kill']['status']}, max latency "
        f"{res['in_flight_at_kill']['latency_ms']['max']} ms",
        f"  failures from +{res['first_failure_after_kill_s']} s to +{res['last_failure_after_kill_s']} s; "
        f"time to recovery {res['time_to_recovery_s']} s (first success of a request sent after the kill: "
        f"+{res['first_success_sent_after_kill_s']} s)",
        f"  degraded (fallback) answers after kill: {res['degraded_after_kill']}",
        f"  runner restarted by BentoML: {res['runner_restarted_by_bentoml']} "
        f"(new PID {res['runner_pids_after']} seen at +{res['new_runner_pid_seen_s']} s; "
        f"/readyz 200 again at +{res['readyz_200_again_s']} s)",
        f"  latency ok before kill {res['latency_ms_before_kill']}, after recovery {res['latency_ms_after_recovery']}",
    ]
    pr = res.get("probes")
    if pr:
        lines.append(f"  side probes (/v1/classify every {pr['interval_s']} s, deadline {pr['deadline_ms']} ms): "
                     f"before {pr['before_kill']['status']}; during outage {pr['during_outage']['status']} "
                     f"(latency {pr['during_outage']['latency_ms']}); after {pr['after_recovery']['status']}")
    if not res["runner_restarted_by_bentoml"]:
        lines.append("  !! BentoML did NOT restart the runner worker within the drill")
    return "\n".join(lines)


STARTS = "one `bentoml serve` (runner.fallbacks as --fallbacks says; default runner)"


def server_env(args) -> dict[str, str]:
    return {"TRISERVE_RUNNER__FALLBACKS": args.fallbacks}


@contextlib.contextmanager
def start_phase(args) -> Iterator[StartOnce]:
    """The drill's server, ready, with runner workers to kill; one 'auto' text request answered by the primary."""
    def once(attempt: Attempt) -> None:
        def check(srv: Server) -> list[str]:
            pids = srv.runner_pids()
            if not pids:
                raise StartCheckFailed(f"no runner worker under the server: {srv.workers()}")
            return [check_answer(srv.url, "/v1/classify", text_body(random.Random(attempt.number))),
                    f"runner workers {len(pids)}"]

        serve_once(attempt, args.registry, server_env(args), "serve", check)

    yield once


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = base_parser(__doc__, NAME)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=35, help="load duration (bounded)")
    ap.add_argument("--kill-at", type=float, default=12, help="seconds into the load when the runner is killed")
    ap.add_argument("--max-requests", type=int, default=20_000)
    ap.add_argument("--probe-interval", type=float, default=0.25, help="side-probe spacing (open loop; 0 = no probes)")
    ap.add_argument("--probe-deadline-ms", type=int, default=2000, help="X-Request-Timeout-Ms of side probes")
    ap.add_argument("--fallbacks", choices=("runner", "gateway"), default="runner",
                    help="runner.fallbacks: 'gateway' hosts the fallbacks in the API worker (another failure domain)")
    args = ap.parse_args(argv)
    if args.fallbacks == "gateway" and args.out == OUT_DIR / f"{NAME}.json":  # the default: keep kill_runner.json
        args.out = OUT_DIR / f"{NAME}_fallbacks_gateway.json"
    return args


def main() -> None:
    args = parse_args()
    if args.starts:
        drill_main(NAME, args, start_phase)
        return
    probe_interval = args.probe_interval if args.probe_interval <= 0 else max(args.probe_interval, 0.05)
    log = log_path(args, NAME)
    with Server(args.registry, env=server_env(args), log_path=log) as srv:
        ready_s = srv.wait_ready()
        res = asyncio.run(drill(srv, args.concurrency, min(args.seconds, 120), args.kill_at, args.max_requests,
                               probe_interval, args.probe_deadline_ms, with_primary_probes=args.fallbacks == "gateway"))
        res["runner_pids_at_end"] = srv.runner_pids()
    res = {"drill": NAME, "registry": str(args.registry), "server_ready_s": round(ready_s, 1),
           "server_log": str(log), "fallbacks": args.fallbacks, **res}
    print(summary(res))
    for name, value in res.get("checks", {}).items():
        print(f"  check {name}: {value}")
    save(res, args.out)


if __name__ == "__main__":
    main()
