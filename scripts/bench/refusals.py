"""What a refusal costs: latency and server CPU of 429 (rate limited) and 401 (unknown key) answers on a task route.

    python -m scripts.bench.refusals --out /tmp/refusals                     # this tree
    python -m scripts.bench.refusals --base e1e4d41 --rounds 3 --out /tmp/refusals   # and a base commit, interleaved

Why: a refusal protects the server only if it costs next to nothing; decided after the body is received and parsed, a
flood of refused requests with large bodies costs what accepted ones do (issue 40, "Refusals are not cheap").
Per tree a fresh server (the intent deployment only, one ONNX Runtime thread, the gateway pinned to --server-cpu)
with a key of burst 1 and next to no refill; its one token is spent, then per cell --requests sequential POSTs to
/v1/classify over one keep-alive connection (the client pinned to --load-cpu): a rate-limited key with a small body
and with a --body-kb body, an unknown key with the large body. Reported per cell: p50/p99 client latency and the API
worker's CPU (user + system) per refusal, and one refusal's status, headers and body (the request id fixed, the Date
header left out) so that two trees' answers can be compared byte for byte. Bounded: --requests per cell, each cell
stops after --max-seconds. --profile DIR samples the API worker with py-spy during each cell (GIL holders; the
frames holding most samples in <DIR>/<side>-<cell>.json).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from scripts.bench.ab import checkout
from scripts.bench.cpu_split import summarise_profile
from scripts.drills.server import ROOT, Server, pin_threads
from scripts.tiers import subset_models_file

KEY = "bench-refused-key"


def env() -> dict[str, str]:
    keys = [{"name": "bench", "sha256": hashlib.sha256(KEY.encode()).hexdigest(), "rate_per_s": 0.0001, "burst": 1}]
    return {"TRISERVE_ACCESS__API_KEYS": json.dumps(keys), "TRISERVE_ACCESS__CAPACITY_LIMITS": "false",
            "TRISERVE_GRPC__ENABLED": "false", "TRISERVE_RUNNER__INTRA_OP_THREADS": "1"}


def cells(body_kb: int) -> dict[str, tuple[dict, bytes]]:
    """cell -> (headers, body)."""
    small = json.dumps({"texts": ["book a flight to paris"]}).encode()
    large = json.dumps({"texts": ["x" * 1000] * max(1, body_kb)}).encode()
    limited, unknown = {"X-API-Key": KEY}, {"X-API-Key": "not-a-key"}
    return {"429 small": (limited, small), f"429 {body_kb} KiB": (limited, large),
            f"401 {body_kb} KiB": (unknown, large)}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        t = psutil.Process(pid).cpu_times()
        total += t.user + t.system
    return total


def comparable(answer: dict) -> dict:
    """An answer without what the clock decides (the wait of a 429), for a byte-for-byte comparison of two trees."""
    body = re.sub(r'"retry_after_s":[0-9.]+', '"retry_after_s":_', answer["body"])
    clocked = ("retry-after", "content-length")  # the wait, and the length of a body that says it
    return {**answer, "body": body, "headers": [(k, "_" if k in clocked else v) for k, v in answer["headers"]]}


def profiling(args, side: str, cell: str, pid: int) -> subprocess.Popen | None:
    if args.profile is None:
        return None
    args.profile.mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).parent / "py-spy"  # the project's environment (the dev extra)
    path = args.profile / f"{side}-{cell.replace(' ', '_')}.txt"
    return subprocess.Popen([str(spy), "record", "--nonblocking", "--gil", "--format", "raw", "--rate", "200",
                             "--pid", str(pid), "--output", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(side: str, root: Path, args) -> dict:
    """One tree: a fresh server, every cell, stopped."""
    workdir = Path(tempfile.mkdtemp(prefix="refusals-"))
    models = subset_models_file(ROOT / "configs" / "models.yaml", ["intent"], workdir / "models.yaml")
    out: dict = {"root": str(root), "cells": {}}
    with Server(args.registry, env={**env(), "TRISERVE_MODELS_FILE": str(models)}, root=root,
                log_path=workdir / "serve.log") as srv:
        srv.wait_ready()
        workers = srv.entry_pids()
        pin_threads(workers, {args.server_cpu})
        pin_threads([os.getpid()], {args.load_cpu})
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            spend = client.post("/v1/classify", headers={"X-API-Key": KEY}, json={"texts": ["hi"]})
            assert spend.status_code == 200, spend.text  # the bucket's one token
            for name, (headers, body) in cells(args.body_kb).items():
                hdrs = {**headers, "Content-Type": "application/json", "X-Request-ID": "bench-refusal"}
                sample = client.post("/v1/classify", headers=hdrs, content=body)
                ms: list[float] = []
                statuses: dict[int, int] = {}
                spy = profiling(args, side, name, workers[0])
                before, deadline = cpu(workers), time.monotonic() + args.max_seconds
                for _ in range(args.requests):
                    started = time.perf_counter()
                    status = client.post("/v1/classify", headers=hdrs, content=body).status_code
                    ms.append((time.perf_counter() - started) * 1000)
                    statuses[status] = statuses.get(status, 0) + 1
                    if time.monotonic() > deadline:
                        break
                spent = cpu(workers) - before
                if spy is not None:
                    spy.send_signal(signal.SIGINT)  # py-spy writes its samples on an interrupt
                    spy.wait(60)
                    raw = args.profile / f"{side}-{name.replace(' ', '_')}.txt"
                    raw.with_suffix(".json").write_text(json.dumps(summarise_profile(raw), indent=1))
                out["cells"][name] = {
                    "requests": len(ms), "statuses": statuses, "body_bytes": len(body),
                    "p50_ms": round(statistics.median(ms), 3), "p99_ms": round(pct(ms, 0.99), 3),
                    "cpu_ms_per_refusal": round(spent * 1000 / len(ms), 3),
                    "answer": {"status": sample.status_code,
                               "headers": [(k.decode(), v.decode()) for k, v in sample.headers.raw
                                           if k.lower() != b"date"],
                               "body": sample.text}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--registry", type=Path, default=ROOT / "models" / "store")
    ap.add_argument("--base", help="also measure this git ref (checked out under .cache/bench/ab), before this tree")
    ap.add_argument("--requests", type=int, default=2000, help="refusals per cell")
    ap.add_argument("--body-kb", type=int, default=256, help="size of the large body, KiB")
    ap.add_argument("--rounds", type=int, default=1, help="fresh servers per round, the trees' order alternating")
    ap.add_argument("--max-seconds", type=float, default=120, help="a cell stops after this long")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--load-cpu", type=int, default=1)
    ap.add_argument("--profile", type=Path, default=None, help="py-spy stacks of the API worker per cell, here")
    ap.add_argument("--out", type=Path, required=True, help="writes <out>.json")
    args = ap.parse_args()
    trees = ([("base", checkout(args.base)[0])] if args.base else []) + [("head", ROOT)]
    rounds: list[dict[str, Any]] = []
    for round_ in range(args.rounds):  # base, head / head, base, ...: a drift of the host is shared
        order = trees if round_ % 2 == 0 else trees[::-1]
        rounds.append({side: measure(side, root, args) for side, root in order})
    sides = [side for side, _ in trees]
    names = list(rounds[0]["head"]["cells"])
    median = {side: {name: {m: round(statistics.median(r[side]["cells"][name][m] for r in rounds), 3)
                            for m in ("p50_ms", "p99_ms", "cpu_ms_per_refusal")} for name in names}
              for side in sides}
    result = {"command": "python -m scripts.bench.refusals " + " ".join(sys.argv[1:]), "median": median,
              "rounds": rounds}
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    for i, r in enumerate(rounds):
        for side in sides:
            for name, cell in r[side]["cells"].items():
                print(f"round {i + 1} {side:5} {name:14} n={cell['requests']:5} {cell['statuses']}  "
                      f"p50 {cell['p50_ms']:7.3f} ms  p99 {cell['p99_ms']:7.3f} ms  "
                      f"cpu {cell['cpu_ms_per_refusal']:6.3f} ms/refusal")
    for side in sides:
        for name, m in median[side].items():
            print(f"median  {side:5} {name:14} p50 {m['p50_ms']:7.3f} ms  p99 {m['p99_ms']:7.3f} ms  "
                  f"cpu {m['cpu_ms_per_refusal']:6.3f} ms/refusal")
    if args.base:
        for name in names:
            same = all(comparable(r["base"]["cells"][name]["answer"]) == comparable(r["head"]["cells"][name]["answer"])
                       for r in rounds)
            print(f"{name}: the answer is {'the same' if same else 'DIFFERENT'} byte for byte (the 429's wait, "
                  "decided by the clock, aside)")

if __name__ == "__main__":
    main()
