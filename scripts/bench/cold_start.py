"""Cold start to ready: seconds from `bentoml serve` to /readyz 200, with the models local and pulled over HTTP.

    python -m scripts.bench.cold_start [--runs 3] [--out docs/bench/cold_start]

Modes, interleaved per run:
  local  the registry directory (models/store) is served directly: process start, imports, six ONNX sessions, verify
         (sha256) and warm-up, gRPC up.
  pull   a fresh, empty model cache and `registry_uri=http://127.0.0.1:<port>/` (a static HTTP server over
         models/store): the same plus pulling and verifying every configured model, as a new node does.
Reported per mode: median [min-max] over --runs, against the goal (<= 20 s), plus the per-model load seconds the
runner exposes (triserve_model_load_duration_seconds: one load per slot at start). Writes <out>.json and <out>.md.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from scripts.bench.report import write_report
from scripts.bench.textmix import ROOT
from scripts.drills.ports import ReservedPort
from scripts.drills.server import Server

GOAL_S = 20.0
REGISTRY = ROOT / "models" / "store"


def load_seconds(url: str) -> dict[str, float]:
    """slot -> load + verify + warm-up seconds, from the runner's load histogram on /metrics (its sum: a fresh server
    has loaded each slot once)."""
    text = httpx.get(url + "/metrics", timeout=5).text
    out = {}
    for m in re.finditer(r'^triserve_model_load_duration_seconds_sum\{([^}]*)\} ([0-9.eE+-]+)$', text, flags=re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        out[labels.get("slot", "?")] = round(float(m.group(2)), 3)
    return out


def one_start(mode: str, tmp: Path, http_url: str) -> dict:
    env = {"TRISERVE_GRPC__ENABLED": "true"}
    cache = None
    if mode == "pull":
        cache = Path(tempfile.mkdtemp(prefix="cache-", dir=tmp))
        env.update({"TRISERVE_REGISTRY_URI": http_url, "TRISERVE_MODEL_CACHE_DIR": str(cache)})
    srv = Server(REGISTRY, env=env, log_path=tmp / f"{mode}.log")
    try:
        ready = srv.wait_ready(timeout=180)
        out = {"mode": mode, "ready_s": round(ready, 2), "model_load_s": load_seconds(srv.url)}
        if cache is not None:  # evidence that the models really came over HTTP into the empty cache
            out["pulled_mb"] = round(sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) / 1e6, 1)
        return out
    finally:
        srv.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.cold_start", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--modes", default="local,pull")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "cold_start")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    results: dict[str, list[dict]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="triserve-coldstart-") as d:
        tmp = Path(d)
        held = ReservedPort()  # until the static server has stopped: no other bind(0) is handed it meanwhile
        port = held.number
        static = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                                   "--directory", str(REGISTRY)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            for i in range(args.runs):
                for mode in modes:
                    r = one_start(mode, tmp, f"http://127.0.0.1:{port}/")
                    results[mode].append(r)
                    print(f"[cold_start] run {i + 1} {mode}: ready in {r['ready_s']} s", file=sys.stderr)
        finally:
            static.terminate()
            static.wait(timeout=10)
            held.release()
    summary = {}
    for mode, runs in results.items():
        xs = [r["ready_s"] for r in runs]
        summary[mode] = {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs),
                         "goal_s": GOAL_S, "met": statistics.median(xs) <= GOAL_S}
    res = {"command": "python -m scripts.bench.cold_start " + " ".join(argv if argv is not None else sys.argv[1:]),
           "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "summary": summary, "runs": results}
    L = [f"# Cold start to ready ({res['started_utc']})", "", f"Command: `{res['command']}`", "",
         "Spawn of `bentoml serve triserve.services.gateway:Gateway` (gateway + runner workers, six models, gRPC on) "
          "until "
         "/readyz answers 200; not pinned (both cores), nothing else running.", "",
         "| mode | ready s, median [min-max] | goal | met |", "|---|---|---|---|"]
    for mode, s in summary.items():
        L.append(f"| {mode} | {s['median_s']:.1f} [{s['min_s']:.1f}-{s['max_s']:.1f}] | <= {GOAL_S:g} s | "
                 f"{'yes' if s['met'] else '**no**'} |")
    L += ["", "Per-model load + verify + warm-up seconds in the runner (first run of each mode):", ""]
    for mode, runs in results.items():
        pulled = f" (pulled into an empty cache: {runs[0]['pulled_mb']} MB)" if "pulled_mb" in runs[0] else ""
        L.append(f"- {mode}{pulled}: " + ", ".join(f"{k} {v}" for k, v in sorted(runs[0]["model_load_s"].items())))
    write_report(args.out, res, "\n".join(L))
    return 0


if __name__ == "__main__":
    sys.exit(main())
