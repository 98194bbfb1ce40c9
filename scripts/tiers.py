"""Run the tiers apart: N runner replicas behind a load balancer, M gateways pointing at it by configuration.

    python -m scripts.tiers --runners 2 --gateways 2 --gateway-lb      # models/store; Ctrl-C stops everything
    python -m scripts.tiers --deployments intent --seconds 60          # one deployment, stop after a minute
    make tiers RUNNERS=2 GATEWAYS=2

Each tier is started the way BentoCloud and Yatai start one service of a Bento (the image entrypoint's
`start-http-server --service-name <name>`), each in its own process tree, on its own port, with its own BENTOML_HOME:

    runner replica  python -m bentoml_cli._internal.start start-http-server triserve.services.gateway:Gateway \\
                        --service-name triserve-runner --host 127.0.0.1 --port <P_i>
    load balancer   haproxy on 127.0.0.1:<LB>, HTTP health checks on each replica's /readyz, L7 retries and redispatch
                    on connection failures (the stand-in for a Kubernetes Service in front of the runner pods)
    gateway         BENTOML_SERVE_DEPENDS="triserve-runner=http://127.0.0.1:<LB>" \\
                    python -m bentoml_cli._internal.start start-http-server triserve.services.gateway:Gateway \\
                        --service-name triserve --host 127.0.0.1 --port <G_j>

BENTOML_SERVE_DEPENDS (whitespace-separated `<service name>=<url>` pairs; the `--depends` option) is the key
configs/deploy/k8s/split/ sets on the gateway pods. BentoML puts it into the dependency map it hands its workers as
BENTOML_RUNNER_MAP, so `bentoml.depends(ModelRunner)` resolves to a remote client of that URL (pickle bodies, as
between the services of one `bentoml serve`), and no runner process is started next to the gateway.

Three BentoML facts decide this shape (BentoML 1.4.40; see the report in docs/drills/split_tiers.md):
  * `bentoml serve triserve.runners.service:ModelRunner` does serve the runner alone, but as an *entry* service, and
  BentoML
    refuses pickle bodies on an entry service ("application/vnd.bentoml+pickle is not allowed in main server"): the
    gateway's calls fail. Served as a dependency (`--service-name triserve-runner`) it accepts them.
  * Setting BENTOML_RUNNER_MAP by hand does not work: the serving process overwrites it for its workers.
  * With `--service-name triserve` and no URL for the runner in the map, BentoML silently builds the runner *inside*
    each gateway worker (every worker loads every model, /readyz says 200). `Tiers.check_remote()` refuses that: every
    gateway worker's BENTOML_RUNNER_MAP must name the load balancer, and no runner worker may run under a gateway.

Everything binds to 127.0.0.1, every process is stopped by PID (BentoML's workers live in sessions of their own, so a
process group signal would miss them), haproxy's config is written to a temp dir. The haproxy binary comes from the
system directories (Debian package haproxy; .ci/run installs it).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import yaml

from scripts.drills.ports import BIND_RETRY_MARK, PortPool, ReservedPort, address_in_use
from scripts.drills.server import ENTRY_SERVICE, QUIET_ENV, ROOT, RUNNER_SERVICE
from scripts.imagetools import SYSTEM_BIN_DIRS

BENTO = "triserve.services.gateway:Gateway"  # the Bento's entry; each tier is one of its services
DEPENDS_ENV = "BENTOML_SERVE_DEPENDS"  # the key the gateway finds its runner tier by (configs/deploy/k8s/split/)
MODELS_FILE = ROOT / "configs" / "models.yaml"
HAPROXY_PACKAGE = "haproxy"


def haproxy_binary() -> str | None:
    """Absolute path of haproxy in the system directories (never the caller's PATH), or None."""
    return shutil.which("haproxy", path=os.pathsep.join(SYSTEM_BIN_DIRS))


# ------------------------------------------------------------------------------------------------------ config

@dataclass(frozen=True)
class BalancerConfig:
    """haproxy's part: how fast a dead replica leaves the rotation, and what a failed attempt may be retried on."""

    balance: str = "leastconn"  # per request (HTTP mode), to the replica with the fewest calls in flight
    check_path: str = "/readyz"
    check_inter_ms: int = 500  # health check period while up
    check_fastinter_ms: int = 200  # ... while changing state
    fall: int = 2  # failed checks before a server leaves the rotation
    rise: int = 2  # passed checks before it is back
    retries: int = 3  # attempts after the first, each on another server when redispatch allows
    # L7 retries: only failures where the server answered nothing; application answers (4xx/5xx) pass through.
    retry_on: tuple[str, ...] = ("conn-failure", "empty-response", "junk-response")
    timeout_connect_ms: int = 1000
    timeout_server_s: float = 120.0
    timeout_client_s: float = 120.0
    # An edge concurrency limit in front of the gateways (gateway_lb): at most gateway_maxconn requests in flight per
    # gateway instance (0: none, the default); the excess waits in haproxy's queue up to gateway_queue_ms and is then
    # refused by haproxy (C, a few microseconds of CPU) instead of by the API worker (Python, ~1-2 ms each).
    gateway_maxconn: int = 0
    gateway_queue_ms: int = 20


@dataclass(frozen=True)
class TiersConfig:
    """What to start. Env values apply on top of this process's environment (TRISERVE_* settings, BENTOML_*)."""

    registry_dir: Path = ROOT / "models" / "store"
    runners: int = 2
    gateways: int = 1
    gateway_lb: bool = False  # a second haproxy frontend in front of the gateways
    deployments: tuple[str, ...] = ()  # serve only these deployments of --models-file (empty: all of them)
    models_file: Path | None = None  # default: TRISERVE_MODELS_FILE of the environment, else configs/models.yaml
    env: Mapping[str, str] = field(default_factory=dict)  # both tiers
    runner_env: Mapping[str, str] = field(default_factory=dict)
    gateway_env: Mapping[str, str] = field(default_factory=dict)
    balancer: BalancerConfig = field(default_factory=BalancerConfig)
    log_dir: Path | None = None  # process logs; default: the temp dir, removed by stop()
    ready_timeout_s: float = 240.0
    spawn_timeout_s: float = 120.0  # from a process start until its arbiter has spawned a worker (see launch())
    bind_retries: int = 1  # starts again after an arbiter lost its circus endpoint to another process (see launch())
    root: Path = ROOT  # the source tree served


# ------------------------------------------------------------------------------------------- one service process

class ServiceExited(RuntimeError):
    """The process ended before it was up."""


class ServiceProcess:
    """One BentoML service of the Bento served alone (`start-http-server --service-name`), restartable on its port."""

    def __init__(self, name: str, service: str, port: int, env: Mapping[str, str], log_path: Path, root: Path):
        self.name, self.service, self.port, self.log_path, self.root = name, service, port, log_path, root
        self.url = f"http://127.0.0.1:{port}"
        self.home = Path(tempfile.mkdtemp(prefix=f"bentoml-home-{name}-"))
        self.env = {**os.environ, **QUIET_ENV, "BENTOML_HOME": str(self.home),
                    # runtime deployment changes persist per process (never into the checkout's .cache)
                    "TRISERVE_DEPLOYMENTS_STATE_FILE": str(self.home / "deployments.json"), **env}
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.spawned = 0.0  # when the arbiter of this start was seen with a worker (wait_spawned)
        self.starts = 0
        self.bind_retries = 0  # starts lost to an address taken under the arbiter (launch())
        self._seen: set[int] = set()

    def command(self) -> list[str]:
        return [sys.executable, "-m", "bentoml_cli._internal.start", "start-http-server", BENTO,
                "--service-name", self.service, "--host", "127.0.0.1", "--port", str(self.port)]

    def start(self) -> ServiceProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # appended: a restarted process keeps one log with both lives
            log.write(f"\n=== start {self.starts + 1} of {self.name} at {time.strftime('%H:%M:%S')} ===\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.command(), cwd=self.root, env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.started = time.monotonic()
        self.starts += 1
        self._seen = {self.proc.pid}
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_spawned(self, timeout: float) -> float:
        """Seconds from this start until the arbiter has spawned its first worker. Circus binds its pub/sub endpoint,
        the service's socket and its control endpoint before it spawns any worker (circus.arbiter.Arbiter.start), so
        from then on this process picks and binds no more ports of its own: the next one may start without racing it."""
        while time.monotonic() - self.started < timeout:
            if not self.alive():
                code = self.proc.returncode if self.proc else None
                raise ServiceExited(f"{self.name} exited with {code} before it spawned a worker; log: {self.log_path}")
            if self.workers():
                self.spawned = time.monotonic()
                return self.spawned - self.started
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} spawned no worker within {timeout}s; log: {self.log_path}")

    def launch(self, timeout: float, retries: int = 1) -> float:
        """Start and wait until the arbiter has bound everything and spawned its workers (wait_spawned): what
        Tiers.start does for one process at a time. BentoML picks its circus endpoints with bind(0) and releases them
        before circus binds them (bentoml._internal.utils.circus.create_standalone_arbiter): starting our processes
        one after another removes the race between them, but a program outside this harness that picks a port the
        same way can still take one in that window. Only that failure (the arbiter exits with EADDRINUSE in its log
        before any worker) is started again, at most `retries` times, each logged on stderr."""
        for attempt in range(retries + 1):
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            self.start()
            try:
                return self.wait_spawned(timeout)
            except ServiceExited:
                if attempt == retries or not address_in_use(self.log_path, offset):
                    raise
                self.bind_retries += 1
                said = (f"{self.name}: its arbiter lost an address to another process before binding it "
                        f"(EADDRINUSE); starting it again ({attempt + 2} of {retries + 1})")
                with open(self.log_path, "ab") as log:
                    log.write(f"{BIND_RETRY_MARK} {said}\n".encode())
                print(f"[tiers] {said}; log {self.log_path}", file=sys.stderr, flush=True)
        raise AssertionError("unreachable")

    def pids(self) -> list[int]:
        """The arbiter and every live process under it (BentoML's workers)."""
        if self.proc is None:
            return []
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        out = []
        for p in procs:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p.pid)
            except psutil.NoSuchProcess:
                continue
        self._seen.update(out)
        return sorted(out)

    def workers(self) -> dict[str, list[int]]:
        """BentoML service name -> PIDs of its worker processes under this arbiter."""
        out: dict[str, list[int]] = {}
        for pid in self.pids():
            try:
                cmd = psutil.Process(pid).cmdline()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if "_bentoml_impl.worker.service" in " ".join(cmd) and "--service-name" in cmd:
                i = cmd.index("--service-name")
                if i + 1 < len(cmd):
                    out.setdefault(cmd[i + 1], []).append(pid)
        return out

    def ready(self, timeout: float = 2.0) -> bool:
        try:
            return httpx.get(self.url + "/readyz", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, timeout: float) -> float:
        """Seconds from this start until /readyz answered 200."""
        while time.monotonic() - self.started < timeout:
            if not self.alive():
                code = self.proc.returncode if self.proc else None
                raise RuntimeError(f"{self.name} exited with {code}; log: {self.log_path}")
            self.pids()
            if self.ready():
                return time.monotonic() - self.started
            time.sleep(0.25)
        raise TimeoutError(f"{self.name} not ready after {timeout}s; log: {self.log_path}")

    def terminate(self, grace_s: float = 30.0) -> float:
        """SIGTERM to the arbiter (it stops its workers gracefully), then SIGKILL by PID to whatever outlived the grace
        period. Returns the seconds it took."""
        t0 = time.monotonic()
        pids = self.pids()
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self._kill_pids(set(pids) | self._seen, deadline=t0 + grace_s)
        return time.monotonic() - t0

    def kill(self) -> list[int]:
        """SIGKILL to the arbiter and every worker at once: the instance dies the way a node or a pod does."""
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._kill_pids(set(pids) | self._seen, deadline=time.monotonic())
        return pids

    def _kill_pids(self, pids: Iterable[int], deadline: float) -> None:
        for pid in pids:
            try:
                p = psutil.Process(pid)
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except psutil.TimeoutExpired:
                p.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied, ChildProcessError):
                pass

    def restart(self, grace_s: float = 30.0) -> ServiceProcess:
        self.terminate(grace_s)
        return self.start()

    def cleanup(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)


# ------------------------------------------------------------------------------------------------------ haproxy

@dataclass(frozen=True)
class Backend:
    """One haproxy frontend + backend: `port` on 127.0.0.1 balanced over `servers` (name -> port)."""

    name: str
    port: int
    servers: tuple[tuple[str, int], ...]
    maxconn: int = 0  # requests in flight per server (0: no limit); the rest wait in haproxy's queue
    queue_ms: int = 0  # ... at most this long, then 503 overloaded (JSON, Retry-After) from haproxy itself


def haproxy_config(backends: Iterable[Backend], cfg: BalancerConfig, stats_port: int) -> str:
    """The whole haproxy.cfg: loopback only, no daemon, no privileges; a stats page (CSV at /stats;csv)."""
    lines = [
        "global",
        "    maxconn 4096",
        "",
        "defaults",
        "    mode http",
        "    option http-buffer-request  # the whole request is in haproxy's buffer, so an L7 retry can resend it",
        f"    retries {cfg.retries}",
        "    option redispatch 1  # every retry goes to another server",
        f"    retry-on {' '.join(cfg.retry_on)}",
        f"    timeout connect {cfg.timeout_connect_ms}ms",
        f"    timeout client {int(cfg.timeout_client_s * 1000)}ms",
        f"    timeout server {int(cfg.timeout_server_s * 1000)}ms",
        "    timeout http-keep-alive 30s",
        f"    timeout check {max(cfg.check_inter_ms, 500)}ms",
        f"    default-server inter {cfg.check_inter_ms}ms fastinter {cfg.check_fastinter_ms}ms "
        f"downinter {cfg.check_inter_ms}ms fall {cfg.fall} rise {cfg.rise}",
        "",
    ]
    for b in backends:
        lines += [f"frontend {b.name}", f"    bind 127.0.0.1:{b.port}", f"    default_backend {b.name}_servers", "",
                  f"backend {b.name}_servers", f"    balance {cfg.balance}",
                  f"    option httpchk GET {cfg.check_path}", "    http-check expect status 200"]
        limit = f" maxconn {b.maxconn}" if b.maxconn else ""
        if b.maxconn:
            lines += [f"    timeout queue {b.queue_ms}ms",
                      "    http-error status 503 content-type application/json hdr Retry-After 1 string "
                      "'{\"error\":{\"code\":\"overloaded\",\"message\":\"over capacity\","
                      "\"details\":{\"reason\":\"edge_limit\"}}}'"]
        lines += [f"    server {name} 127.0.0.1:{port} check{limit}" for name, port in b.servers]
        lines.append("")
    lines += ["listen stats", f"    bind 127.0.0.1:{stats_port}", "    stats enable", "    stats uri /stats",
              "    stats refresh 1s", ""]
    return "\n".join(lines)


class HAProxy:
    """haproxy in the foreground (-db), config in `workdir`, stopped by PID."""

    def __init__(self, backends: list[Backend], cfg: BalancerConfig, workdir: Path, log_path: Path):
        binary = haproxy_binary()
        if binary is None:
            raise RuntimeError(f"haproxy not found in {':'.join(SYSTEM_BIN_DIRS)}: install the Debian package "
                               f"{HAPROXY_PACKAGE} (apt-get install -y {HAPROXY_PACKAGE}; .ci/run does)")
        self.binary, self.backends, self.cfg, self.log_path = binary, backends, cfg, log_path
        self._stats_reservation = ReservedPort()  # held until stop(): no other bind(0) gets it meanwhile
        self.stats_port = self._stats_reservation.number
        self.stats_url = f"http://127.0.0.1:{self.stats_port}/stats"
        self.config_path = workdir / "haproxy.cfg"
        self.config_path.write_text(haproxy_config(backends, cfg, self.stats_port))
        self.proc: subprocess.Popen | None = None

    def start(self) -> HAProxy:
        check = subprocess.run([self.binary, "-c", "-q", "-f", str(self.config_path)], capture_output=True,
                               text=True, timeout=30)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy refused {self.config_path}: {check.stdout}{check.stderr}")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([self.binary, "-db", "-f", str(self.config_path)], stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"haproxy exited with {self.proc.returncode}; log: {self.log_path}")
            try:
                httpx.get(self.stats_url, timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise TimeoutError(f"haproxy stats page not up; log: {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: haproxy's hard stop
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._stats_reservation.release()

    def stats(self) -> list[dict[str, str]]:
        """haproxy's CSV stats: one dict per frontend, backend and server row (pxname, svname, status, wretr, ...)."""
        text = httpx.get(self.stats_url + ";csv", timeout=2).text
        lines = [ln for ln in text.splitlines() if ln.strip()]
        header = lines[0].lstrip("# ").split(",")
        return [dict(zip(header, ln.split(","))) for ln in lines[1:]]

    def servers(self, backend: str) -> dict[str, dict[str, str]]:
        return {r["svname"]: r for r in self.stats()
                if r["pxname"] == f"{backend}_servers" and r["svname"] not in ("FRONTEND", "BACKEND")}

    def counters(self, backend: str) -> dict[str, int]:
        """Totals of the backend: requests, retries, redispatches, 5xx answered, connection and response errors."""
        row = next(r for r in self.stats() if r["pxname"] == f"{backend}_servers" and r["svname"] == "BACKEND")
        return {k: int(row.get(f) or 0) for k, f in (("requests", "stot"), ("retries", "wretr"),
                                                     ("redispatches", "wredis"), ("http_5xx", "hrsp_5xx"),
                                                     ("connection_errors", "econ"), ("response_errors", "eresp"))}

    def wait_up(self, backend: str, names: Iterable[str], timeout: float = 30) -> float:
        """Seconds until every named server of `backend` is UP in haproxy's view."""
        t0 = time.monotonic()
        want = set(names)
        while time.monotonic() - t0 < timeout:
            servers = self.servers(backend)
            if all(servers.get(n, {}).get("status") == "UP" for n in want):
                return time.monotonic() - t0
            time.sleep(0.1)
        raise TimeoutError(f"haproxy {backend}: {want} not all UP after {timeout}s: "
                           f"{ {n: s.get('status') for n, s in self.servers(backend).items()} }")


# ---------------------------------------------------------------------------------------------------- the tiers

def subset_models_file(source: Path, deployments: Iterable[str], out: Path) -> Path:
    """A models file with only the named deployments (defaults kept where they still name one)."""
    raw = yaml.safe_load(source.read_text())
    want = list(deployments)
    deps = [d for d in raw["deployments"] if d["name"] in want]
    missing = set(want) - {d["name"] for d in deps}
    if missing:
        raise ValueError(f"{source} has no deployment {sorted(missing)}")
    names = {d["name"] for d in deps}
    raw["deployments"] = deps
    raw["defaults"] = {f: n for f, n in (raw.get("defaults") or {}).items() if n in names}
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


RUNNER_HISTOGRAMS = {  # histogram: (what its sum counts, what its count counts), per slot
    "triserve_runner_batch_size": ("items", "calls"),
    "triserve_runner_merged_calls": ("merged", "computations"),
    "triserve_runner_gather_seconds": ("gather_s", "gathers"),
}


def runner_batches(url: str, timeout: float = 3.0) -> dict[str, float]:
    """Per slot, so far, of one runner replica: items and runner batches (triserve_runner_batch_size sum and count),
    callers' calls and the computations that served them (runners/merge.py), time spent gathering and gathers."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    text = httpx.get(url + "/metrics", timeout=timeout).text
    for fam in text_string_to_metric_families(text):
        if fam.name not in RUNNER_HISTOGRAMS:
            continue
        total, count = RUNNER_HISTOGRAMS[fam.name]
        for s in fam.samples:
            key = total if s.name.endswith("_sum") else count if s.name.endswith("_count") else None
            if key:
                out[f"{s.labels['slot']}:{key}"] = out.get(f"{s.labels['slot']}:{key}", 0.0) + s.value
    return out


class Tiers:
    """`with Tiers(TiersConfig(...)) as t: ...` - runner replicas, haproxy, gateways; stopped by PID on exit."""

    RUNNER_BACKEND, GATEWAY_BACKEND = "runners", "gateways"

    def __init__(self, cfg: TiersConfig):
        if cfg.runners < 1 or cfg.gateways < 1:
            raise ValueError("need at least one runner replica and one gateway")
        self.cfg = cfg
        self.workdir = Path(tempfile.mkdtemp(prefix="triserve-tiers-"))
        self.log_dir = cfg.log_dir or self.workdir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {"TRISERVE_REGISTRY_DIR": str(cfg.registry_dir), **cfg.env}
        if cfg.deployments:
            source = cfg.models_file or Path(os.environ.get("TRISERVE_MODELS_FILE") or MODELS_FILE)
            env["TRISERVE_MODELS_FILE"] = str(subset_models_file(source, cfg.deployments,
                                                                 self.workdir / "models.yaml"))
        elif cfg.models_file:
            env["TRISERVE_MODELS_FILE"] = str(cfg.models_file)
        # every port handed to a process stays reserved until stop() (scripts/drills/ports.py), restarts included
        self.ports = PortPool()
        self.runner_lb_port = self.ports.take()
        self.runner_lb_url = f"http://127.0.0.1:{self.runner_lb_port}"
        self.runners = [ServiceProcess(f"runner-{i + 1}", RUNNER_SERVICE, self.ports.take(),
                                       {**env, **cfg.runner_env}, self.log_dir / f"runner-{i + 1}.log", cfg.root)
                        for i in range(cfg.runners)]
        depends = {DEPENDS_ENV: f"{RUNNER_SERVICE}={self.runner_lb_url}"}
        self.gateways = [ServiceProcess(f"gateway-{j + 1}", ENTRY_SERVICE, self.ports.take(),
                                        {**env, "TRISERVE_GRPC__PORT": str(self.ports.take()), **cfg.gateway_env,
                                         **depends},
                                        self.log_dir / f"gateway-{j + 1}.log", cfg.root)
                         for j in range(cfg.gateways)]
        backends = [Backend(self.RUNNER_BACKEND, self.runner_lb_port,
                            tuple((r.name, r.port) for r in self.runners))]
        self.gateway_lb_url: str | None = None
        if cfg.gateway_lb:
            port = self.ports.take()
            self.gateway_lb_url = f"http://127.0.0.1:{port}"
            backends.append(Backend(self.GATEWAY_BACKEND, port, tuple((g.name, g.port) for g in self.gateways),
                                    cfg.balancer.gateway_maxconn, cfg.balancer.gateway_queue_ms))
        self.haproxy = HAProxy(backends, cfg.balancer, self.workdir, self.log_dir / "haproxy.log")
        self.timings: dict[str, float] = {}

    @property
    def url(self) -> str:
        """Where clients go: the gateway load balancer, else the first gateway."""
        return self.gateway_lb_url or self.gateways[0].url

    def start(self) -> Tiers:
        """One process at a time until its arbiter is up (ServiceProcess.launch: no two BentoML arbiters pick and
        bind their circus endpoints at the same time), then every process loads its models in parallel."""
        t0 = time.monotonic()
        try:
            for r in self.runners:
                self.timings[f"{r.name}_spawned_s"] = round(self.launch(r), 2)
            self.haproxy.start()
            for g in self.gateways:
                self.timings[f"{g.name}_spawned_s"] = round(self.launch(g), 2)
            for p in [*self.runners, *self.gateways]:
                self.timings[f"{p.name}_ready_s"] = round(p.wait_ready(self.cfg.ready_timeout_s), 2)
            self.haproxy.wait_up(self.RUNNER_BACKEND, [r.name for r in self.runners])
            if self.gateway_lb_url:
                self.haproxy.wait_up(self.GATEWAY_BACKEND, [g.name for g in self.gateways])
            self.check_remote()
        except BaseException:
            self.stop()
            raise
        self.timings["all_ready_s"] = round(time.monotonic() - t0, 2)
        return self

    def launch(self, p: ServiceProcess) -> float:
        """(Re)start one process of the tiers and wait until its arbiter is up (ServiceProcess.launch); drills restart
        replicas through this too."""
        return p.launch(self.cfg.spawn_timeout_s, self.cfg.bind_retries)

    def check_remote(self) -> dict[str, dict]:
        """Every gateway reaches the runner tier through the load balancer and runs no runner of its own: no runner
        worker under a gateway's arbiter, and each gateway worker's BENTOML_RUNNER_MAP (what BentoML resolves
        `bentoml.depends(ModelRunner)` from) maps triserve-runner to the balancer's URL."""
        out = {}
        for g in self.gateways:
            workers = g.workers()
            if set(workers) != {ENTRY_SERVICE}:
                raise RuntimeError(f"{g.name} runs {sorted(workers)} workers, expected only {ENTRY_SERVICE}")
            maps = []
            for pid in workers[ENTRY_SERVICE]:
                runner_map = json.loads(psutil.Process(pid).environ().get("BENTOML_RUNNER_MAP") or "{}")
                if runner_map.get(RUNNER_SERVICE) != self.runner_lb_url:
                    raise RuntimeError(f"{g.name} worker {pid}: BENTOML_RUNNER_MAP {runner_map} does not send "
                                       f"{RUNNER_SERVICE} to {self.runner_lb_url}: it would run the runner in process")
                maps.append(runner_map)
            out[g.name] = {"workers": workers, "runner_map": maps[0]}
        return out

    def runner_batches(self) -> dict[str, dict[str, float]]:
        """Per runner replica: items and calls per slot so far (its /metrics)."""
        return {r.name: runner_batches(r.url) for r in self.runners if r.alive()}

    def pids(self) -> list[int]:
        """Every process of both tiers and their load balancer."""
        balancer = [self.haproxy.proc.pid] if self.haproxy.proc is not None else []
        return [pid for p in (*self.runners, *self.gateways) for pid in p.pids()] + balancer

    def describe(self) -> dict:
        return {"gateway_lb": self.gateway_lb_url, "runner_lb": self.runner_lb_url,
                "haproxy_stats": self.haproxy.stats_url, "haproxy_config": str(self.haproxy.config_path),
                "runners": {r.name: {"url": r.url, "pids": r.pids()} for r in self.runners},
                "gateways": {g.name: {"url": g.url, "pids": g.pids()} for g in self.gateways},
                "depends": f"{DEPENDS_ENV}={RUNNER_SERVICE}={self.runner_lb_url}",
                "logs": str(self.log_dir), "timings": self.timings,
                "bind_retries": {p.name: p.bind_retries for p in (*self.runners, *self.gateways) if p.bind_retries}}

    def stop(self) -> None:
        """Gateways, then the load balancer, then the runners; every process by PID."""
        for p in self.gateways:
            p.terminate(grace_s=20)
        self.haproxy.stop()
        for p in self.runners:
            p.terminate(grace_s=20)
        for p in [*self.gateways, *self.runners]:
            p.cleanup()
        self.ports.release()  # every process that used them is gone
        shutil.rmtree(self.workdir, ignore_errors=True)  # haproxy.cfg, the models file; logs too unless log_dir

    def __enter__(self) -> Tiers:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--registry", type=Path, default=ROOT / "models" / "store", help="registry root")
    ap.add_argument("--runners", type=int, default=2, help="runner replicas behind haproxy")
    ap.add_argument("--gateways", type=int, default=1, help="gateway instances")
    ap.add_argument("--gateway-lb", action="store_true", help="also put haproxy in front of the gateways")
    ap.add_argument("--deployments", nargs="*", default=[], help="serve only these deployments (default: all)")
    ap.add_argument("--models-file", type=Path, default=None, help="models file (default: configs/models.yaml)")
    ap.add_argument("--gateway-workers", type=int, default=None, help="TRISERVE_GATEWAY__WORKERS of each gateway")
    ap.add_argument("--edge-limit", type=int, default=0, metavar="N",
                    help="with --gateway-lb: at most N requests in flight per gateway, the excess refused by haproxy "
                         "(503 overloaded) after --edge-queue-ms; set N to the concurrency of your capacity test")
    ap.add_argument("--edge-queue-ms", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (default: until Ctrl-C)")
    ap.add_argument("--log-dir", type=Path, default=None)
    args = ap.parse_args(argv)
    gateway_env = {"TRISERVE_GATEWAY__WORKERS": str(args.gateway_workers)} if args.gateway_workers else {}
    cfg = TiersConfig(registry_dir=args.registry.resolve(), runners=args.runners, gateways=args.gateways,
                      gateway_lb=args.gateway_lb, deployments=tuple(args.deployments),
                      models_file=args.models_file, gateway_env=gateway_env, log_dir=args.log_dir,
                      balancer=BalancerConfig(gateway_maxconn=args.edge_limit, gateway_queue_ms=args.edge_queue_ms))
    if args.edge_limit and not args.gateway_lb:
        ap.error("--edge-limit needs --gateway-lb (the limit lives in the haproxy in front of the gateways)")
    stop = {"now": False}

    def on_signal(signum, frame) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with Tiers(cfg) as tiers:
        print(json.dumps(tiers.describe(), indent=2), flush=True)
        print(f"serving on {tiers.url} (Ctrl-C stops everything)", flush=True)
        t0 = time.monotonic()
        while not stop["now"] and (not args.seconds or time.monotonic() - t0 < args.seconds):
            time.sleep(0.5)
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
