"""Tuning knobs, measured: ONNX Runtime threads per model in process, and the serving knobs end to end.

    python -m scripts.bench.tuning                 # ~8 min; docs/bench/tuning.{json,md}
    python -m scripts.bench.tuning --rounds 1 --duration 3 --configs default,inflight1 --out /tmp/tuning  # quick

Part 1 (in process, per model: yolo-shapes, minilm-intent, forecast-global): items/s at batch 1 and 8 for each
(intra-op, inter-op) thread setting, once pinned to one core (how the other benchmarks run) and once on every core.
Part 2 (end to end, text classification, one text per request): each named config of CONFIGS is a `bentoml serve`
with those environment overrides (server pinned to --server-cpu, load on --load-cpu, closed loop c=1 and c=32),
rounds interleaved, medians [min-max]. IO binding is a GPU knob (device-resident inputs/outputs); no GPU was lent to
this project's runs, so it is listed as not measured rather than guessed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scripts.bench.batch_hist import around
from scripts.bench.compare import request_for
from scripts.bench.harness import RAISED_LIMITS, TriservePeer, default_generator, load_cell
from scripts.bench.report import write_report
from scripts.bench.textmix import ROOT
from scripts.bench.textmix import texts as mix_texts
from scripts.common import default_deployment
from triserve.families.detection.manifest import DetectionPreprocess
from triserve.families.forecast.manifest import ForecastPreprocess
from triserve.models.manifest import preprocess_as

TEXT = f"TRISERVE_SLOTS__{default_deployment('text').upper()}__BATCHING__"
CONFIGS = {  # name: (environment overrides on top of configs/serving.yaml, what it varies)
    "default": ({}, "runner.batching=gateway, gateway.batch_inflight=1, gateway.coalesce_wait_ms=2, text "
                    "max_batch_size 64, intra-op 0, 1 API worker"),
    "inflight2": ({"TRISERVE_GATEWAY__BATCH_INFLIGHT": "2"}, "gateway.batch_inflight=2"),
    "inflight4": ({"TRISERVE_GATEWAY__BATCH_INFLIGHT": "4"}, "gateway.batch_inflight=4"),
    "maxbatch8": ({TEXT + "MAX_BATCH_SIZE": "8"}, "text max_batch_size 8"),
    "maxbatch32": ({TEXT + "MAX_BATCH_SIZE": "32"}, "text max_batch_size 32"),
    "nobatch": ({TEXT + "MAX_BATCH_SIZE": "1"}, "text max_batch_size 1 (batching off)"),
    "runner_dispatcher": ({"TRISERVE_RUNNER__BATCHING": "runner"},
                          "runner.batching=runner: BentoML's CorkDispatcher, max_latency_ms 20000"),
    "runner_dispatcher_100ms": ({"TRISERVE_RUNNER__BATCHING": "runner", TEXT + "MAX_LATENCY_MS": "100"},
                                "runner.batching=runner, text max_latency_ms 100"),
    "intra1": ({"TRISERVE_RUNNER__INTRA_OP_THREADS": "1"}, "runner.intra_op_threads=1"),
    "intra1_coalesce0": ({"TRISERVE_RUNNER__INTRA_OP_THREADS": "1", "TRISERVE_GATEWAY__COALESCE_WAIT_MS": "0"},
                         "runner.intra_op_threads=1, gateway.coalesce_wait_ms=0 (an idle slot never waits for "
                         "requests already being preprocessed)"),
    "intra1_coalesce5": ({"TRISERVE_RUNNER__INTRA_OP_THREADS": "1", "TRISERVE_GATEWAY__COALESCE_WAIT_MS": "5"},
                         "runner.intra_op_threads=1, gateway.coalesce_wait_ms=5"),
    "nospin": ({"TRISERVE_RUNNER__SPIN_WAIT": "false"}, "runner.spin_wait=false (ORT threads sleep between ops)"),
    "workers2": ({"TRISERVE_GATEWAY__WORKERS": "2"}, "gateway.workers=2 (API worker processes)"),
    "local": ({"TRISERVE_RUNNER__PLACEMENT": "local"}, "runner.placement=local (runner code in the API worker)"),
    "otel_middleware": ({"TRISERVE_OBSERVABILITY__TRACE_SAMPLE_RATE": "0.0001",
                         "TRISERVE_OBSERVABILITY__OTLP_ENDPOINT": "http://127.0.0.1:9/v1/traces"},
                        "BentoML's OpenTelemetry middleware on, sampling 1 in 10,000 (the cost of the middleware "
                        "itself; sample rate 0, the default, bypasses it)"),
}
MODELS = {"detection": "yolo-shapes", "text": "minilm-intent", "forecast": "forecast-global"}
THREADS = [(0, 1, True), (0, 1, False), (1, 1, True), (2, 1, True), (2, 1, False), (1, 2, True)]
# (intra-op, inter-op, spin wait); intra-op 0 = ONNX Runtime's default (one thread per physical core)


# --------------------------------------------------------------------------------------------------------------------
# part 1: threads, in process
# --------------------------------------------------------------------------------------------------------------------
def _key(intra: int, inter: int, spin: bool) -> str:
    return f"intra{intra}/inter{inter}/{'spin' if spin else 'nospin'}"


def model_inputs(task: str, batch: int) -> tuple[str, dict[str, np.ndarray]]:
    """The stable model's file and a representative batch of inputs."""
    from triserve.models.registry import LocalRegistry

    reg = LocalRegistry(ROOT / "models" / "store")
    name = MODELS[task]
    d, m = reg.load_verified(name, "stable")
    rng = np.random.default_rng(0)
    if task == "detection":
        size = int(preprocess_as(m, DetectionPreprocess).imgsz)
        return str(d / m.model_file), {m.inputs[0].name: rng.uniform(0, 1, (batch, 3, size, size)).astype(np.float32)}
    if task == "text":
        ids = rng.integers(1000, 2000, (batch, 20)).astype(np.int64)
        return str(d / m.model_file), {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    pre = preprocess_as(m, ForecastPreprocess)
    ctx = int(pre.context)
    return str(d / m.model_file), {"context": rng.normal(0, 1, (batch, ctx)).astype(np.float32),
                                   "mask": np.ones((batch, ctx), np.float32),
                                   "freq": rng.integers(0, len(pre.frequencies), batch).astype(np.int64),
                                   "features": rng.uniform(-1, 1, (batch, 6)).astype(np.float32)}


def thread_sweep(seconds: float) -> dict:
    """items/s per (task, threads, batch): runs in a child process (pinned or not by the caller)."""
    import onnxruntime as ort

    out = {}
    for task in MODELS:
        for intra, inter, spin in THREADS:
            opts = ort.SessionOptions()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            opts.intra_op_num_threads, opts.inter_op_num_threads = intra, inter
            opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
            if inter > 1:
                opts.execution_mode = ort.ExecutionMode.ORT_PARALLEL
            for batch in (1, 8):
                path, feeds = model_inputs(task, batch)
                sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
                for _ in range(3):
                    sess.run(None, feeds)
                n, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < seconds:
                    sess.run(None, feeds)
                    n += 1
                out[f"{task}/{_key(intra, inter, spin)}/b{batch}"] = round(n * batch / (time.perf_counter() - t0), 1)
    return out


def run_thread_sweep(seconds: float, cpus: set[int] | None) -> dict:
    cmd = [sys.executable, "-m", "scripts.bench.tuning", "_threads", "--seconds", str(seconds)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
                       preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    if p.returncode:
        raise RuntimeError(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------------------------------
# part 2: serving knobs, end to end
# --------------------------------------------------------------------------------------------------------------------
def measure_config(name: str, env: dict, args, tmp: Path, texts: list[str]) -> dict:
    cpus = set(range(os.cpu_count() or 1)) if args.server_cpu < 0 else args.server_cpu
    peer = TriservePeer(name, {**RAISED_LIMITS, **env}, cpus, tmp / f"{name}.log",
                        Path(tempfile.mkdtemp(prefix=f"home-{name}-", dir=tmp)))
    try:
        peer.wait_ready()
        reqs = [request_for("triserve", peer.url, t) for t in texts]
        os.sched_setaffinity(0, cpus if args.server_cpu < 0 else {args.load_cpu})
        load_cpu = None if args.server_cpu < 0 else args.load_cpu

        def cell(c: int, warmup: float, duration: float) -> dict:
            return load_cell(args.load_generator, reqs, c, warmup, duration, 200_000, load_cpu)

        cell(32, args.warmup, 0)  # unmeasured, outside the CPU window
        before = cpu_seconds(peer)
        measured, batches = around(peer.url, "text", lambda: cell(32, 0, args.duration))
        cells = {32: measured}
        after = cpu_seconds(peer)
        cells[1] = cell(1, args.warmup, args.duration)
    finally:
        peer.stop()
    out = {c: {"texts_per_s": r["texts_per_s"], "p50": r["latency_ms"]["p50"], "p99": r["latency_ms"]["p99"],
               "non_200": r["non_200"]} for c, r in cells.items()}
    runner = (batches or {}).get("triserve_runner_batch_size") or {}
    out[32]["runner_batch"] = {"mean": runner.get("mean"), "calls": runner.get("count"),
                               "lone_share": round(runner["buckets"]["1"] / runner["count"], 3)
                               if runner.get("count") else None}
    sent = cells[32]["sent_total"]  # every request the CPU window covers
    out[32]["cpu_ms_per_request"] = {svc: round((after[svc] - before.get(svc, 0.0)) * 1000 / max(sent, 1), 3)
                                     for svc in after}
    return out


def cpu_seconds(peer) -> dict[str, float]:
    """Service -> user+system CPU seconds of all its worker processes so far (where the server's core goes)."""
    import psutil

    out: dict[str, float] = {}
    for svc, pids in peer.pids().items():
        for pid in pids:
            try:
                t = psutil.Process(pid).cpu_times()
                out[svc] = out.get(svc, 0.0) + t.user + t.system
            except psutil.NoSuchProcess:
                pass
    return out


def med(values: Sequence[float | None]) -> str:
    xs = [x for x in values if x is not None]
    if not xs:
        return "n/a"
    return f"{statistics.median(xs):.1f} [{min(xs):.1f}-{max(xs):.1f}]"


def to_markdown(res: dict) -> str:
    L = [f"# Tuning knobs, measured ({res['started_utc']})", "", f"Command: `{res['command']}`", ""]
    if "threads" in res:
        L += _threads_table(res)
    L += _serving_table(res)
    L += ["", "IO binding (device-resident inputs and outputs): a GPU knob; no GPU was lent to this run, not measured."]
    return "\n".join(L) + "\n"


def _threads_table(res: dict) -> list[str]:
    L = ["## ONNX Runtime threads, in process (items/s)", "",
          "| model | intra, inter, spin | b1 one core | b8 one core | b1 all cores | b8 all cores |",
          "|---|---|---|---|---|---|"]
    one, allc = res["threads"]["one_core"], res["threads"]["all_cores"]
    for task in MODELS:
        for intra, inter, spin in THREADS:
            k = f"{task}/{_key(intra, inter, spin)}"
            L.append(f"| {MODELS[task]} | {intra}, {inter}, {'on' if spin else 'off'} | {one[k + '/b1']} | "
                     f"{one[k + '/b8']} | {allc[k + '/b1']} | {allc[k + '/b8']} |")
    return L


def _serving_table(res: dict) -> list[str]:
    L = ["", f"## Serving knobs, end to end (text, one text per request; {res['placement']}; medians [min-max] over "
          f"{res['rounds']} interleaved rounds)", "",
          "| config | what it changes | texts/s c=32 | p50 ms c=32 | p99 ms c=32 | p50 ms c=1 | CPU ms/request "
          "gateway, runner (c=32) | runner batch mean, share of calls with 1 text (c=32) | non-200 |",
          "|---|---|---|---|---|---|---|---|---|"]

    def col(rows: list[dict], c: str, k: str) -> str:
        return med([r[c][k] for r in rows])

    for name, rows in res["serving"].items():
        cpu = {svc: statistics.median(r["32"]["cpu_ms_per_request"].get(svc, 0.0) for r in rows)
               for svc in ("triserve", "triserve-runner")}
        batch = [r["32"].get("runner_batch") or {} for r in rows]
        L.append(f"| {name} | {CONFIGS[name][1]} | {col(rows, '32', 'texts_per_s')} | {col(rows, '32', 'p50')} | "
                 f"{col(rows, '32', 'p99')} | {col(rows, '1', 'p50')} | "
                 f"{cpu['triserve']:.2f}, {cpu['triserve-runner']:.2f} | "
                 f"{med([b.get('mean') for b in batch])}, "
                 f"{med([100 * b['lone_share'] for b in batch if b.get('lone_share') is not None])}% | "
                 f"{sum(r['32']['non_200'] + r['1']['non_200'] for r in rows)} |")
    return L


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_threads"]:
        ap = argparse.ArgumentParser()
        ap.add_argument("--seconds", type=float, default=1.0)
        a = ap.parse_args(argv[1:])
        print(json.dumps(thread_sweep(a.seconds)))
        return 0
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.tuning", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--thread-seconds", type=float, default=1.0, help="per setting; 0 skips the thread sweep")
    ap.add_argument("--server-cpu", type=int, default=0, help="-1: not pinned (every core, shared with the load)")
    ap.add_argument("--load-cpu", type=int, default=1)
    ap.add_argument("--load-generator", choices=("wrk", "aiohttp"), default=default_generator(),
                    help="closed-loop client (default wrk when installed)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "tuning")
    args = ap.parse_args(argv)
    names = [c for c in args.configs.split(",") if c]
    unknown = set(names) - set(CONFIGS)
    if unknown:
        ap.error(f"unknown configs {sorted(unknown)}; known: {sorted(CONFIGS)}")
    res = {"command": "python -m scripts.bench.tuning " + " ".join(argv),
           "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rounds": args.rounds,
           "placement": (f"server pinned to CPU {args.server_cpu}, load on CPU {args.load_cpu}" if args.server_cpu >= 0
                         else "server and load on every core (not pinned)") + f", closed loop ({args.load_generator}) "
                        f"{args.duration:g} s per cell after {args.warmup:g} s warm-up"}
    if args.thread_seconds > 0:
        res["threads"] = {"one_core": run_thread_sweep(args.thread_seconds, {max(args.server_cpu, 0)}),
                          "all_cores": run_thread_sweep(args.thread_seconds, None)}
    print("[tuning] thread sweep done", file=sys.stderr)
    texts, _ = mix_texts(512)
    mine = os.sched_getaffinity(0)
    serving: dict[str, list] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="triserve-tuning-") as d:
        try:
            for r in range(args.rounds):
                for name in names:
                    row = measure_config(name, CONFIGS[name][0], args, Path(d), texts)
                    serving[name].append({str(c): v for c, v in row.items()})
                    print(f"[tuning] round {r + 1} {name}: {row}", file=sys.stderr)
        finally:
            os.sched_setaffinity(0, mine)
    res["serving"] = serving
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_report(args.out, res, to_markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
