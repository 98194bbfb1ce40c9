"""The isolated import process (models/importing/sandbox.py): a malicious pickle is refused or contained (nothing
outside the work folder changes, the host process is unaffected), limits stop a runaway import with a clear reason,
no secret reaches the child, and `triserve import detection-pt` refuses a checkpoint that runs a command."""
from __future__ import annotations

import json
import os
import pickle
import socket

import pytest

from triserve.models.importing import landlock
from triserve.models.importing.result import ImportRefused
from triserve.models.importing.sandbox import LimitExceeded, Limits, run_isolated

TARGETS = "tests.models.importing.sandbox_targets"
pytestmark = pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX only")


def _run(tmp_path, target: str, limits: Limits | None = None, **kwargs):
    return run_isolated(f"{TARGETS}:{target}", tmp_path / "scratch", kwargs, limits=limits, preload=())


class RunsCommand:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return os.system, (f"echo pwned > {self.path}",)


class WritesFile:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return exec, (f"open({str(self.path)!r}, 'w').write('pwned')",)


def test_a_pickle_that_runs_a_command_is_refused_and_changes_nothing(tmp_path):
    outside = tmp_path / "pwned"
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps(RunsCommand(outside)))
    with pytest.raises(ImportRefused, match="refused by the import sandbox: .* tried to run a shell command"):
        _run(tmp_path, "unpickle", path=evil)
    assert not outside.exists()


@pytest.mark.skipif(landlock.abi_version() == 0, reason="no Landlock on this kernel")
def test_a_pickle_that_writes_outside_its_folder_is_contained(tmp_path):
    outside = tmp_path / "pwned"
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps(WritesFile(outside)))
    with pytest.raises(ImportRefused, match=f"tried to change {outside}, outside its work folder"):
        _run(tmp_path, "unpickle", path=evil)
    assert not outside.exists()
    with pytest.raises(ImportRefused, match="outside its work folder"):
        _run(tmp_path / "2", "write", path=outside)
    assert not outside.exists() and (tmp_path / "2/scratch/work/inside.txt").read_text() == "ok"


def test_no_network(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as server:
        with pytest.raises(ImportRefused, match="tried to open a network connection"):
            _run(tmp_path, "connect", port=server.getsockname()[1])


def test_memory_cpu_and_time_limits_stop_the_import_with_the_reason(tmp_path):
    with pytest.raises(LimitExceeded, match=r"ran out of its memory limit \(512 MiB"):
        _run(tmp_path / "m", "hog_memory", Limits(memory_mb=512), mib=2048)
    with pytest.raises(LimitExceeded, match=r"used up its CPU limit \(1 CPU seconds\)"):
        _run(tmp_path / "c", "spin", Limits(cpu_s=1))
    with pytest.raises(LimitExceeded, match=r"did not finish within its time limit \(2 s\)"):
        _run(tmp_path / "t", "sleep", Limits(wall_s=2), seconds=60)


def test_no_secret_reaches_the_child(tmp_path, monkeypatch):
    for name in ("TRISERVE_ACCESS__API_KEYS", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "GITHUB_TOKEN", "DB_PASSWORD"):
        monkeypatch.setenv(name, "s3cret")
    monkeypatch.setenv("YOLO_VERBOSE", "False")
    with pytest.raises(ImportRefused) as refused:
        _run(tmp_path, "environment")
    seen = json.loads(str(refused.value))
    assert "s3cret" not in json.dumps(seen["env"]) and seen["env"]["YOLO_VERBOSE"] == "False"
    assert seen["cwd"] == str((tmp_path / "scratch/work").resolve())
    assert seen["env"]["HOME"].startswith(str((tmp_path / "scratch").resolve()))


def test_the_limits_from_the_environment(monkeypatch):
    monkeypatch.setenv("TRISERVE_IMPORT_LIMITS", '{"memory_mb": 2048, "wall_s": 60}')
    assert Limits.from_env() == Limits(memory_mb=2048, wall_s=60)
    monkeypatch.setenv("TRISERVE_IMPORT_LIMITS", '{"memory": 1}')
    with pytest.raises(ImportRefused, match="TRISERVE_IMPORT_LIMITS"):
        Limits.from_env()


def test_detection_pt_refuses_a_checkpoint_that_runs_a_command(tmp_path, caplog):
    """The whole path: `triserve import detection-pt` on a torch checkpoint whose pickle runs a command. The
    weights_only allow-list refuses it, the full unpickling in the child is stopped, nothing is published."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("ultralytics")
    from triserve.importers import main
    from triserve.models.registry import LocalRegistry

    outside = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save({"model": RunsCommand(outside)}, evil)
    reg = tmp_path / "registry"
    assert main(["detection-pt", "--weights", str(evil), "--name", "evil", "--version", "1", "--registry", str(reg),
                 "--cache", str(tmp_path / "cache"), "--license", "MIT"]) == 2
    assert "refused by the import sandbox: the checkpoint or its code tried to run a shell command" in caplog.text
    assert not outside.exists() and LocalRegistry(reg).models() == []


def test_custom_module_files_are_made_absolute_and_a_missing_one_is_refused_before_the_child(tmp_path, monkeypatch):
    from triserve.models.importing.sandbox import absolute_specs

    layers = tmp_path / "layers.py"
    layers.write_text("X = 1\n")
    monkeypatch.chdir(tmp_path)
    assert absolute_specs(["layers.py", "mine=layers.py", "some.module"]) == [str(layers), f"mine={layers}",
                                                                              "some.module"]
    with pytest.raises(ImportRefused, match=f"no such file {tmp_path / 'gone.py'}"):
        absolute_specs(["gone.py"])
