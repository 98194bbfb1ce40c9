"""`make lock`: the one locked dependency set (locks/*.txt) that the tests, the Bentos and the images install.

    python -m scripts.lock                   # re-resolve pyproject.toml into locks/, keeping every pin still allowed
    python -m scripts.lock --upgrade         # newest versions pyproject.toml allows
    python -m scripts.lock --check           # offline: do the locks still satisfy pyproject.toml and each other?

Why one set: `bentoml build` used to resolve the Bento's packages by itself (lock_packages), so the image ran
versions nobody tested (protobuf 7 under stubs generated for 6). Now pyproject.toml states the ranges and `uv pip
compile` turns them into four pinned files, each constrained by the one before, so a package shared by two files has
the same version in both:

    locks/dev-cpu.txt      dependencies + cpu + export + dev + batch extras   make install (the tests' environment)
    locks/serving-cpu.txt  dependencies + cpu                  bentofile.yaml python.requirements_txt (the CPU image)
    locks/serving-gpu.txt  dependencies + gpu                  bentofile.gpu.yaml (the GPU image)
    locks/dev-gpu.txt      dependencies + gpu + export + dev + batch extras   make install ORT=gpu

uv takes pip's configured package sources (`pip config list`: find-links, extra index URLs, the constraints file) so
a lock made here resolves against what this machine's pip installs. The check is pure reading (no network), run by
tests/scripts/test_lock.py and `make bento` / `make image`.
"""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from scripts.imagetools import StepFailed, venv_tool

PROJECT_ROOT = Path(__file__).resolve().parent.parent
LOCK_DIR = PROJECT_ROOT / "locks"
PYTHON_VERSION = "3.11"  # the images' Python (bentofile docker.python_version)


@dataclass(frozen=True)
class Lock:
    """One locked file: the extras of pyproject.toml it pins, and the locks whose pins it must keep."""

    name: str
    extras: tuple[str, ...]
    constrained_by: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return LOCK_DIR / f"{self.name}.txt"


# in resolution order: each file is compiled with the ones before it as constraints
# the batch extras (batch/: pyarrow, Ray Data, Spark) are in the dev sets (their tests run there), not in the images
BATCH = ("batch", "batch-ray", "batch-spark")
LOCKS = (
    Lock("dev-cpu", ("cpu", "export", "dev", *BATCH)),
    Lock("serving-cpu", ("cpu",), ("dev-cpu",)),
    Lock("serving-gpu", ("gpu",), ("serving-cpu",)),
    Lock("dev-gpu", ("gpu", "export", "dev", *BATCH), ("serving-gpu", "dev-cpu")),
)
BY_NAME = {lock.name: lock for lock in LOCKS}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")


def read_pins(path: Path) -> dict[str, str]:
    """canonical name -> version of a `name==version` requirements file (comments and options ignored)."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = PIN.match(line.strip())
        if match:
            pins[str(canonicalize_name(match.group(1)))] = match.group(2)
    return pins


def pyproject_requirements(extras: tuple[str, ...], pyproject: Path | None = None) -> list[Requirement]:
    """[project].dependencies + the named extras of pyproject.toml."""
    import tomllib

    project = tomllib.loads((pyproject or PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    missing = [e for e in extras if e not in optional]
    if missing:
        raise StepFailed(f"pyproject.toml has no optional-dependencies {missing}")
    return [Requirement(r) for r in [*project["dependencies"], *(r for e in extras for r in optional[e])]]


def problems(root: Path | None = None) -> list[str]:
    """What is wrong with the locks, read offline: a pyproject requirement a lock lacks or pins outside its range, or
    a package two locks pin differently (a lock and the one it is constrained by)."""
    root = root or PROJECT_ROOT
    found = []
    env = {key: str(value) for key, value in default_environment().items()}
    env |= {"python_version": PYTHON_VERSION, "python_full_version": PYTHON_VERSION + ".0"}
    pins = {}
    for lock in LOCKS:
        path = root / "locks" / f"{lock.name}.txt"
        if not path.is_file():
            found.append(f"{path.relative_to(root)} is missing (make lock)")
            continue
        pins[lock.name] = read_pins(path)
    for lock in LOCKS:
        if lock.name not in pins:
            continue
        have = pins[lock.name]
        for req in pyproject_requirements(lock.extras, root / "pyproject.toml"):
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            name = str(canonicalize_name(req.name))
            if name not in have:
                found.append(f"locks/{lock.name}.txt lacks {req} (pyproject.toml): make lock")
            elif not req.specifier.contains(have[name], prereleases=True):
                found.append(f"locks/{lock.name}.txt pins {name}=={have[name]} outside {req} (pyproject.toml): "
                             "make lock")
        for other in lock.constrained_by:
            for name, version in pins.get(other, {}).items():
                if name in have and have[name] != version:
                    found.append(f"{name}: locks/{lock.name}.txt pins {have[name]}, locks/{other}.txt {version}")
    return found


def pip_sources() -> list[str]:
    """uv options for the package sources pip is configured with here (pip.conf / PIP_* environment)."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                         check=False).stdout
    config: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        config[key.split(".", 1)[-1]] = value.strip().strip("'\"")
    args = []
    for url in config.get("index-url", "").split():
        args += ["--index-url", url]
    for url in config.get("extra-index-url", "").split():
        args += ["--extra-index-url", url]
    for link in config.get("find-links", "").split():
        args += ["--find-links", link]
    for path in config.get("constraint", "").split():
        args += ["--constraint", path]
    if len([a for a in args if a in ("--index-url", "--extra-index-url", "--find-links")]) > 0:
        args += ["--index-strategy", "unsafe-best-match"]  # pip's rule: the best version from any source
    return args


def compile_lock(lock: Lock, upgrade: bool = False) -> None:
    uv = venv_tool("uv")
    cmd = [uv, "pip", "compile", "pyproject.toml", "--quiet", "--python-version", PYTHON_VERSION,
           "--annotation-style", "line", "--custom-compile-command", "make lock", "--output-file", str(lock.path)]
    for extra in lock.extras:
        cmd += ["--extra", extra]
    for other in lock.constrained_by:
        cmd += ["--constraint", str(BY_NAME[other].path)]
    if upgrade:
        cmd.append("--upgrade")
    cmd += pip_sources()
    print("+", shlex.join(cmd), flush=True)
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, check=False)
    if done.returncode != 0:
        raise StepFailed(f"uv pip compile for locks/{lock.name}.txt failed ({done.returncode})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only check the locks against pyproject.toml (offline)")
    ap.add_argument("--upgrade", action="store_true", help="take the newest allowed versions, not the locked ones")
    args = ap.parse_args(argv)
    if not args.check:
        LOCK_DIR.mkdir(exist_ok=True)
        try:
            for lock in LOCKS:
                compile_lock(lock, upgrade=args.upgrade)
        except StepFailed as exc:
            print(f"lock: {exc}", file=sys.stderr)
            return 1
    found = problems()
    for line in found:
        print(f"lock: {line}", file=sys.stderr)
    if not found:
        print("locks/: " + ", ".join(f"{lock.name}.txt {len(read_pins(lock.path))} pins" for lock in LOCKS))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
