"""The `triserve` console script (pyproject [project.scripts] -> scripts/cli.py), run as installed in the project's
environment (`make install`: pip install -e), from a clean shell (no activated venv, PATH=/usr/bin:/bin) and a
directory outside the checkout."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from scripts import cli

ROOT = Path(__file__).resolve().parents[2]
TRISERVE = Path(sys.executable).parent / "triserve"
CLEAN_ENV = {"HOME": os.environ.get("HOME", "/root"), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def triserve(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    assert TRISERVE.is_file(), f"{TRISERVE} missing: install the project (make install, or pip install -e . --no-deps)"
    return subprocess.run([str(TRISERVE), *args], cwd=cwd, env=CLEAN_ENV, capture_output=True, text=True,
                          timeout=120)


def _runnable_files(folder: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / "scripts" / folder).glob("*.py")
                  if not p.name.startswith("_") and 'if __name__ == "__main__":' in p.read_text())


def test_console_script_is_declared_and_packaged():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"triserve": "scripts.cli:main"}
    assert "scripts*" in project["tool"]["setuptools"]["packages"]["find"]["include"]


def test_help_lists_every_command(tmp_path):
    res = triserve("--help", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    for name in ("import", "registry", "rollout", "bench", "drill"):
        assert f"\n  {name} " in res.stdout, name
    assert "make serve" in res.stdout
    none = triserve(cwd=tmp_path)
    assert none.returncode == 2 and "usage: triserve" in none.stderr
    bad = triserve("serve", cwd=tmp_path)
    assert bad.returncode == 2 and "unknown command 'serve'" in bad.stderr


@pytest.mark.parametrize("command, module", [("import", "scripts.importer"), ("registry", "models.cli"),
                                             ("rollout", "scripts.rollout")])
def test_subcommand_help_is_the_modules_own(command, module, tmp_path):
    res = triserve(command, "--help", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"python -m {module}" in res.stdout  # the module's own argparse prog
    direct = subprocess.run([sys.executable, "-m", module, "--help"], cwd=tmp_path, env=CLEAN_ENV,
                            capture_output=True, text=True, timeout=120)
    assert res.stdout == direct.stdout


def test_subcommand_arguments_and_exit_status_pass_through(tmp_path):
    res = triserve("rollout", "no-such-action", cwd=tmp_path)
    assert res.returncode == 2 and "invalid choice: 'no-such-action'" in res.stderr
    res = triserve("import", "--help", cwd=tmp_path)
    assert "detection-pt" in res.stdout  # the importer kinds


@pytest.mark.parametrize("group, folder", [("bench", "bench"), ("drill", "drills")])
def test_list_shows_what_exists(group, folder, tmp_path):
    res = triserve(group, "--list", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    names = [line.split()[0] for line in res.stdout.splitlines() if line.strip()]
    assert names == _runnable_files(folder) and names
    assert all(len(line.split(None, 1)) == 2 for line in res.stdout.splitlines())  # name + docstring summary
    helped = triserve(group, "--help", cwd=tmp_path)
    assert helped.returncode == 0 and all(f"  {n} " in helped.stdout for n in names)
    missing = triserve(group, "no_such_thing", cwd=tmp_path)
    assert missing.returncode == 2 and f"unknown {group} 'no_such_thing'" in missing.stderr
    assert "server" not in names and "common" not in names  # helpers, not runnable


@pytest.mark.parametrize("group, package", [("bench", "scripts.bench"), ("drill", "scripts.drills")])
def test_every_bench_and_drill_answers_help_through_the_console_script(group, package, tmp_path):
    for name in cli.runnable(package):
        res = triserve(group, name, "--help", cwd=tmp_path)
        assert res.returncode == 0, f"{group} {name}: {res.stdout[-400:]}{res.stderr[-800:]}"
        assert res.stdout.startswith("usage:"), f"{group} {name}: {res.stdout[:200]}"


def test_the_dispatcher_runs_modules_with_this_interpreter(monkeypatch):
    calls = []
    monkeypatch.setattr(cli.os, "execv", lambda path, argv: calls.append((path, argv)))
    cli.main(["registry", "--registry", "x", "list"])
    cli.main(["bench", "nms_worst_case", "--runs", "3"])
    cli.main(["drill", "overload", "--help"])
    assert calls == [
        (sys.executable, [sys.executable, "-m", "models.cli", "--registry", "x", "list"]),
        (sys.executable, [sys.executable, "-m", "scripts.bench.nms_worst_case", "--runs", "3"]),
        (sys.executable, [sys.executable, "-m", "scripts.drills.overload", "--help"]),
    ]
