"""Where does memory grow under traffic? tracemalloc snapshot diff of every triserve process.

    python -m scripts.bench.heap_diff [--warmup 10000 --requests 30000] [--out docs/bench/heap_diff]

Starts one triserve instance with observability.heap_snapshot_dir set (allocations traced from the end of startup),
sends --warmup mixed requests (scripts/bench/load_mix), asks every worker for a snapshot (SIGUSR2), sends --requests
more, asks again, and lists per process the source lines whose traced memory grew most between the two snapshots,
next to the RSS growth over the same interval. Traced growth ~0 with RSS growth > 0 means the growth is below Python
(allocator arenas, native libraries), not a leak in our code. Writes <out>.json and <out>.md.

    python -m scripts.bench.heap_diff --warmup 3000 --burst-concurrency 400 --burst-requests 4000 --requests 3000 \
        --out /tmp/heap_burst

What a burst leaves behind (issue 42: the soak's API worker kept +24 MB after its 3x burst): between the snapshots
a burst at --burst-concurrency first, then the --requests at the usual concurrency.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from scripts.bench.harness import RAISED_LIMITS
from scripts.bench.load_mix import run as run_mix
from scripts.bench.report import write_report
from scripts.bench.soak_rss import rss_mb
from scripts.bench.textmix import ROOT
from scripts.drills.server import Server


def snapshot_all(srv: Server, directory: Path, timeout: float = 120) -> dict[int, Path]:
    """SIGUSR2 to every worker; pid -> the snapshot file it wrote (the newest per pid)."""
    pids = [pid for group in srv.workers().values() for pid in group]
    before = set(directory.glob("*.tracemalloc"))
    for pid in pids:
        os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = set(directory.glob("*.tracemalloc")) - before
        if len(new) >= len(pids):
            time.sleep(1.0)  # let the last dump finish writing
            return {int(p.stem.split("-")[-2]): p for p in new}
        time.sleep(0.5)
    raise TimeoutError(f"only {len(set(directory.glob('*.tracemalloc')) - before)} of {len(pids)} snapshots")


def top_growth(first: Path, second: Path, limit: int) -> tuple[float, list[dict]]:
    """Total traced growth in MB and the `limit` source lines that grew most (with their deepest frames)."""
    a, b = tracemalloc.Snapshot.load(str(first)), tracemalloc.Snapshot.load(str(second))
    total = (sum(s.size for s in b.statistics("filename")) - sum(s.size for s in a.statistics("filename"))) / 2**20
    rows = []
    for stat in b.compare_to(a, "traceback")[:limit]:
        frames = [f"{f.filename.replace(str(ROOT) + '/', '')}:{f.lineno}" for f in stat.traceback]
        rows.append({"grew_kb": round(stat.size_diff / 1024, 1), "count_diff": stat.count_diff,
                     "size_kb": round(stat.size / 1024, 1), "where": frames[-1], "stack": frames[::-1][:6]})
    return round(total, 2), rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.heap_diff", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warmup", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=30_000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--burst-concurrency", type=int, default=0,
                    help="what a burst leaves behind: between the snapshots, --burst-requests at this concurrency "
                         "first, then the --requests at --concurrency (a quiet tail)")
    ap.add_argument("--burst-requests", type=int, default=3_000)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--max-seconds", type=float, default=1800, help="bound on each load phase")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "heap_diff")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="triserve-heap-") as d:
        snaps = Path(d) / "snapshots"
        env = {**RAISED_LIMITS, "TRISERVE_OBSERVABILITY__HEAP_SNAPSHOT_DIR": str(snaps)}
        srv = Server(ROOT / "models" / "store", env=env, log_path=Path(d) / "serve.log")
        try:
            srv.wait_ready(timeout=240)
            names = {pid: f"{name}[{i}]" for name, pids in srv.workers().items() for i, pid in enumerate(sorted(pids))}
            asyncio.run(run_mix(srv.url, args.warmup, args.concurrency, args.max_seconds))
            rss_a, first = rss_mb(srv), snapshot_all(srv, snaps)
            burst = asyncio.run(run_mix(srv.url, args.burst_requests, args.burst_concurrency, args.max_seconds)) \
                if args.burst_concurrency else None
            rss_burst = rss_mb(srv) if burst else None
            r = asyncio.run(run_mix(srv.url, args.requests, args.concurrency, args.max_seconds))
            rss_b, second = rss_mb(srv), snapshot_all(srv, snaps)
        finally:
            srv.stop()
        procs: dict[str, dict[str, Any]] = {}
        for pid, path in sorted(first.items()):
            name = names.get(pid, str(pid))
            traced, rows = top_growth(path, second[pid], args.top)
            procs[name] = {"rss_mb": [rss_a.get(name), rss_b.get(name)], "traced_growth_mb": traced, "top": rows,
                           "rss_mb_after_burst": rss_burst.get(name) if rss_burst else None}
    res = {"command": "python -m scripts.bench.heap_diff " + " ".join(argv if argv is not None else sys.argv[1:]),
           "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "warmup": args.warmup,
           "requests": r["requests"], "status": r["status"], "processes": procs,
           "burst": {"concurrency": args.burst_concurrency, "requests": burst["requests"],
                     "status": burst["status"]} if burst else None}
    L = [f"# Heap growth between request {args.warmup:,} and {args.warmup + r['requests']:,} ({res['started_utc']})",
         "", f"Command: `{res['command']}` (allocations traced with tracemalloc, so throughput is lower than in the "
         "soak). Status codes: " + json.dumps(r["status"]), ""]
    if burst:
        L[-1:-1] = [f"Between the snapshots: a burst of {burst['requests']:,} requests at concurrency "
                    f"{args.burst_concurrency} (status codes {json.dumps(burst['status'])}), then the "
                    f"{r['requests']:,} at concurrency {args.concurrency}."]
    for name, p in procs.items():
        a, b = p["rss_mb"]
        peak = f" (after the burst: {p['rss_mb_after_burst']} MB)" if p["rss_mb_after_burst"] else ""
        L += [f"## {name}", "", f"RSS {a} → {b} MB ({(b - a):+.1f} MB){peak}; traced Python allocations "
              f"{p['traced_growth_mb']:+.2f} MB", "", "| grew KB | blocks | now KB | allocated at (innermost first) |",
              "|---|---|---|---|"]
        L += [f"| {t['grew_kb']:+} | {t['count_diff']:+} | {t['size_kb']} | {' ← '.join(t['stack'][:4])} |"
              for t in p["top"]]
        L.append("")
    write_report(args.out, res, "\n".join(L))
    return 0


if __name__ == "__main__":
    sys.exit(main())
