"""The `triserve` console script (pyproject [project.scripts] -> triserve/cli.py), run as installed in the project's
environment (`make install`: pip install -e), from a clean shell (no activated venv, PATH=/usr/bin:/bin) and a
directory outside the checkout; `triserve serve` started for real against the session's tiny registry, and refused
on its ports; `make help`."""
from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

import grpc
import httpx
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from scripts.drills.ports import ReservedPort
from tests.conftest import NO_CAPACITY_LIMITS, TINY_MODELS, Server
from triserve import cli
from triserve.configs.settings import Settings
from triserve.services import ports

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
    assert project["project"]["scripts"] == {"triserve": "triserve.cli:main"}
    assert "triserve*" in project["tool"]["setuptools"]["packages"]["find"]["include"]
    # checkout tools stay out of the wheel
    assert "scripts*" not in project["tool"]["setuptools"]["packages"]["find"]["include"]


def test_help_lists_every_command(tmp_path):
    res = triserve("--help", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    for name in ("import", "registry", "rollout", "bench", "drill"):
        assert f"\n  {name} " in res.stdout, name
    assert "make serve" in res.stdout
    none = triserve(cwd=tmp_path)
    assert none.returncode == 2 and "usage: triserve" in none.stderr
    assert "\n  serve " in res.stdout and "triserve --version" in res.stdout
    bad = triserve("no-such-command", cwd=tmp_path)
    assert bad.returncode == 2 and "unknown command 'no-such-command'" in bad.stderr


@pytest.mark.parametrize("command, module, prog", [("import", "triserve.importers", "triserve import"),
                                                   ("registry", "triserve.models.cli", "python -m triserve.models.cli"),
                                                   ("rollout", "triserve.rollout", "triserve rollout")])
def test_subcommand_help_is_the_modules_own(command, module, prog, tmp_path):
    res = triserve(command, "--help", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith(f"usage: {prog} ")  # the module's own argparse prog
    # scripts/ is not an installed package: run directly, a checkout tool runs from the checkout
    direct = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, env=CLEAN_ENV,
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
    names = cli.runnable(package)
    with ThreadPoolExecutor(max_workers=4) as pool:  # each a fresh interpreter: run a few at once
        answers = list(pool.map(lambda name: triserve(group, name, "--help", cwd=tmp_path), names))
    for name, res in zip(names, answers):
        assert res.returncode == 0, f"{group} {name}: {res.stdout[-400:]}{res.stderr[-800:]}"
        assert res.stdout.startswith("usage:"), f"{group} {name}: {res.stdout[:200]}"


def test_the_dispatcher_runs_modules_with_this_interpreter(monkeypatch):
    calls, envs = [], []
    monkeypatch.setattr(cli.os, "execve", lambda path, argv, env: (calls.append((path, argv)), envs.append(env)))
    cli.main(["registry", "--registry", "x", "list"])
    cli.main(["bench", "nms_worst_case", "--runs", "3"])
    cli.main(["drill", "overload", "--help"])
    # the checkout leads PYTHONPATH: scripts/ is a checkout tool, not an installed package
    assert all(env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT) for env in envs)
    assert calls == [
        (sys.executable, [sys.executable, "-m", "triserve.models.cli", "--registry", "x", "list"]),
        (sys.executable, [sys.executable, "-m", "scripts.bench.nms_worst_case", "--runs", "3"]),
        (sys.executable, [sys.executable, "-m", "scripts.drills.overload", "--help"]),
    ]


# -- triserve --version, triserve serve --------------------------------------------------------------------------------
def test_version_is_the_distributions_and_the_checkouts_commit(tmp_path):
    res = triserve("--version", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"triserve {importlib.metadata.version('triserve')}")
    first = res.stdout.splitlines()[0]
    if (ROOT / ".git").exists() and any(Path(d, "git").is_file() for d in ("/usr/local/bin", "/usr/bin", "/bin")):
        assert re.fullmatch(r"triserve \S+ \(git [0-9a-f]{12}(-dirty)?\)", first), res.stdout
    assert triserve("-V", cwd=tmp_path).stdout == res.stdout


def test_version_names_what_a_bug_report_needs(capsys):
    assert cli.main(["--version"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["triserve", "triserve-client", "bentoml", "onnxruntime", "numpy",
                                                   "python"]
    assert lines[1] == f"triserve-client {importlib.metadata.version('triserve-client')}"
    assert lines[2] == f"bentoml {importlib.metadata.version('bentoml')}"
    assert lines[4] == f"numpy {importlib.metadata.version('numpy')}"
    assert lines[5].startswith(f"python {sys.version.split()[0]} (")
    assert "not installed" not in lines[3]  # the CPU or the GPU build


def test_help_texts_say_what_an_installed_wheel_does(capsys):
    from triserve import importers

    assert importers.build_parser().format_usage().startswith("usage: triserve import ")
    text = cli.serve_parser().format_help()
    assert "~/.triserve>/models" in text.replace("\n", " ") and "<checkout>/models/store" in text


def test_serve_help_lists_the_options(tmp_path):
    res = triserve("serve", "--help", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: triserve serve")
    for option in ("--host", "--port", "--grpc-port PORT", "--registry PATH_OR_URL", "--config-dir DIR",
                   "--build-missing"):
        assert option in res.stdout, option
    assert "make serve" in res.stdout and "triserve.services.gateway:Gateway" in res.stdout
    bad = triserve("serve", "--port", "x", cwd=tmp_path)
    assert bad.returncode == 2 and "invalid int value" in bad.stderr


def _exec_of(monkeypatch, args: list[str], env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """What `triserve serve ARGS` would exec (os.execve caught; the HTTP port check skipped: whatever this host
    serves on 3000 is not the point here)."""
    calls = []
    monkeypatch.setattr(cli.os, "execve", lambda path, argv, env: calls.append((path, argv, env)))
    monkeypatch.setattr(ports, "ensure_free", lambda *args: None)
    for key in ("BENTOML_HOME", "YOLO_OFFLINE", "TRISERVE_REGISTRY_DIR", "TRISERVE_REGISTRY_URI", "TRISERVE_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    assert cli.main(["serve", *args]) == 0
    (path, argv, env_), = calls
    assert path == sys.executable == argv[0]
    return argv, env_


def test_serve_runs_bentoml_serve_with_the_makefiles_environment(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    argv, env = _exec_of(monkeypatch, [])
    assert argv[1:] == ["-m", "bentoml", "serve", "triserve.services.gateway:Gateway", "--host", "127.0.0.1",
                        "--port", "3000",
                        "--working-dir", str(ROOT)]
    assert {k: env[k] for k in cli.SERVE_ENV} == {"YOLO_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
                                                 "TRANSFORMERS_OFFLINE": "1", "BENTOML_DO_NOT_TRACK": "True"}
    assert env["BENTOML_HOME"] == str(ROOT / ".cache" / "bentoml")  # the Makefile's: one home per checkout
    assert "TRISERVE_REGISTRY_DIR" not in env  # the settings' default registry
    # the caller's environment wins; relative paths are the caller's; options; `--` passes the rest to bentoml
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "models.yaml").write_text("deployments: []\n")
    argv, env = _exec_of(monkeypatch, ["--host", "0.0.0.0", "--port", "3100", "--registry", "store", "--config-dir",
                                       "cfg", "--", "--development"],
                         {"YOLO_OFFLINE": "0", "BENTOML_HOME": "home", "TRISERVE_REGISTRY_URI": "oci://x:5000/m"})
    assert argv[5:] == ["--host", "0.0.0.0", "--port", "3100", "--working-dir", str(ROOT), "--development"]
    assert env["YOLO_OFFLINE"] == "0" and env["BENTOML_HOME"] == str(tmp_path / "home")
    assert env["TRISERVE_REGISTRY_DIR"] == str(tmp_path / "store") and "TRISERVE_REGISTRY_URI" not in env
    assert env["TRISERVE_MODELS_FILE"] == str(tmp_path / "cfg" / "models.yaml") and "TRISERVE_CONFIG" not in env
    argv, env = _exec_of(monkeypatch, ["--registry", "oci://127.0.0.1:5000/models"])
    assert env["TRISERVE_REGISTRY_URI"] == "oci://127.0.0.1:5000/models"
    with pytest.raises(SystemExit) as exc:
        _exec_of(monkeypatch, ["--config-dir", str(tmp_path / "store")])
    assert exc.value.code == 2


def test_grpc_port_is_the_grpc_port_setting(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    argv, env = _exec_of(monkeypatch, ["--grpc-port", "3101"], {"TRISERVE_GRPC__PORT": "3999"})
    assert env["TRISERVE_GRPC__PORT"] == "3101"  # the option wins over the caller's environment
    assert "--grpc-port" not in argv  # a setting of ours, not an option of bentoml serve
    with mock.patch.dict(os.environ, env, clear=True):
        assert Settings().grpc.port == 3101
    _, env = _exec_of(monkeypatch, [], {"TRISERVE_GRPC__PORT": "3999"})
    assert env["TRISERVE_GRPC__PORT"] == "3999"  # without the option: the environment's (else serving.yaml's)


def test_serve_on_an_http_port_in_use_fails_before_bentoml_starts(monkeypatch, capsys):
    """Left to BentoML, the second server dies of an OSError traceback that does not say which port."""
    calls = []
    monkeypatch.setattr(cli.os, "execve", lambda *args: calls.append(args))
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(SystemExit) as exc:
            cli.main(["serve", "--port", str(port)])
    assert exc.value.code == 2 and calls == []
    assert (f"triserve serve: error: HTTP port {port} on 127.0.0.1 is already in use (another triserve, or another "
            f"server); give this server another one: --port") in capsys.readouterr().err


def test_build_missing_builds_only_when_the_registry_lacks_a_served_model(monkeypatch, tiny_registry, tmp_path):
    runs = []
    monkeypatch.setattr(cli.subprocess, "run",
                        lambda cmd, **kw: runs.append(cmd) or subprocess.CompletedProcess(cmd, 0))
    monkeypatch.setenv("TRISERVE_MODELS_FILE", str(TINY_MODELS))
    monkeypatch.setenv("TRISERVE_DEPLOYMENTS_STATE_FILE", str(tmp_path / "state.json"))
    _exec_of(monkeypatch, ["--build-missing", "--registry", str(tiny_registry.root)])
    assert runs == []  # everything models.tiny.yaml serves is there
    _exec_of(monkeypatch, ["--build-missing", "--registry", str(tmp_path / "empty")])
    assert runs == [[sys.executable, "-m", "scripts.pipeline", "build", "--registry", str(tmp_path / "empty")]]
    assert cli.missing_models({**os.environ, "TRISERVE_REGISTRY_DIR": str(tmp_path / "empty")})[1] == [
        "colors-tiny-int8:stable", "colors-tiny:stable", "forecast-global:stable", "forecast-theta:stable",
        "minilm-intent-int8:stable", "minilm-intent:stable",
        "seg-tiny-lite:stable", "seg-tiny:stable", "yolo-shapes-lite:stable", "yolo-shapes:stable"]


def test_serve_starts_the_server_from_outside_the_checkout(tiny_registry, tmp_path):
    """The console script against the session's tiny registry and a config directory of its own, from a directory
    outside the checkout; the environment's registry, models file and gRPC port (the harness's) are not the ones to
    use, so the options must win. The console script replaces itself with bentoml serve: its PID is the server's, and
    stopping that PID stops it. A second `triserve serve` on either of its ports stops before BentoML starts."""
    config = tmp_path / "config"
    config.mkdir()
    shutil.copy(TINY_MODELS, config / "models.yaml")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_MODELS_FILE": str(tmp_path / "absent.yaml")}
    with ReservedPort() as grpc_port, ReservedPort() as other_http:
        command = [str(TRISERVE), "serve", "--registry", str(tiny_registry.root), "--config-dir", str(config),
                   "--grpc-port", str(grpc_port.number)]
        with Server(tmp_path / "absent-registry", env=env, log_path=tmp_path / "serve.log", root=elsewhere,
                    command=command) as srv:
            srv.wait_ready(timeout=120)
            cmdline = psutil.Process(srv.proc.pid).cmdline()
            assert cmdline[1:5] == ["-m", "bentoml", "serve", "triserve.services.gateway:Gateway"], cmdline
            assert httpx.get(f"{srv.url}/readyz", timeout=10).status_code == 200
            answer = httpx.post(f"{srv.url}/v1/classify", json={"texts": ["book a flight to paris"]}, timeout=30)
            assert answer.status_code == 200, answer.text
            assert len(answer.json()["results"]) == 1 and answer.json()["model"]["name"] == "minilm-intent"
            with grpc.insecure_channel(f"127.0.0.1:{grpc_port.number}") as channel:
                status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
            assert status.status == health_pb2.HealthCheckResponse.SERVING
            ports.ensure_free("127.0.0.1", srv.grpc_port, "gRPC")  # the environment's port: nobody listens there
            for http_port, taken, listener in ((srv.port, srv.port, "HTTP"),
                                               (other_http.number, grpc_port.number, "gRPC")):
                again = subprocess.run([*command, "--host", "127.0.0.1", "--port", str(http_port)], cwd=elsewhere,
                                       env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
                assert again.returncode == 2, again.stderr
                assert f"{listener} port {taken} on 127.0.0.1 is already in use" in again.stderr, again.stderr
            pids = srv.pids()
    assert srv.proc.returncode is not None
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


# -- make help ---------------------------------------------------------------------------------------------------------
MAKE = next((p for p in ("/usr/bin/make", "/bin/make", "/usr/local/bin/make") if os.access(p, os.X_OK)), None)


@pytest.mark.skipif(MAKE is None, reason="make is not installed (Debian package make)")
def test_make_help_lists_every_target_and_plain_make_still_installs():
    makefile = (ROOT / "Makefile").read_text()
    targets = re.findall(r"^([a-z][a-z_-]*):(?!=)", makefile, re.M)
    res = subprocess.run([MAKE, "help"], cwd=ROOT, env=CLEAN_ENV, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    listed = [line.split()[0] for line in res.stdout.splitlines() if line.startswith("  ")]
    assert listed == targets and {"install", "serve", "test", "help"} <= set(listed)
    assert all(len(line.split(None, 1)) == 2 for line in res.stdout.splitlines() if line.startswith("  "))
    # the default goal is still the install stamp (the first rule), and make serve runs the console script
    dry = subprocess.run([MAKE, "-n", "-p", "-q"], cwd=ROOT, env=CLEAN_ENV, capture_output=True, text=True, timeout=60)
    assert re.search(r"^\.DEFAULT_GOAL := \.venv/\.installed-", dry.stdout, re.M)
    serve = subprocess.run([MAKE, "-n", "-o", "install", "serve"], cwd=ROOT, env=CLEAN_ENV, capture_output=True,
                           text=True, timeout=60)
    assert serve.stdout.splitlines()[-2:] == [".venv/bin/python -m scripts.pipeline build",
                                             ".venv/bin/triserve serve --host 127.0.0.1 --port 3000"], serve.stdout
