"""A `bentoml serve triserve.services.gateway:Gateway` subprocess on free loopback ports, for tests and drills.

Each server gets its own BENTOML_HOME (BentoML keeps its Prometheus multiprocess files there and wipes them at start,
so servers sharing one home erase each other's metrics) and its own gRPC port. Drills also need the PIDs
of the worker processes (found with psutil among the serve process's children) and a stop that also ends workers
left behind. BentoML's process manager puts each worker in a session of its own, so signalling the serve process's
group reaches only the arbiter; a SIGTERM to it stops the workers gracefully, and anything still alive after that is
killed here by PID.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import httpx
import psutil

from scripts.drills.ports import BIND_RETRY_MARK, PortPool, address_in_use

ROOT = Path(__file__).resolve().parents[2]
RUNNER_SERVICE = "triserve-runner"
ENTRY_SERVICE = "triserve"
QUIET_ENV = {"YOLO_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "BENTOML_DO_NOT_TRACK": "True"}


def free_port() -> int:
    """A port nothing listens on right now, released at once: for a client that must find nothing there. A port a
    server of ours will bind goes through scripts/drills/ports.py (held until the server stops; no race)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _service_name(cmdline: list[str]) -> str | None:
    if "--service-name" in cmdline:
        i = cmdline.index("--service-name")
        if i + 1 < len(cmdline):
            return cmdline[i + 1]
    return None


def pin_threads(pids: Iterable[int], cpus: set[int]) -> int:
    """Every thread of these processes onto `cpus` (sched_setaffinity is per thread on Linux; threads made later
    inherit their creator's): keeps a load generator off the cores of the system it measures. Returns how many."""
    pinned = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), cpus)
                pinned += 1
            except (ProcessLookupError, FileNotFoundError):
                continue
    return pinned


def gateway_service(root: Path) -> str:
    """The gateway's import string in the tree at `root`: trees before the one-name layout (an A/B's base commit)
    served `services.gateway:Gateway`."""
    return "triserve.services.gateway:Gateway" if (root / "triserve" / "services").exists() \
        else "services.gateway:Gateway"


class Server:
    """`with Server(registry) as srv: srv.wait_ready(); ...` - always on 127.0.0.1."""

    def __init__(self, registry_dir: Path, env: dict[str, str] | None = None, log_path: Path | None = None,
                 port: int | None = None, root: Path = ROOT, command: list[str] | None = None,
                 max_bind_retries: int = 1, verify: ssl.SSLContext | bool = True):
        """`root`: the source tree whose code is served (another checkout of the project, e.g. for an A/B of two
        commits: scripts/bench/ab.py); this tree by default. `command`: what starts the server, before `--host ...
        --port ...` (default `python -m bentoml serve triserve.services.gateway:Gateway`; e.g. the `triserve serve`
        console
        script); it runs in `root`. `max_bind_retries`: how many times a server that exits before it is up with
        EADDRINUSE in its log (`log_path` needed) is started again on its held ports (see _retry_lost_bind). With
        TRISERVE_TLS__CERTFILE in `env` the server speaks HTTPS: `verify` (an ssl.SSLContext trusting its CA, with a
        client certificate under mutual TLS) is how the harness's own probes reach it."""
        self.ports = PortPool()  # the ports this server binds, held until stop() (no pick-then-release race)
        self.port = port or self.ports.take()
        self.env = dict(env or {})
        self.verify = verify
        self.url = f"{'https' if self.env.get('TRISERVE_TLS__CERTFILE') else 'http'}://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.grpc_port = int(self.env.get("TRISERVE_GRPC__PORT") or self.ports.take())
        self.grpc_target = f"127.0.0.1:{self.grpc_port}"
        self.home = tempfile.mkdtemp(prefix="bentoml-home-")
        # runtime deployment changes persist per server (never into the checkout's .cache)
        self.state_file = Path(self.env.get("TRISERVE_DEPLOYMENTS_STATE_FILE") or Path(self.home) / "deployments.json")
        full_env = {**os.environ, **QUIET_ENV, "TRISERVE_REGISTRY_DIR": str(registry_dir), "BENTOML_HOME": self.home,
                    "TRISERVE_GRPC__PORT": str(self.grpc_port),
                    "TRISERVE_DEPLOYMENTS_STATE_FILE": str(self.state_file), **self.env}
        if log_path:
            log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb") if log_path else subprocess.DEVNULL
        command = command or [sys.executable, "-m", "bentoml", "serve", gateway_service(Path(root))]
        self._argv = [*command, "--host", "127.0.0.1", "--port", str(self.port)]
        self._root, self._full_env = root, full_env
        self.max_bind_retries = max_bind_retries
        self.bind_retries = 0  # starts lost to an address taken under the arbiter (_retry_lost_bind)
        self._seen: set[int] = set()
        self._spawn()

    def _spawn(self) -> None:
        self._log_offset = self.log_path.stat().st_size if self.log_path and self.log_path.exists() else 0
        self.started = time.monotonic()
        self.proc = subprocess.Popen(self._argv, cwd=self._root, env=self._full_env, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def _retry_lost_bind(self) -> bool:
        """The serve process has exited before it was up: start it again on the same (held) ports when this life's
        log says a bind failed with EADDRINUSE, at most max_bind_retries times. BentoML picks its circus endpoints
        with bind(0) and releases them before circus binds them (create_standalone_arbiter), so a program outside
        this harness that picks a port the same way can take one in that window; nothing else is retried."""
        if (self.log_path is None or self.bind_retries >= self.max_bind_retries
                or not address_in_use(self.log_path, self._log_offset)):
            return False
        self._end_processes()
        self.bind_retries += 1
        said = (f"server on port {self.port} exited with {self.proc.returncode}: a bind failed with EADDRINUSE; "
                f"starting it again ({self.bind_retries + 1} of {self.max_bind_retries + 1})")
        assert not isinstance(self._log, int)  # log_path is set: a log file of ours
        self._log.write(f"\n{BIND_RETRY_MARK} {said}\n".encode())
        self._log.flush()
        print(f"[server] {said}; log {self.log_path}", file=sys.stderr, flush=True)
        self._spawn()
        return True

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def wait_ready(self, timeout: float = 180) -> float:
        """Seconds from process start until /readyz answered 200."""
        from triserve_client import TriserveClient  # imported here: the process harness itself needs no API client

        with TriserveClient(self.url, verify=self.verify) as api:
            while time.monotonic() - self.started < timeout:
                if self.proc.poll() is not None:
                    if self._retry_lost_bind():
                        continue
                    raise RuntimeError(f"server exited with {self.proc.returncode}; log: {self.log_path}")
                self.workers()  # remember worker PIDs for stop()
                if api.ready(timeout=2):
                    return time.monotonic() - self.started
                time.sleep(0.25)
        raise TimeoutError(f"not ready after {timeout}s; log: {self.log_path}")

    def wait_listening(self, timeout: float = 120) -> float:
        """Seconds from process start until the HTTP port answers anything (e.g. /livez)."""
        while time.monotonic() - self.started < timeout:
            if self.proc.poll() is not None:
                if self._retry_lost_bind():
                    continue
                raise RuntimeError(f"server exited with {self.proc.returncode}; log: {self.log_path}")
            self.workers()
            try:
                httpx.get(f"{self.url}/livez", timeout=2, verify=self.verify)
                return time.monotonic() - self.started
            except httpx.HTTPError:
                time.sleep(0.25)
        raise TimeoutError(f"port {self.port} not listening after {timeout}s; log: {self.log_path}")

    def stop(self) -> None:
        self._end_processes()
        if not isinstance(self._log, int):  # a log file of ours (else subprocess.DEVNULL)
            self._log.close()
            self._log = subprocess.DEVNULL
        self.ports.release()
        shutil.rmtree(self.home, ignore_errors=True)

    def _end_processes(self) -> None:
        """SIGTERM to the serve process's group, SIGKILL after 20 s; then every worker seen that outlived it, by PID."""
        leftovers = self.pids()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # Workers live in their own sessions: end any that outlived the arbiter, by PID.
        deadline = time.monotonic() + 10
        for pid in leftovers:
            try:
                p = psutil.Process(pid)
                if _service_name(p.cmdline()) is None:
                    continue
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except psutil.TimeoutExpired:
                p.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- processes ------------------------------------------------------------------------------------------------
    def workers(self) -> dict[str, list[int]]:
        """Service name -> PIDs of its live worker processes (children of the serve process)."""
        out: dict[str, list[int]] = {}
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return out
        for child in children:
            try:
                name = _service_name(child.cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if name and child.status() != psutil.STATUS_ZOMBIE:
                out.setdefault(name, []).append(child.pid)
                self._seen.add(child.pid)
        return out

    def runner_pids(self) -> list[int]:
        return sorted(self.workers().get(RUNNER_SERVICE, []))

    def entry_pids(self) -> list[int]:
        return sorted(self.workers().get(ENTRY_SERVICE, []))

    def pids(self) -> list[int]:
        """Every process of the server seen so far: the arbiter and its workers."""
        self.workers()
        return sorted(self._seen)

    # -- probes ---------------------------------------------------------------------------------------------------
    def status(self, path: str, timeout: float = 3) -> int | str:
        try:
            return httpx.get(self.url + path, timeout=timeout).status_code
        except httpx.HTTPError as exc:
            return type(exc).__name__
