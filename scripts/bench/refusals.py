"""What a refusal costs: latency and server CPU of 429 (rate limited) and 401 (unknown key) answers on a task route.

    python -m scripts.bench.refusals --out /tmp/refusals                     # this tree
    python -m scripts.bench.refusals --base e1e4d41 --out /tmp/refusals      # and a base commit, interleaved

Why: a refusal protects the server only if it costs next to nothing; decided after the body is received and parsed, a
flood of refused requests with large bodies costs what accepted ones do (issue 40, "Refusals are not cheap").
Per tree a fresh server (the intent deployment only, one ONNX Runtime thread, the gateway pinned to --server-cpu)
with a key of burst 1 and next to no refill; its one token is spent, then per cell --requests sequential POSTs to
/v1/classify over one keep-alive connection (the client pinned to --load-cpu): a rate-limited key with a small body
and with a --body-kb body, an unknown key with the large body. Reported per cell: p50/p99 client latency and the API
worker's CPU (user + system) per refusal, and one refusal's status, headers and body (the request id fixed, the Date
header left out) so that two trees' answers can be compared byte for byte. Bounded: --requests per cell, each cell
stops after --max-seconds.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from scripts.bench.ab import checkout
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


def measure(root: Path, args) -> dict:
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
                before, deadline = cpu(workers), time.monotonic() + args.max_seconds
                for _ in range(args.requests):
                    started = time.perf_counter()
                    status = client.post("/v1/classify", headers=hdrs, content=body).status_code
                    ms.append((time.perf_counter() - started) * 1000)
                    statuses[status] = statuses.get(status, 0) + 1
                    if time.monotonic() > deadline:
                        break
                spent = cpu(workers) - before
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
    ap.add_argument("--max-seconds", type=float, default=120, help="a cell stops after this long")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--load-cpu", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True, help="writes <out>.json")
    args = ap.parse_args()
    trees = ([("base", checkout(args.base)[0])] if args.base else []) + [("head", ROOT)]
    result: dict[str, Any] = {"command": "python -m scripts.bench.refusals " + " ".join(sys.argv[1:]),
              **{side: measure(root, args) for side, root in trees}}
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    for side, _ in trees:
        for name, cell in result[side]["cells"].items():
            print(f"{side:5} {name:14} n={cell['requests']:5} {cell['statuses']}  p50 {cell['p50_ms']:8.3f} ms  "
                  f"p99 {cell['p99_ms']:8.3f} ms  cpu {cell['cpu_ms_per_refusal']:7.3f} ms/refusal")
    if args.base:
        for name in result["head"]["cells"]:
            same = result["base"]["cells"][name]["answer"] == result["head"]["cells"][name]["answer"]
            print(f"{name}: the answer is {'byte for byte the same' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
