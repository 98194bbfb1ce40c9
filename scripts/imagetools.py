"""Shared pieces of scripts/containerize.py and scripts/smoke_image.py: timed steps, commands, system tools,
container storage and the local OCI registry.

Everything container-related runs daemonless here (no Docker engine on these machines):
  * buildah builds (`bentoml containerize --backend buildah`), podman runs, skopeo inspects;
  * one project-local containers-storage (vfs driver: no overlay mounts needed) under .cache/containers, selected
    through CONTAINERS_STORAGE_CONF, so other users' /var/lib/containers is never touched;
  * builds use chroot isolation (BUILDAH_ISOLATION=chroot: no user namespaces or cgroups needed);
  * podman runs with runc and a containers.conf without default ulimits (this VM's root lacks CAP_SYS_RESOURCE, so
    podman's default RLIMIT_NOFILE/NPROC raise fails; crun refuses the host's hybrid cgroup layout).
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CACHE = PROJECT_ROOT / ".cache"
CONTAINERS_DIR = CACHE / "containers"
REGISTRY_DIR = CACHE / "registry"
BENTOML_HOME = Path(os.environ.get("BENTOML_HOME", CACHE / "bentoml"))  # the Makefile's, so Bentos land there
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


class StepFailed(RuntimeError):
    pass


class Steps:
    """Numbered, timed steps: `with steps.step("bentoml build"): ...`; `steps.summary()` prints the timings."""

    def __init__(self, title: str, total: int):
        self.title, self.total, self.n = title, total, 0
        self.timings: list[tuple[str, float, str]] = []
        self.started = time.monotonic()
        print(f"=== {title}", flush=True)

    @contextmanager
    def step(self, name: str):
        self.n += 1
        print(f"\n==> [{self.n}/{self.total}] {name}", flush=True)
        t0 = time.monotonic()
        try:
            yield
        except BaseException:
            dt = time.monotonic() - t0
            self.timings.append((name, dt, "FAILED"))
            print(f"    FAILED after {dt:.1f}s", flush=True)
            self.summary()
            raise
        dt = time.monotonic() - t0
        self.timings.append((name, dt, "ok"))
        print(f"    ok in {dt:.1f}s", flush=True)

    def summary(self) -> None:
        print(f"\n=== {self.title}: timings", flush=True)
        for i, (name, dt, status) in enumerate(self.timings, 1):
            print(f"  {i:>2}. {name:<62} {dt:8.1f}s  {status}")
        print(f"  total {time.monotonic() - self.started:.1f}s", flush=True)


def say(msg: str) -> None:
    print(f"    {msg}", flush=True)


_NOISE = ("%|", "B/s]", "it/s]", "UserWarning: The parameter --quiet", "self.make_parser(ctx)",
          "self.parse_args(ctx, args)")


def _noise(line: str) -> bool:
    """Progress bars and BentoML's click warnings: kept in the logs, not printed."""
    return not line.strip() or any(n in line for n in _NOISE)


def run(cmd: list[str], *, env: dict | None = None, cwd: Path | None = None, log: Path | None = None,
        tail: int = 6, timeout: float | None = None, check: bool = True, quiet: bool = False,
        stream: bool = False) -> subprocess.CompletedProcess:
    """Run a command, print it, keep its whole output in `log` (if given), print the last `tail` lines."""
    if not quiet:
        print("    $ " + " ".join(shlex.quote(str(c)) for c in cmd), flush=True)
    full_env = {**os.environ, **(env or {})}
    if stream:
        proc = subprocess.Popen([str(c) for c in cmd], env=full_env, cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            print("      | " + line.rstrip(), flush=True)
        rc = proc.wait(timeout=timeout)
        out = "".join(lines)
        res = subprocess.CompletedProcess(cmd, rc, out, "")
    else:
        try:
            res = subprocess.run([str(c) for c in cmd], env=full_env, cwd=cwd, capture_output=True, text=True,
                                 errors="replace", timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise StepFailed(f"timed out after {timeout}s: {' '.join(map(str, cmd))}") from exc
        out = (res.stdout or "") + (res.stderr or "")
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(out)
    if not stream and tail and not quiet:
        for line in [ln for ln in out.rstrip().splitlines() if not _noise(ln)][-tail:]:
            print("      | " + line, flush=True)
    if check and res.returncode != 0:
        if not stream and quiet:
            for line in out.rstrip().splitlines()[-30:]:
                print("      | " + line, flush=True)
        raise StepFailed(f"exit {res.returncode}: {' '.join(map(str, cmd))}" + (f" (full log: {log})" if log else ""))
    res.stdout = out
    return res


def ensure_tools(tools: dict[str, str], *, allow_install: bool = True) -> None:
    """tools: binary -> Debian package. Missing ones are installed with apt-get (needs root), with a message."""
    missing = {b: p for b, p in tools.items() if shutil.which(b) is None}
    present = [b for b in tools if b not in missing]
    if present:
        say("found: " + ", ".join(f"{b} ({shutil.which(b)})" for b in present))
    if not missing:
        return
    pkgs = sorted(set(missing.values()))
    if not allow_install:
        raise StepFailed(f"missing tools {sorted(missing)}: apt-get install -y {' '.join(pkgs)}")
    if os.geteuid() != 0:
        raise StepFailed(f"missing tools {sorted(missing)} and not root: sudo apt-get install -y {' '.join(pkgs)}")
    say(f"INSTALLING missing tools {sorted(missing)} with apt-get: packages {pkgs}")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    res = run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *pkgs], env=env, check=False, tail=2,
              timeout=1200)
    if res.returncode != 0:
        run(["apt-get", "update", "-q"], env=env, tail=1, timeout=600)
        run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *pkgs], env=env, tail=2, timeout=1200)
    # Debian's docker-registry package starts its own daemon on :5000 (htpasswd auth): ours is started on demand.
    if "docker-registry" in pkgs:
        subprocess.run(["service", "docker-registry", "stop"], capture_output=True)


def container_env(storage: str = "storage") -> dict[str, str]:
    """Environment selecting the project-local containers-storage (vfs) and containers.conf."""
    CONTAINERS_DIR.mkdir(parents=True, exist_ok=True)
    graphroot = CONTAINERS_DIR / storage
    runroot = Path("/tmp") / f"triserve-containers-run-{os.getuid()}" / storage
    conf = CONTAINERS_DIR / f"{storage}.conf"
    conf.write_text(
        "# generated by scripts/imagetools.py: project-local storage, vfs driver (no overlay mounts needed)\n"
        f'[storage]\ndriver = "vfs"\ngraphroot = "{graphroot}"\nrunroot = "{runroot}"\n')
    cconf = CONTAINERS_DIR / "containers.conf"
    cconf.write_text(
        "# generated by scripts/imagetools.py\n"
        "[containers]\n"
        "# no default ulimits: raising RLIMIT_NOFILE/NPROC above the hard limit needs CAP_SYS_RESOURCE (absent here)\n"
        "default_ulimits = []\n"
        "[engine]\n"
        "# crun refuses this host's hybrid cgroup v1/v2 layout; runc runs\n"
        'runtime = "runc"\n')
    return {"CONTAINERS_STORAGE_CONF": str(conf), "CONTAINERS_CONF": str(cconf), "STORAGE_DRIVER": "vfs",
            "BUILDAH_ISOLATION": "chroot", "BENTOML_HOME": str(BENTOML_HOME), "BENTOML_DO_NOT_TRACK": "True"}


def git_commit() -> tuple[str, bool]:
    """(HEAD sha, working tree dirty?)"""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT,
                                    capture_output=True, text=True).stdout.strip())
        return sha, dirty
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def registry_up(addr: str) -> bool:
    try:
        return httpx.get(f"http://{addr}/v2/", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def ensure_registry(addr: str = "127.0.0.1:5000") -> str:
    """An OCI registry answering on http://addr/v2/: the one already there, or Debian's docker-registry started
    here (filesystem storage under .cache/registry, PID in .cache/registry/registry.pid; stop it with
    `kill $(cat .cache/registry/registry.pid)`)."""
    if registry_up(addr):
        say(f"registry already answering on http://{addr}/v2/ (reused)")
        return "reused"
    host, _, port = addr.rpartition(":")
    if host not in ("127.0.0.1", "localhost"):
        raise StepFailed(f"registry {addr} does not answer and is not local: start it or pass --registry")
    binary = shutil.which("docker-registry") or shutil.which("registry")
    if binary is None:
        raise StepFailed("docker-registry is not installed (apt-get install docker-registry)")
    REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    config = REGISTRY_DIR / "config.yml"
    config.write_text(
        "# generated by scripts/imagetools.py: local registry for images and model artifacts\n"
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {REGISTRY_DIR / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: {host}:{port}\n")
    log = open(REGISTRY_DIR / "registry.log", "ab")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    (REGISTRY_DIR / "registry.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + 30
    while not registry_up(addr):
        if proc.poll() is not None:
            raise StepFailed(f"docker-registry exited {proc.returncode}: see {REGISTRY_DIR / 'registry.log'}")
        if time.monotonic() > deadline:
            os.kill(proc.pid, signal.SIGTERM)
            raise StepFailed("docker-registry did not answer within 30s")
        time.sleep(0.2)
    say(f"started {binary} serve {config} (pid {proc.pid}, data {REGISTRY_DIR / 'data'}); "
        f"stop: kill $(cat {REGISTRY_DIR / 'registry.pid'})")
    return "started"


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


def die(msg: str) -> None:
    print(f"ERROR: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)
