"""Drill: does overload keep its promise? Unloaded, at capacity, then open-loop at 3x capacity, with the standing-queue
control (admission.queue_control) off and on, each repeated, in one run.

    python -m scripts.drills.overload [--registry models/store] [--modes off,on] [--repeat 3] [--overload-seconds 30]
    python -m scripts.drills.overload --tiers 1x1 ...       # the same drill on the split tiers (overload_tiers.json)

Per round and mode, a fresh server (env knobs printed and saved; TRISERVE_ADMISSION__QUEUE_CONTROL=false|true), all on
/v1/classify (1-4 texts, model auto) unless --mix says otherwise:
  1. unloaded  - closed loop at concurrency 1 (--unloaded-seconds): p50/p99 of a lone request;
  2. capacity  - closed loop (--capacity-concurrency, --capacity-seconds): primary answers per second and p99;
  3. baseline  - open loop at the low rate (--low-fraction x capacity): the p99 recovery is judged against;
  4. overload  - open loop at --factor x capacity for --overload-seconds: arrivals are scheduled at fixed intervals
                 whatever the responses do, with at most --max-inflight requests outstanding (beyond that an arrival
                 is counted as not sent, so the drill stays bounded);
  5. recovery  - open loop at the low rate for --recovery-seconds.
The promise, per run: accepted p99 during the overload <= --max-p99-ratio (1.5) x the capacity p99, and goodput
(primary answers per second during the overload) >= --min-goodput-ratio (0.90) x capacity; the rest refused fast
(429/503 with Retry-After and an error code, never reaching the runner), no other 5xx. Counted as every benchmark
counts (scripts/drills/common.answer_kind): capacity, goodput and every latency are primary answers; a 200 that says
`degraded: true` (the fallback model answered, e.g. the overload spill of 'auto' traffic) is counted, timed and
explained apart (degraded_rps, degraded_ms, degraded reasons), never as goodput.
Reported per run and as the median over the rounds per mode (this 2-core host is shared: single runs are noisy); the
verdict is taken on the medians. Modes alternate order per round (off, on / on, off, ...) so that a drift of the host
is shared. --plot draws the per-second accepted p99 and goodput of each mode's last round.
The server runs with env knobs so that admission, not the per-address rate limit or the static per-deployment capacity
limit (access.deployment_rate_per_s, set for another host), does the refusing: every drill request comes from
127.0.0.1.
--tiers RxG (bare --tiers: 1x1) runs each round and mode on the split tiers instead (scripts/tiers.py: R runner
replicas behind haproxy, G gateway instances, haproxy in front of the gateways when G > 1), with the same env knobs on
both tiers and only the deployments the mix needs (text: intent; mixed: all). The queue control lives in the gateway,
so it applies unchanged; with G > 1 each gateway controls its own queue in front of the shared runner tier. The
server-side access-log durations are read from every gateway's log.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shlex
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np

from scripts.bench.load_mix import payloads
from scripts.bench.report import pyplot
from scripts.drills.common import (
    DEGRADED,
    OUT_DIR,
    PRIMARY,
    Row,
    access_log,
    assert_loopback,
    base_parser,
    by_kind,
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
from scripts.drills.ports import ReservedPort
from scripts.drills.server import ROOT, Server, pin_threads
from scripts.drills.starts import Attempt, StartOnce, Unavailable, check_answer, drill_main
from scripts.tiers import Backend, BalancerConfig, HAProxy, Tiers, TiersConfig, haproxy_binary

NAME = "overload"
DEFAULT_ENV = {
    # one client address sends everything: lift the per-address token bucket so admission decides
    "TRISERVE_ACCESS__RATE_PER_S": "1000000",
    "TRISERVE_ACCESS__BURST": "1000000",
    # the static per-deployment limit (429 over_capacity) is measured on another host: admission decides here
    "TRISERVE_ACCESS__CAPACITY_LIMITS": "false",
    # bounded per-slot queue: reject beyond 128 items in flight; route a share of 'auto' to the fallback above 64
    "TRISERVE_ADMISSION__MAX_INFLIGHT_ITEMS": "128",
    "TRISERVE_ADMISSION__OVERLOAD_QUEUE_ITEMS": "64",
}
MODE_ENV = {"off": {"TRISERVE_ADMISSION__QUEUE_CONTROL": "false"},
            "on": {"TRISERVE_ADMISSION__QUEUE_CONTROL": "true", "TRISERVE_ADMISSION__QUEUE_FRONT_DOOR": "true"},
            # the control in admission only: every refusal after the body is parsed and preprocessed
            "on_admission_only": {"TRISERVE_ADMISSION__QUEUE_CONTROL": "true",
                                  "TRISERVE_ADMISSION__QUEUE_FRONT_DOOR": "false"}}
MIDDLEWARE = ROOT / "services" / "http_edge.py"
FAST_REFUSALS = (429, 503)
MIX_DEPLOYMENTS: dict[str, tuple[str, ...]] = {"text": ("intent",), "mixed": ()}  # served on the tiers (): all


def tiers_spec(text: str) -> tuple[int, int]:
    """'RxG' -> (runner replicas, gateway instances), each >= 1."""
    try:
        runners, gateways = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--tiers takes RxG (runner replicas x gateways), e.g. 1x1, not "
                                         f"{text!r}") from None
    if runners < 1 or gateways < 1:
        raise argparse.ArgumentTypeError(f"--tiers {text}: need at least one runner replica and one gateway")
    return runners, gateways


def topology(args) -> str:
    return f"tiers {args.tiers[0]}x{args.tiers[1]}" if args.tiers else "single"


@dataclass
class Target:
    """What a round's drill runs against: where the load goes, how long it took to get ready, the gateway logs."""

    url: str
    ready_s: float
    logs: list[Path]
    info: dict = field(default_factory=dict)


def pin(args, service_pids: list[int]) -> None:
    """--pin: the service (every process and thread) on CPU 0, this load generator on CPU 1, so that generating 3x
    capacity does not take the CPU the service is measured with (on a 2-core host it otherwise takes a third of a
    core at ~500 req/s: client_cpu_share_of_one_core)."""
    if args.pin:
        pin_threads(service_pids, {0})
        pin_threads([os.getpid()], {1})


@contextmanager
def edge(args, port: int, log: Path) -> Iterator[HAProxy | None]:
    """--edge-limit on the single server: haproxy in front of it with that concurrency limit (as scripts/tiers.py
    puts in front of the gateways), its config and log next to the server's log; None without the option."""
    if not args.edge_limit:
        yield None
        return
    workdir = log.with_suffix("")
    workdir.mkdir(parents=True, exist_ok=True)
    with ReservedPort() as front:  # held until haproxy has stopped
        backend = Backend("gateways", front.number, (("server", port),), args.edge_limit, args.edge_queue_ms)
        proxy = HAProxy([backend], BalancerConfig(), workdir, workdir / "haproxy.log").start()
        try:
            yield proxy
        finally:
            proxy.stop()


@contextmanager
def serving(args, env: dict[str, str], log: Path) -> Iterator[Target]:
    """A fresh `bentoml serve` (`log` is its log), or with --tiers the split tiers with `env` on both tiers (their
    logs in the directory `log` without its suffix; the load goes to the gateway, or haproxy in front of them)."""
    if not args.tiers:
        with Server(args.registry, env=env, log_path=log) as srv, edge(args, srv.port, log) as proxy:
            ready = srv.wait_ready()
            if proxy:
                proxy.wait_up("gateways", ["server"])
            pin(args, srv.pids() + ([proxy.proc.pid] if proxy and proxy.proc else []))
            url = f"http://127.0.0.1:{proxy.backends[0].port}" if proxy else srv.url
            yield Target(url, ready, [log], {"server_log": str(log), "edge_limit": args.edge_limit})
        return
    runners, gateways = args.tiers
    cfg = TiersConfig(registry_dir=args.registry.resolve(), runners=runners, gateways=gateways,
                      gateway_lb=gateways > 1 or args.edge_limit > 0, deployments=MIX_DEPLOYMENTS[args.mix], env=env,
                      balancer=BalancerConfig(gateway_maxconn=args.edge_limit, gateway_queue_ms=args.edge_queue_ms),
                      log_dir=log.with_suffix(""))
    with Tiers(cfg) as tiers:
        pin(args, tiers.pids())
        info = {"tiers": {k: v for k, v in tiers.describe().items() if k not in ("haproxy_stats", "haproxy_config")},
                "deployments": list(cfg.deployments) or "all"}
        yield Target(tiers.url, tiers.timings["all_ready_s"], [g.log_path for g in tiers.gateways], info)


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
    """Per 1 s bucket of sent time, relative to `start`: requests, primary answers (ok) and their p50/p99, degraded
    answers."""
    out = []
    for s in range(int(np.ceil(end - start))):
        b = by_kind(r for r in rows if start + s <= r.sent < start + s + 1)
        ok = [r.ms for r in b[PRIMARY]]
        out.append({"s": s, "n": sum(len(v) for v in b.values()), "ok": len(ok), "degraded": len(b[DEGRADED]),
                    "p50": pct(ok, 50), "p99": pct(ok, 99)})
    return out


def promise(rows: list[Row], seconds: float) -> dict:
    """What the overload phase delivered: goodput (primary answers per second) and their tail, the degraded answers
    apart (the fallback model answered: not goodput), how refusals looked, what else failed."""
    kinds = by_kind(rows)
    refused = [r for r in rows if isinstance(r.status, int) and r.status in FAST_REFUSALS]
    fivexx = [r for r in rows if isinstance(r.status, int) and r.status >= 500]
    ms = [r.ms for r in kinds[PRIMARY]]
    return {"goodput_rps": round(len(ms) / seconds, 1),
            "degraded_rps": round(len(kinds[DEGRADED]) / seconds, 1),
            "accepted_ms": {"n": len(ms), "p50": pct(ms, 50), "p99": pct(ms, 99), "p999": pct(ms, 99.9),
                            "max": round(max(ms), 1) if ms else None},
            "degraded_ms": lat(kinds[DEGRADED]),
            "refused": len(refused), "refused_ms": lat(refused),
            "refused_with_retry_after_and_code": sum(1 for r in refused if r.code),
            "5xx": len(fivexx), "5xx_other_than_fast_refusals": sum(1 for r in fivexx if r.status != 503),
            "transport_errors": sum(1 for r in rows if not isinstance(r.status, int))}


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

        one = await closed_loop(session, load, t0, 1, args.unloaded_seconds, 5_000)
        res["unloaded"] = {"concurrency": 1, "status": by_status(one), "latency_ms": lat([r for r in one if r.primary]),
                           "degraded": degraded_reasons(one)}

        cap_rows = await closed_loop(session, load, t0, args.capacity_concurrency, args.capacity_seconds, 50_000)
        ok = [r for r in cap_rows if r.primary]
        span = max(r.done for r in cap_rows) - min(r.sent for r in cap_rows)
        capacity = len(ok) / span
        res["capacity"] = {"concurrency": args.capacity_concurrency, "seconds": round(span, 1),
                           "requests": len(cap_rows), "status": by_status(cap_rows), "ok_rps": round(capacity, 1),
                           "latency_ms": lat(ok), "degraded": degraded_reasons(cap_rows)}
        if capacity <= 0:
            raise SystemExit("no primary answer while measuring capacity")
        low, high = capacity * args.low_fraction, capacity * args.factor
        print(f"capacity {capacity:.1f} req/s -> low rate {low:.1f}/s, overload rate {high:.1f}/s", flush=True)

        wall["baseline"] = time.time()
        base_rows, base_sched = await open_loop(session, load, t0, low, args.baseline_seconds, args.max_inflight)
        res["baseline"] = {**base_sched, "status": by_status(base_rows),
                           "latency_ms": lat([r for r in base_rows if r.primary]),
                           "degraded": degraded_reasons(base_rows)}
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

    accepted = [r for r in over_rows if r.ok]  # answered with 200: primary or degraded
    primary = [r for r in accepted if r.primary]
    rejected = [r for r in over_rows if not r.ok]
    res["overload"] = {
        **over_sched, "responses": len(over_rows), "accepted": len(accepted), "primary": len(primary),
        "degraded_answers": len(accepted) - len(primary), "rejected": len(rejected),
        **promise(over_rows, args.overload_seconds),
        "status": by_status(over_rows),
        "accepted_handler_ms": {"p50": pct([r.server_ms for r in primary if r.server_ms], 50),
                                "p99": pct([r.server_ms for r in primary if r.server_ms], 99)},
        "transport_errors_by_kind": transport_errors(over_rows),
        "answered_after_deadline_plus_100ms": ({
            "all": sum(1 for r in over_rows if r.ms > args.deadline_ms + 100),
            "accepted_200": sum(1 for r in accepted if r.ms > args.deadline_ms + 100),
            "of": len(over_rows)} if args.deadline_ms else None),
        "client_cpu_share_of_one_core": round(client_cpu / max(client_wall, 1e-9), 2),
        "rejected_latency_ms_by_status": {k: lat([r for r in rejected if f"{r.status}:{r.code}" == k])
                                          for k in sorted({f"{r.status}:{r.code}" for r in rejected})},
        "degraded": degraded_reasons(accepted),
        "per_second": per_second_p99(over_rows, over_start, over_end),
    }
    cap_p99 = res["capacity"]["latency_ms"]["p99"]
    acc_p99 = res["overload"]["accepted_ms"]["p99"]
    res["ratios"] = {
        "accepted_p99_over_capacity_p99": round(acc_p99 / cap_p99, 2) if acc_p99 and cap_p99 else None,
        "goodput_over_capacity": round(res["overload"]["goodput_rps"] / capacity, 2)}
    res["ratios"]["pass"] = verdict(res["ratios"], args)
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
        **rec_sched, "status": by_status(rec_rows), "latency_ms": lat([r for r in rec_rows if r.primary]),
        "baseline_p99_ms": base_p99, "threshold_p99_ms": round(threshold, 1),
        "p99_back_to_baseline_after_s": (round(rec_start - over_end + back, 2) if back is not None else None),
        "first_second_within_threshold_after_s": (round(rec_start - over_end + first_within, 2)
                                                  if first_within is not None else None),
        "degraded": degraded_reasons(rec_rows),
        "latency_ms_primary": lat([r for r in rec_rows if r.primary]),
        "latency_ms_fallback": lat([r for r in rec_rows if r.kind == DEGRADED]),
        "transport_errors": transport_errors(rec_rows),
        "per_second": buckets,
    }
    wall["end"] = time.time()
    res["seconds_total"] = round(time.monotonic() - t0, 1)
    loadavg["end"] = os.getloadavg()
    res["host_loadavg_1_5_15"] = {k: [round(x, 2) for x in v] for k, v in loadavg.items()}
    return res


def verdict(ratios: dict, args) -> dict:
    p99, goodput = ratios["accepted_p99_over_capacity_p99"], ratios["goodput_over_capacity"]
    out = {"accepted_p99": p99 is not None and p99 <= args.max_p99_ratio,
           "goodput": goodput is not None and goodput >= args.min_goodput_ratio}
    out["both"] = out["accepted_p99"] and out["goodput"]
    return out


def server_side(logs: list[Path], wall: dict[str, float]) -> dict:
    """Entry-service access-log durations (second-resolution timestamps) of requests logged during the overload, over
    the logs of every gateway."""
    lines = [x for log in logs for x in access_log(log) if x[1] == "/v1/classify"
             and int(wall["overload"]) + 1 <= x[0] < int(wall["recovery"])]
    out = {}
    for status in sorted({x[2] for x in lines}):
        ms = [x[3] for x in lines if x[2] == status]
        out[str(status)] = {"n": len(ms), "p50": pct(ms, 50), "p99": pct(ms, 99), "max": round(max(ms), 1)}
    return out


# what the medians table holds: name -> path into one run's result
KEY_METRICS = {
    "unloaded_p50_ms": ("unloaded", "latency_ms", "p50"),
    "unloaded_p99_ms": ("unloaded", "latency_ms", "p99"),
    "capacity_rps": ("capacity", "ok_rps"),
    "capacity_p99_ms": ("capacity", "latency_ms", "p99"),
    "overload_goodput_rps": ("overload", "goodput_rps"),
    "overload_degraded_rps": ("overload", "degraded_rps"),
    "overload_accepted_p50_ms": ("overload", "accepted_ms", "p50"),
    "overload_accepted_p99_ms": ("overload", "accepted_ms", "p99"),
    "overload_accepted_p999_ms": ("overload", "accepted_ms", "p999"),
    "overload_refused_p50_ms": ("overload", "refused_ms", "p50"),
    "overload_refused_p99_ms": ("overload", "refused_ms", "p99"),
    "overload_5xx_other_than_fast_refusals": ("overload", "5xx_other_than_fast_refusals"),
    "accepted_p99_over_capacity_p99": ("ratios", "accepted_p99_over_capacity_p99"),
    "goodput_over_capacity": ("ratios", "goodput_over_capacity"),
    "recovery_p99_back_after_s": ("recovery", "p99_back_to_baseline_after_s"),
}


def _get(run: dict, path: tuple[str, ...]):
    value: object = run
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def medians(runs: list[dict]) -> dict:
    out = {}
    for name, path in KEY_METRICS.items():
        values = [v for v in (_get(r, path) for r in runs) if v is not None]
        out[name] = round(statistics.median(values), 2) if values else None
        out[name + "_range"] = [min(values), max(values)] if values else None
    return out


def summary(res: dict) -> str:
    c, o, r, u = res["capacity"], res["overload"], res["recovery"], res["unloaded"]
    ratios = res["ratios"]
    return "\n".join([
        f"[{res['topology']}, {res['mode']} round {res['round']}] unloaded (c=1): {u['latency_ms']}",
        f"  capacity (closed loop, {c['concurrency']} conc, {c['seconds']} s): {c['ok_rps']} req/s, "
        f"status {c['status']}, latency {c['latency_ms']}",
        f"  overload at {o['target_rate']}/s: sent {o['sent']} (achieved {o['achieved_send_rate']}/s, not sent at "
        f"in-flight cap {o['not_sent_inflight_cap']}, max schedule lag {o['max_schedule_lag_ms']} ms)",
        f"    goodput (primary answers) {o['goodput_rps']}/s, their latency {o['accepted_ms']}; degraded "
        f"{o['degraded_rps']}/s in {o['degraded_ms']}",
        f"    status {o['status']}; refused {o['refused']} in {o['refused_ms']}; 5xx other than fast refusals "
        f"{o['5xx_other_than_fast_refusals']}; degraded {o['degraded']}",
        f"    accepted p99 / capacity p99 = {ratios['accepted_p99_over_capacity_p99']}, goodput / capacity = "
        f"{ratios['goodput_over_capacity']} -> {ratios['pass']}",
        f"  recovery at {r['target_rate']}/s: status {r['status']}, latency {r['latency_ms']}, p99 back within "
        f"{r['threshold_p99_ms']} ms after {r['p99_back_to_baseline_after_s']} s",
        f"  host load average: {res['host_loadavg_1_5_15']}",
    ])


def plot(result: dict, out: Path) -> None:
    """Per-second accepted p99 and goodput during overload + recovery, last round of each mode."""
    plt = pyplot()
    if plt is None:
        return None

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    colors = {"off": "tab:red", "on": "tab:blue", "on_admission_only": "tab:orange"}
    for mode, block in result["modes"].items():
        run = block["runs"][-1]
        over = run["overload"]["per_second"]
        rec = run["recovery"]["per_second"]
        n_over = len(over)
        xs = [b["s"] for b in over] + [n_over + b["s"] for b in rec]
        p99 = [b["p99"] for b in over + rec]
        ok = [b["ok"] for b in over + rec]
        color = colors.get(mode)
        top.plot(xs, [v if v is not None else float("nan") for v in p99], color=color,
                 label=f"control {mode}: accepted p99 per second")
        top.axhline(run["capacity"]["latency_ms"]["p99"] * result["max_p99_ratio"], color=color, ls="--", lw=0.8,
                    label=f"{result['max_p99_ratio']} x capacity p99 ({mode} run)")
        bottom.plot(xs, ok, color=color, label=f"control {mode}: primary answers per second")
        bottom.axhline(run["capacity"]["ok_rps"] * result["min_goodput_ratio"], color=color, ls="--", lw=0.8,
                       label=f"{result['min_goodput_ratio']} x capacity ({mode} run)")
        top.axvline(n_over, color="grey", lw=0.8)
        bottom.axvline(n_over, color="grey", lw=0.8)
    top.set_ylabel("ms")
    top.set_yscale("log")
    top.set_title(f"overload drill ({result['topology']}): {result['factor']}x capacity open loop, then recovery "
                  "at the low rate (grey line)")
    top.legend(fontsize=7)
    bottom.set_ylabel("requests/s")
    bottom.set_xlabel("seconds since the overload started")
    bottom.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"saved {out}")


def run_once(args, mode: str, round_: int, env: dict[str, str]) -> dict:
    log = log_path(args, f"{NAME}-{mode}-{round_}")
    with serving(args, env, log) as target:
        res = asyncio.run(drill(target.url, args))
    res["overload"]["server_side_ms_by_status"] = server_side(target.logs, res.pop("_wall"))
    res = {"mode": mode, "round": round_, "topology": topology(args), "server_ready_s": round(target.ready_s, 1),
           **target.info, "env": env, **res}
    print(summary(res), flush=True)
    return res


def server_env(args) -> dict[str, str]:
    """The drill's knobs (DEFAULT_ENV unless --no-default-env; one ONNX Runtime thread with --pin; --env on top);
    each mode adds MODE_ENV[mode]."""
    env = {} if args.no_default_env else dict(DEFAULT_ENV)
    if args.pin:  # one core for the service: one ONNX Runtime thread per op, not one per core of the host
        env["TRISERVE_RUNNER__INTRA_OP_THREADS"] = "1"
    env.update(kv.split("=", 1) for kv in args.env)
    return env


def mode_order(modes: list[str], rounds: int) -> list[tuple[int, str]]:
    """(round, mode) in the order the drill starts its servers: modes alternate order per round."""
    return [(r, m) for r in range(rounds) for m in (modes if r % 2 == 0 else modes[::-1])]


STARTS = ("one `bentoml serve` per round and mode (--tiers: the split tiers; --edge-limit: haproxy in front), the "
          "modes in the drill's order (off, on, on, off, ...), with the drill's knobs")


@contextlib.contextmanager
def start_phase(args) -> Iterator[StartOnce]:
    """Start i is the drill's i-th server (serving(): the same topology and env as run_once), ready; one request of
    the drill's mix with its deadline header, answered by the primary."""
    if (args.tiers or args.edge_limit) and haproxy_binary() is None:
        raise Unavailable("haproxy is not installed: apt-get install -y haproxy")
    env = server_env(args)

    def once(attempt: Attempt) -> None:
        round_, mode = mode_order(args.modes, attempt.number)[attempt.number - 1]
        with serving(args, {**env, **MODE_ENV[mode]}, attempt.log("serve")) as target:
            attempt.ready_s[f"mode {mode}"] = target.ready_s
            load = Load(target.url, args.mix, args.deadline_ms or None, seed=attempt.number)
            path, body = load.next()
            attempt.checks.append(f"mode {mode} (round {round_ + 1}): "
                                  + check_answer(target.url, path, body, headers=load.headers))

    yield once


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = base_parser(__doc__, NAME)
    ap.set_defaults(out=None)  # overload.json, or overload_tiers.json with --tiers (see below)
    ap.add_argument("--tiers", type=tiers_spec, nargs="?", const=(1, 1), default=None, metavar="RxG",
                    help="run on the split tiers: R runner replicas, G gateways (bare --tiers: 1x1); default: one "
                         "`bentoml serve`")
    ap.add_argument("--edge-limit", type=int, default=0, metavar="N",
                    help="haproxy in front of the server (or of the gateways with --tiers) lets at most N requests per "
                         "server or gateway through "
                         "(the rest wait up to --edge-queue-ms, then haproxy answers 503 overloaded); 0: no limit")
    ap.add_argument("--edge-queue-ms", type=int, default=20)
    ap.add_argument("--pin", action="store_true", help="the service on CPU 0 (1 ONNX Runtime thread per op), this "
                    "load generator on CPU 1")
    ap.add_argument("--mix", choices=("text", "mixed"), default="text")
    ap.add_argument("--modes", default="off,on", help="queue control modes to run, comma-separated: "
                                                      + ", ".join(MODE_ENV))
    ap.add_argument("--repeat", type=int, default=1, help="rounds per mode (medians reported)")
    ap.add_argument("--factor", type=float, default=3.0, help="overload rate = factor x capacity")
    ap.add_argument("--unloaded-seconds", type=float, default=8)
    ap.add_argument("--capacity-concurrency", type=int, default=32)
    ap.add_argument("--capacity-seconds", type=float, default=10)
    ap.add_argument("--low-fraction", type=float, default=0.25, help="low rate = fraction x capacity")
    ap.add_argument("--baseline-seconds", type=float, default=10)
    ap.add_argument("--overload-seconds", type=float, default=30)
    ap.add_argument("--recovery-seconds", type=float, default=15)
    ap.add_argument("--max-inflight", type=int, default=2000, help="client-side cap on outstanding requests")
    ap.add_argument("--deadline-ms", type=int, default=2000, help="X-Request-Timeout-Ms on every request (0: none)")
    ap.add_argument("--recovery-tolerance", type=float, default=1.5, help="p99 <= tolerance x baseline p99")
    ap.add_argument("--max-p99-ratio", type=float, default=1.5, help="promise: accepted p99 <= this x capacity p99")
    ap.add_argument("--min-goodput-ratio", type=float, default=0.90, help="promise: goodput >= this x capacity")
    ap.add_argument("--plot", type=Path, default=None, help="PNG of the per-second p99 and goodput (default: --out "
                                                            "with .png; 'none' to skip)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra/overriding server env (repeatable)")
    ap.add_argument("--no-default-env", action="store_true", help="do not apply the drill's default knobs")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = OUT_DIR / (f"{NAME}_tiers.json" if args.tiers else f"{NAME}.json")
    for name in ("unloaded_seconds", "capacity_seconds", "baseline_seconds", "overload_seconds", "recovery_seconds"):
        setattr(args, name, min(getattr(args, name), 300))
    args.repeat = max(1, min(args.repeat, 10))
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODE_ENV for m in modes):
        raise SystemExit(f"--modes takes {', '.join(MODE_ENV)}")
    args.modes = modes
    return args


def main() -> None:
    args = parse_args()
    modes = args.modes
    if (args.tiers or args.edge_limit) and haproxy_binary() is None:
        raise SystemExit("haproxy is not installed: apt-get install -y haproxy")
    if args.starts:
        drill_main(NAME, args, start_phase)
        return
    env = server_env(args)
    print(f"{topology(args)}: server env knobs: {env}; modes {modes} x {args.repeat} rounds", flush=True)
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    started = time.time()
    for round_, mode in mode_order(modes, args.repeat):
        runs[mode].append(run_once(args, mode, round_, {**env, **MODE_ENV[mode]}))
    result: dict = {
        "drill": NAME, "command": "python -m scripts.drills.overload " + shlex.join(sys.argv[1:]),
        "topology": topology(args),
        "registry": str(args.registry), "env": env, "mode_env": {m: MODE_ENV[m] for m in modes},
        "deadline_ms": args.deadline_ms or None, "mix": args.mix, "factor": args.factor,
        "overload_seconds": args.overload_seconds, "rounds": args.repeat,
        "max_p99_ratio": args.max_p99_ratio, "min_goodput_ratio": args.min_goodput_ratio,
        # the front door (queue_control.shedding) acts only where the request middleware asks it
        "front_door_hook_in_middleware": "queue_control.shedding(" in MIDDLEWARE.read_text(),
        "minutes_total": round((time.time() - started) / 60, 1),
        "medians": {}, "modes": {}}
    for mode in modes:
        med = medians(runs[mode])
        med["pass"] = verdict({"accepted_p99_over_capacity_p99": med["accepted_p99_over_capacity_p99"],
                               "goodput_over_capacity": med["goodput_over_capacity"]}, args)
        result["medians"][mode] = med
        for run in runs[mode][:-1]:  # per-second detail only for the last round (the plot's)
            run["overload"].pop("per_second", None)
            run["recovery"].pop("per_second", None)
        result["modes"][mode] = {"runs": runs[mode]}
    print("medians over rounds:")
    for mode, med in result["medians"].items():
        print(f"  {mode}: " + ", ".join(f"{k} {v}" for k, v in med.items() if not k.endswith("_range")))
    save(result, args.out)
    if args.plot is None or str(args.plot).lower() != "none":  # (str(None) is "None": the default plots)
        plot(result, args.plot or args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
