"""Memory under sustained traffic: RSS of every worker before and after 50,000 requests (goal: growth <= 2%).

    python -m scripts.bench.soak_rss [--requests 50000 --concurrency 32] [--out docs/bench/soak_rss]

One triserve instance (default config, per-client limit raised: one load generator is one client). First
--warmup requests (not counted) so allocator pools, ONNX Runtime arenas and caches reach their working size; then the
measured requests in chunks of --chunk through scripts/bench/load_mix (the mixed detect/classify/forecast traffic,
every status counted), sampling the RSS of each gateway and runner worker after each chunk. Growth per process =
(last - first sample) / first sample. Writes <out>.json, <out>.md and <out>.png (RSS vs requests served).
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

from scripts.bench.harness import RAISED_LIMITS
from scripts.bench.load_mix import run as run_mix
from scripts.bench.report import pyplot, write_report
from scripts.bench.textmix import ROOT
from scripts.drills.server import Server

GOAL = 0.02


def rss_mb(srv: Server) -> dict[str, float]:
    """'<service>[i]' -> resident MB of each live worker process."""
    out = {}
    for name, pids in sorted(srv.workers().items()):
        for i, pid in enumerate(sorted(pids)):
            try:
                out[f"{name}[{i}]"] = round(psutil.Process(pid).memory_info().rss / 2**20, 1)
            except psutil.NoSuchProcess:
                pass
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.soak_rss", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--warmup", type=int, default=3_000)
    ap.add_argument("--chunk", type=int, default=5_000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-seconds", type=float, default=1800, help="hard bound on the whole measured phase")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "soak_rss")
    ap.add_argument("--env", default="", help="comma list of VAR=VALUE for the server (A/B of a setting, e.g. "
                                              "TRISERVE_MEMORY__TRIM_INTERVAL_S=0,TRISERVE_MEMORY__MALLOC_ARENA_MAX=0)")
    args = ap.parse_args(argv)
    started = time.monotonic()
    samples: list[dict[str, Any]] = []
    codes: Counter[str] = Counter()  # load_mix's "status": code (as a string) -> count
    with tempfile.TemporaryDirectory(prefix="triserve-soak-") as d:
        env = {**RAISED_LIMITS, **dict(kv.split("=", 1) for kv in args.env.split(",") if kv)}
        srv = Server(ROOT / "models" / "store", env=env, log_path=Path(d) / "serve.log")
        try:
            srv.wait_ready(timeout=240)
            asyncio.run(run_mix(srv.url, args.warmup, args.concurrency, 600))
            served = 0
            samples.append({"requests": 0, "rss_mb": rss_mb(srv)})
            while served < args.requests and time.monotonic() - started < args.max_seconds:
                n = min(args.chunk, args.requests - served)
                r = asyncio.run(run_mix(srv.url, n, args.concurrency, args.max_seconds))
                served += r["requests"]
                codes.update(r["status"])
                samples.append({"requests": served, "rss_mb": rss_mb(srv), "rps": r["throughput_rps"]})
                print(f"[soak] {served} requests, {r['throughput_rps']} req/s, RSS {samples[-1]['rss_mb']}",
                      file=sys.stderr)
        finally:
            srv.stop()
    first, last = samples[0]["rss_mb"], samples[-1]["rss_mb"]
    growth = {p: round((last[p] - first[p]) / first[p], 4) for p in first if p in last}
    res = {"command": "python -m scripts.bench.soak_rss " + " ".join(argv if argv is not None else sys.argv[1:]),
           "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "requests": samples[-1]["requests"],
           "status": dict(codes), "growth": growth, "goal": GOAL,
           "met": bool(growth) and all(g <= GOAL for g in growth.values()), "samples": samples}
    L = [f"# RSS over {res['requests']:,} requests ({res['started_utc']})", "", f"Command: `{res['command']}`", "",
         f"Mixed load (scripts/bench/load_mix), concurrency {args.concurrency}, after {args.warmup:,} warm-up "
         f"requests. Server env beyond harness.RAISED_LIMITS: {args.env or 'none'}. Status codes: {res['status']}.", "",
         "| process | RSS MB after warm-up | RSS MB at end | growth | goal | met |", "|---|---|---|---|---|---|"]
    for p, g in growth.items():
        L.append(f"| {p} | {first[p]} | {last[p]} | {g * 100:+.2f}% | <= {GOAL * 100:g}% | "
                 f"{'yes' if g <= GOAL else '**no**'} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    plt = pyplot()
    if plt is not None:
        fig, ax = plt.subplots(figsize=(7, 4))
        for p in first:
            ax.plot([s["requests"] for s in samples], [s["rss_mb"].get(p) for s in samples], "o-", label=p)
        ax.set_xlabel("requests served after warm-up")
        ax.set_ylabel("RSS MB")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.out.with_suffix(".png"), dpi=110)
        L += ["", f"![RSS vs requests]({args.out.name}.png)"]
    write_report(args.out, res, "\n".join(L))
    return 0 if res["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
