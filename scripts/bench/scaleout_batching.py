"""Cross-caller batching when the gateway tier scales out: runner batch sizes and throughput with 1, 2 and 4 API
workers and with two gateway instances, for both batching modes, at the same offered load.

    python -m scripts.bench.scaleout_batching          # 3 rounds x 8 cells, ~25 min; docs/bench/scaleout_batching.*
    python -m scripts.bench.scaleout_batching --rounds 1 --seconds 8 --out /tmp/sb   # quick look

The tiers run apart (scripts/tiers.py): one runner replica (deployment `intent` only) behind haproxy, and the gateway
tier in front of it as
    1w, 2w, 4w  one gateway instance with TRISERVE_GATEWAY__WORKERS = 1, 2, 4
    2gw         two gateway instances of 1 worker each behind a second haproxy frontend
each with TRISERVE_RUNNER__BATCHING = gateway (each API worker coalesces the requests it holds into one runner call;
the default) and runner (one runner call per request; BentoML's adaptive dispatcher merges the calls in the runner,
whoever sent them). Per cell, after a short warm-up, two loads of one-text /v1/classify requests (bounded in count
and time, loopback only; a new connection per request, as from many independent clients, so every API worker gets
its share: with keep-alive the few connections of one load generator stay with the workers that accepted them):
    closed loop  --concurrency clients (the same offered load for every cell): throughput, latency, batch sizes
    open loop    --rate arrivals per second (below every cell's capacity): latency and batch sizes at equal rate
Runner batches are read from the runner: its triserve_runner_batch_size histogram (/metrics, deltas over the load)
and its per-batch JSON lines (logger triserve.runner.batches) for the distribution. Cells are interleaved across
rounds (every cell once per round); the tables give medians over rounds with the range. Throughput and latency count
primary answers (scripts/drills/loadgen.phase): a 200 that says `degraded: true` (a fallback model answered) is
counted apart, never as throughput.

Goal (issue 21 part 2): mean runner batch with 4 workers >= 80% of the 1-worker mean, throughput not lower.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import psutil

from scripts.bench.harness import RAISED_LIMITS
from scripts.bench.report import pyplot, write_report
from scripts.drills.common import TEXTS
from scripts.drills.loadgen import closed_loop, open_loop, phase
from scripts.drills.server import ENTRY_SERVICE, ROOT, pin_threads
from scripts.tiers import Tiers, TiersConfig, haproxy_binary, runner_batches

PATH = "/v1/classify"
SLOT = "intent"
TOPOLOGIES = {"1w": (1, 1), "2w": (1, 2), "4w": (1, 4), "2gw": (2, 1)}  # name: (gateway instances, workers each)
MODES = ("gateway", "runner")
BUCKETS = (1, 2, 4, 8, 16, 32, 64)  # distribution: sizes <= each bound (and above the previous)
GOAL_SHARE = 0.8


def bodies(words: int = 0) -> list[dict]:
    """One-text requests; with `words`, each text runs on through the next ones until it has that many words (a
    runner-bound load: the model's work per item grows with the tokens, the gateway's hardly)."""
    if not words:
        return [{"texts": [t], "top_k": 3} for t in TEXTS]
    pool = " ".join(TEXTS * (1 + words // 40)).split()
    return [{"texts": [" ".join((pool[k:] + pool)[:words])], "top_k": 3} for k in range(len(TEXTS))]


def batch_lines(log: Path, start: int) -> tuple[list[int], int]:
    """Sizes of the runner's batch lines for SLOT written after byte `start` of its log; and the new end."""
    sizes = []
    with open(log, "rb") as fh:
        fh.seek(start)
        data = fh.read()
    for line in data.decode(errors="replace").splitlines():
        i = line.find('{"event": "batch"')
        if i < 0:
            continue
        try:
            rec = json.loads(line[i:])
        except ValueError:
            continue
        if rec.get("slot") == SLOT:
            sizes.append(int(rec["size"]))
    return sizes, start + len(data)


def distribution(sizes: list[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    lo = 0
    for hi in BUCKETS:
        out[f"{lo + 1}-{hi}" if hi > lo + 1 else str(hi)] = sum(lo < s <= hi for s in sizes)
        lo = hi
    out[f">{BUCKETS[-1]}"] = sum(s > BUCKETS[-1] for s in sizes)
    return out


async def measure(tiers: Tiers, kind: str, args) -> dict:
    """One load against the cell's entry point; the runner's batches over exactly that load."""
    runner = tiers.runners[0]
    before = runner_batches(runner.url)
    pos = runner.log_path.stat().st_size
    t0 = time.monotonic()
    cpu0 = worker_cpu(tiers)
    if kind == "closed":
        res = await closed_loop(tiers.url, PATH, bodies(args.words), args.concurrency, args.seconds,
                                int(args.seconds * 2000), t0, fresh_connections=True)
    else:
        res = await open_loop([tiers.url], PATH, bodies(args.words), args.rate, args.seconds,
                              int(args.rate * args.seconds), t0, fresh_connections=True)
    elapsed = time.monotonic() - t0
    cpu1 = worker_cpu(tiers)
    busy = {k: round(cpu1[k] - cpu0.get(k, 0.0), 2) for k in cpu1}
    await asyncio.sleep(0.5)  # the runner's last log lines
    after = runner_batches(runner.url)
    sizes, _ = batch_lines(runner.log_path, pos)
    items = after.get(f"{SLOT}:items", 0) - before.get(f"{SLOT}:items", 0)
    calls = after.get(f"{SLOT}:calls", 0) - before.get(f"{SLOT}:calls", 0)
    delta = {k: after.get(f"{SLOT}:{k}", 0) - before.get(f"{SLOT}:{k}", 0)
             for k in ("merged", "computations", "gather_s", "gathers")}
    p = phase(res.rows, None, None)
    return {"kind": kind, "seconds": round(elapsed, 2), "requests": p["requests"], "ok": p["ok"],
            "degraded": p["degraded"], "failed": p["failed"], "status": p["status"], "skipped_by_client": res.skipped,
            "throughput_rps": round(p["ok"] / elapsed, 1), "latency_ms": p["latency_ok_ms"],
            "runner_items": items, "runner_batches": calls,
            "mean_batch": round(items / calls, 2) if calls else None,
            "calls_per_computation": (round(delta["merged"] / delta["computations"], 2)
                                      if delta["computations"] else None),
            "gathers": int(delta["gathers"]),
            "mean_gather_ms": round(1000 * delta["gather_s"] / delta["gathers"], 2) if delta["gathers"] else None,
            "log_batches": len(sizes), "log_mean_batch": round(statistics.mean(sizes), 2) if sizes else None,
            "log_p50_batch": statistics.median(sizes) if sizes else None, "distribution": distribution(sizes),
            "gateway_worker_cpu_s": busy,
            "busiest_worker_share": round(max(busy.values()) / sum(busy.values()), 3) if sum(busy.values()) else None}


def worker_cpu(tiers: Tiers) -> dict[str, float]:
    """CPU seconds so far of every gateway API worker (how evenly the load reached them)."""
    out = {}
    for g in tiers.gateways:
        for pid in g.workers().get(ENTRY_SERVICE, []):
            try:
                t = psutil.Process(pid).cpu_times()
            except psutil.NoSuchProcess:
                continue
            out[f"{g.name}:{pid}"] = t.user + t.system
    return out


async def cell(mode: str, topo: str, args) -> dict:
    instances, workers = TOPOLOGIES[topo]
    env = {**RAISED_LIMITS, "TRISERVE_RUNNER__BATCHING": mode, "TRISERVE_RUNNER__SPIN_WAIT": str(args.spin).lower(),
           **({"TRISERVE_RUNNER__INTRA_OP_THREADS": "1"} if args.pin else {}),
           "TRISERVE_GATEWAY__BATCH_INFLIGHT": str(args.batch_inflight)}
    cfg = TiersConfig(registry_dir=args.registry.resolve(), runners=1, gateways=instances, gateway_lb=instances > 1,
                      deployments=(SLOT,), env=env, gateway_env={"TRISERVE_GATEWAY__WORKERS": str(workers)},
                      log_dir=args.log_dir / f"{mode}_{topo}" if args.log_dir else None)
    with Tiers(cfg) as tiers:
        ready = tiers.timings["all_ready_s"]
        if args.pin:
            pin_cores(tiers)
        await closed_loop(tiers.url, PATH, bodies(args.words), args.concurrency, args.warmup, int(args.warmup * 2000),
                          time.monotonic())
        closed = await measure(tiers, "closed", args)
        opened = await measure(tiers, "open", args)
    return {"mode": mode, "topology": topo, "gateway_instances": instances, "workers_per_instance": workers,
            "ready_s": ready, "closed": closed, "open": opened}


def pin_cores(tiers: Tiers) -> None:
    """--pin: the runner on CPU 0, everything else (gateway tier, haproxy, this load generator) on CPU 1. The gateway
    tier then has a core of its own, as on a deployment where the runner runs on its own node, and the runner's
    throughput depends on its batches, not on how much CPU the API workers take from it."""
    runner = set(tiers.runners[0].pids())
    pin_threads(runner, {0})
    pin_threads([pid for pid in tiers.pids() if pid not in runner] + [os.getpid()], {1})


def med(values: list[float]) -> dict:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None}
    return {"median": round(statistics.median(vals), 2), "min": round(min(vals), 2), "max": round(max(vals), 2)}


def aggregate(cells: list[dict]) -> dict:
    out: dict = {}
    for mode in MODES:
        for topo in TOPOLOGIES:
            cs = [c for c in cells if c["mode"] == mode and c["topology"] == topo]
            if not cs:
                continue
            agg: dict = {}
            for kind in ("closed", "open"):
                ms = [c[kind] for c in cs]
                dist: Counter = Counter()
                for m in ms:
                    dist.update(m["distribution"])
                agg[kind] = {"mean_batch": med([m["mean_batch"] for m in ms]),
                             "throughput_rps": med([m["throughput_rps"] for m in ms]),
                             "p50_ms": med([m["latency_ms"]["p50"] for m in ms]),
                             "p99_ms": med([m["latency_ms"]["p99"] for m in ms]),
                             "degraded": sum(m.get("degraded", 0) for m in ms),
                             "failed": sum(m.get("failed", m["requests"] - m["ok"]) for m in ms),
                             "busiest_worker_share": med([m["busiest_worker_share"] for m in ms]),
                             "distribution": dict(dist)}
            out[f"{mode}/{topo}"] = agg
    return out


def goals(agg: dict) -> dict:
    out = {}
    for mode in MODES:
        one, four = agg.get(f"{mode}/1w"), agg.get(f"{mode}/4w")
        if not one or not four:
            continue
        b1, b4 = one["closed"]["mean_batch"]["median"], four["closed"]["mean_batch"]["median"]
        t1, t4 = one["closed"]["throughput_rps"]["median"], four["closed"]["throughput_rps"]["median"]
        share = round(b4 / b1, 3) if b1 and b4 else None
        out[mode] = {"mean_batch_1w": b1, "mean_batch_4w": b4, "batch_share_4w_of_1w": share,
                     "batch_goal_met": share is not None and share >= GOAL_SHARE,
                     "throughput_1w": t1, "throughput_4w": t4,
                     "throughput_ratio_4w_of_1w": round(t4 / t1, 3) if t1 and t4 else None,
                     "throughput_goal_met": bool(t1 and t4 and t4 >= t1)}
    return out


def fmt(m: dict) -> str:
    if m["median"] is None:
        return "-"
    return f"{m['median']:g} ({m['min']:g}-{m['max']:g})"


def to_markdown(res: dict) -> str:
    L = [f"# Cross-caller batching with the gateway tier scaled out ({res['started_utc']})", "",
         f"Command: `{res['command']}`", "", res["setup"], "",
         f"Closed loop, {res['concurrency']} clients (same offered load everywhere); medians over {res['rounds']} "
         "rounds (range). Mean batch = items / runner batches of the `intent` slot (runner histogram deltas).", "",
         "Throughput and latency: primary answers; degraded answers (a fallback model answered) apart.", "",
         "| batching | gateway tier | mean runner batch | throughput req/s | p50 ms | p99 ms | degraded | failed | "
         "busiest API worker's CPU share |", "|---|---|---|---|---|---|---|---|---|"]
    for key, a in res["aggregate"].items():
        mode, topo = key.split("/")
        c = a["closed"]
        L.append(f"| {mode} | {topo} | {fmt(c['mean_batch'])} | {fmt(c['throughput_rps'])} | {fmt(c['p50_ms'])} | "
                 f"{fmt(c['p99_ms'])} | {c.get('degraded', 'n/a')} | {c['failed']} | "
                 f"{fmt(c['busiest_worker_share'])} |")
    L += ["", f"Open loop, {res['rate']} arrivals/s (below every cell's capacity): equal rate, so throughput = rate.",
          "", "| batching | gateway tier | mean runner batch | p50 ms | p99 ms | degraded | failed |",
          "|---|---|---|---|---|---|---|"]
    for key, a in res["aggregate"].items():
        mode, topo = key.split("/")
        o = a["open"]
        L.append(f"| {mode} | {topo} | {fmt(o['mean_batch'])} | {fmt(o['p50_ms'])} | {fmt(o['p99_ms'])} | "
                 f"{o.get('degraded', 'n/a')} | {o['failed']} |")
    L += ["", "Runner batch-size distribution, closed loop, all rounds (batches per size range):", "",
          "| batching | gateway tier | " + " | ".join(next(iter(res["aggregate"].values()))["closed"]["distribution"])
          + " |", "|---|---|" + "---|" * len(BUCKETS + (0,))]
    for key, a in res["aggregate"].items():
        mode, topo = key.split("/")
        L.append(f"| {mode} | {topo} | " + " | ".join(str(v) for v in a["closed"]["distribution"].values()) + " |")
    L += ["", f"Goal: mean runner batch with 4 workers >= {GOAL_SHARE:.0%} of the 1-worker mean, throughput not "
              "lower (closed loop):", ""]
    for mode, g in res["goals"].items():
        L.append(f"- `{mode}`: 4w/1w mean batch {g['mean_batch_4w']} / {g['mean_batch_1w']} = "
                 f"**{g['batch_share_4w_of_1w']}** ({'met' if g['batch_goal_met'] else 'MISSED'}); throughput "
                 f"{g['throughput_4w']} / {g['throughput_1w']} req/s = **{g['throughput_ratio_4w_of_1w']}** "
                 f"({'met' if g['throughput_goal_met'] else 'MISSED'})")
    if res.get("plot"):
        L += ["", f"![batch sizes and throughput]({Path(res['plot']).name})"]
    L += ["", "What the numbers mean and what would fix a missed goal: `scaleout_batching_reading.md`."]
    return "\n".join(L) + "\n"


def plot(res: dict, out: Path) -> str | None:
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    topos = list(TOPOLOGIES)
    width = 0.38
    for i, mode in enumerate(MODES):
        xs = [k + (i - 0.5) * width for k in range(len(topos))]
        for ax, metric, kind in ((axes[0], "mean_batch", "closed"), (axes[1], "throughput_rps", "closed"),
                                 (axes[2], "mean_batch", "open")):
            vals = [res["aggregate"].get(f"{mode}/{t}", {}).get(kind, {}).get(metric, {}) for t in topos]
            med_ = [v.get("median") or 0 for v in vals]
            err = [[m - (v.get("min") or m) for m, v in zip(med_, vals)], [(v.get("max") or m) - m
                                                                         for m, v in zip(med_, vals)]]
            ax.bar(xs, med_, width=width, yerr=err, capsize=3, label=f"batching={mode}")
    for ax, title in zip(axes, (f"mean runner batch, closed loop c={res['concurrency']}",
                                f"throughput req/s, closed loop c={res['concurrency']}",
                                f"mean runner batch, open loop {res['rate']}/s")):
        ax.set_xticks(range(len(topos)))
        ax.set_xticklabels(topos)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle("gateway tier: 1w / 2w / 4w = one gateway with 1 / 2 / 4 API workers; 2gw = two gateways of 1 worker; "
                 "one runner replica", fontsize=10)
    fig.tight_layout()
    path = out.with_name(out.name + ".png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


async def run(args) -> dict:
    res: dict = {"command": " ".join(["python -m scripts.bench.scaleout_batching", *args.argv]),
                 "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rounds": args.rounds,
                 "concurrency": args.concurrency, "rate": args.rate, "seconds": args.seconds,
                 "setup": (f"One runner replica (deployment intent, runner.spin_wait={args.spin}"
                           f"{', pinned to CPU 0, the rest on CPU 1' if args.pin else ''}) behind haproxy; "
                           f"gateway.batch_inflight={args.batch_inflight}; texts of "
                           f"{args.words or '2-7'} words; the "
                           "gateway tier in front of it (scripts/tiers.py); one-text /v1/classify; client-side rate "
                           "and capacity limits off. One 2-core machine shared with other work, load generator "
                           f"included; {args.seconds:g} s per load after {args.warmup:g} s of warm-up."),
                 "cells": []}
    order = [(m, t) for t in args.topologies.split(",") for m in args.modes.split(",")]
    for rnd in range(args.rounds):
        for mode, topo in (order if rnd % 2 == 0 else order[::-1]):  # interleaved, alternating direction
            c = await cell(mode, topo, args)
            c["round"] = rnd + 1
            res["cells"].append(c)
            print(f"[scaleout] round {rnd + 1} {mode:7s} {topo:3s}: closed {c['closed']['throughput_rps']} req/s, "
                  f"mean batch {c['closed']['mean_batch']} ({c['closed']['calls_per_computation']} calls/computation, "
                  f"{c['closed']['gathers']} gathers of {c['closed']['mean_gather_ms']} ms), "
                  f"p99 {c['closed']['latency_ms']['p99']} ms; open "
                  f"mean batch {c['open']['mean_batch']}, p99 {c['open']['latency_ms']['p99']} ms", file=sys.stderr)
    res["aggregate"] = aggregate(res["cells"])
    res["goals"] = goals(res["aggregate"])
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.scaleout_batching", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--registry", type=Path, default=ROOT / "models" / "store")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=32, help="closed-loop clients")
    ap.add_argument("--rate", type=float, default=60.0, help="open-loop arrivals per second")
    ap.add_argument("--seconds", type=float, default=15.0, help="length of each load (bounded in count too)")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--spin", action="store_true", help="runner.spin_wait on (off by default: the tiers share cores)")
    ap.add_argument("--pin", action="store_true", help="runner on CPU 0 (1 intra-op thread), the rest on CPU 1")
    ap.add_argument("--batch-inflight", type=int, default=1, help="gateway.batch_inflight of every API worker")
    ap.add_argument("--words", type=int, default=0, help="words per text (default: the short TEXTS, 2-7 words)")
    ap.add_argument("--modes", default=",".join(MODES), help="batching modes to measure, comma-separated")
    ap.add_argument("--topologies", default=",".join(TOPOLOGIES), help="gateway tiers to measure: 1w,2w,4w,2gw")
    ap.add_argument("--log-dir", type=Path, default=None, help="keep process logs here (default: temp dirs)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "scaleout_batching")
    args = ap.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    unknown = set(args.modes.split(",")) - set(MODES) | set(args.topologies.split(",")) - set(TOPOLOGIES)
    if unknown:
        ap.error(f"unknown modes or topologies: {sorted(unknown)}")
    if haproxy_binary() is None:
        raise SystemExit("haproxy is not installed: apt-get install -y haproxy")
    res = asyncio.run(run(args))
    res["plot"] = plot(res, args.out)
    write_report(args.out, res, to_markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
