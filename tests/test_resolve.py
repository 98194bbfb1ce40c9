"""The published requirements resolve without the locks (issue 43 part 2): pyproject.toml's and client/pyproject.toml's
ranges, from PyPI, as a user's environment would meet them.

- a current pip (this environment's) resolves each distribution's serving set from scratch (empty cache, no pip
  configuration: --isolated) within 60 s, and what it picks satisfies every declared range (the top end);
- uv at `--resolution lowest-direct` resolves them too, and every declared lower bound can really be installed with
  the rest (the bottom end): a bound below what the other requirements allow (an OTLP exporter whose
  opentelemetry-proto wants protobuf < 5 next to protobuf>=6.33.5) fails here.

They need PyPI: without it they skip, saying so, unless TRISERVE_REQUIRE_PYPI=1 (then they fail). The locks (locks/,
tests/scripts/test_lock.py) stay the pinned set that make install, the Bentos and the images install.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from scripts.imagetools import venv_tool

ROOT = Path(__file__).resolve().parents[1]
PYPI = "https://pypi.org/simple"
BUDGET_S = 60  # the goal for an unlocked resolve
# distribution -> (its pyproject.toml, the extras of its serving set)
SETS = {"triserve": (ROOT / "pyproject.toml", ("cpu",)),
        "triserve-client": (ROOT / "client" / "pyproject.toml", ("grpc", "masks"))}


@cache
def _pypi_reachable() -> str | None:
    """None when PyPI's simple index answers, else why not."""
    try:
        with urllib.request.urlopen(f"{PYPI}/pip/", timeout=10) as resp:
            return None if resp.status == 200 else f"HTTP {resp.status}"
    except (OSError, urllib.error.URLError) as exc:
        return str(exc)


@pytest.fixture(autouse=True)
def _needs_pypi():
    why = _pypi_reachable()
    if why is None:
        return
    if os.environ.get("TRISERVE_REQUIRE_PYPI") == "1":
        pytest.fail(f"PyPI ({PYPI}) is not reachable: {why}")
    pytest.skip(f"PyPI ({PYPI}) is not reachable: {why}")


def requirements(dist: str) -> list[Requirement]:
    path, extras = SETS[dist]
    project = tomllib.loads(path.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    return [Requirement(r) for r in [*project["dependencies"], *(r for e in extras for r in optional[e])]]


def applicable(reqs: list[Requirement]) -> list[Requirement]:
    return [r for r in reqs if r.marker is None or r.marker.evaluate()]


def lower_bound(req: Requirement) -> str | None:
    """The declared lower bound as written (">=4.8" -> "4.8")."""
    bounds = [s.version for s in req.specifier if s.operator in (">=", "==", "~=")]
    return max(bounds, key=Version) if bounds else None


def series(version: str) -> SpecifierSet:
    """A bound's release series: 4.8 -> ==4.8.* (4.8.0.76 is at the bound 4.8: no release 4.8 exists)."""
    return SpecifierSet(f"=={version}.*")


@pytest.mark.parametrize("dist", SETS)
def test_a_current_pip_resolves_the_ranges_without_the_locks_in_under_60s(dist, tmp_path):
    reqs = requirements(dist)
    (tmp_path / "requirements.txt").write_text("\n".join(map(str, reqs)) + "\n")
    pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True).stdout.split()[1]
    cmd = [sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--ignore-installed", "--quiet",
           "--report", str(tmp_path / "report.json"), "--index-url", PYPI, "--cache-dir", str(tmp_path / "cache"),
           "-r", str(tmp_path / "requirements.txt")]
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUDGET_S, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"pip {pip} did not resolve {dist}'s requirements in {BUDGET_S} s (no lock, empty cache)")
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    picked = {str(canonicalize_name(item["metadata"]["name"])): item["metadata"]["version"]
              for item in json.loads((tmp_path / "report.json").read_text())["install"]}
    print(f"pip {pip}: {dist} (extras {','.join(SETS[dist][1])}) resolved without the lock, empty cache, in "
          f"{elapsed:.1f} s: {len(picked)} distributions")
    outside = {str(r): picked.get(str(canonicalize_name(r.name))) for r in applicable(reqs)
               if not r.specifier.contains(picked.get(str(canonicalize_name(r.name)), "0"), prereleases=True)}
    assert not outside, outside


def uv_lowest_direct(dist: str, tmp_path: Path, constraint: str | None = None) -> subprocess.CompletedProcess:
    path, extras = SETS[dist]
    cmd = [venv_tool("uv"), "pip", "compile", str(path), "--resolution", "lowest-direct", "--no-config",
           "--index-url", PYPI, "--cache-dir", str(tmp_path / "uv-cache"), "--python-version", "3.11",
           "--no-header", "--no-annotate", "--quiet", "--system-certs",
           *(a for e in extras for a in ("--extra", e))]
    if constraint:
        (tmp_path / "constraint.txt").write_text(constraint + "\n")
        cmd += ["--constraint", str(tmp_path / "constraint.txt")]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=BUDGET_S, cwd=tmp_path)


@pytest.mark.parametrize("dist", SETS)
def test_every_lower_bound_resolves_with_the_rest(dist, tmp_path):
    started = time.monotonic()
    done = uv_lowest_direct(dist, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"uv lowest-direct: {dist} resolved in {time.monotonic() - started:.1f} s")
    picked = {str(canonicalize_name(name)): version for name, _, version in
              (line.strip().partition("==") for line in done.stdout.splitlines() if "==" in line)}
    above = {}
    for req in applicable(requirements(dist)):
        low, got = lower_bound(req), picked.get(str(canonicalize_name(req.name)))
        assert got is not None, f"{req} missing from the resolution"
        if low is not None and not series(low).contains(got, prereleases=True):
            above[req.name] = (low, got)
    # uv need not pick every bound at once (lowest-direct is a preference); each bound left above must still resolve
    # with everything else when asked for explicitly
    for name, (low, got) in above.items():
        alone = uv_lowest_direct(dist, tmp_path, f"{name}{series(low)}")
        assert alone.returncode == 0, f"{name}>={low} is declared but {name}{series(low)} does not resolve: " + \
            alone.stderr[-2000:]
        print(f"  {name}: lowest-direct picked {got}; {name}{series(low)} resolves when asked for")
