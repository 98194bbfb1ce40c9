"""locks/ (scripts/lock.py): one pinned dependency set for the tests, the Bentos and the images.

Read offline: the locks satisfy pyproject.toml and agree with each other; the environment these tests run in IS the
dev lock (make install installs it); protobuf in every lock is the major the committed gRPC stubs were generated for.
"""
from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from scripts.lock import LOCKS, problems, read_pins

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "services" / "protocols" / "generated"


def test_locks_satisfy_pyproject_and_each_other():
    assert problems() == []
    for lock in LOCKS:
        assert lock.path.is_file(), lock.path
        assert read_pins(lock.path), lock.path


def test_problems_names_a_missing_requirement_and_a_disagreement(tmp_path):
    (tmp_path / "locks").mkdir()
    for lock in LOCKS:
        (tmp_path / "locks" / lock.path.name).write_text(lock.path.read_text())
    pyproject = (ROOT / "pyproject.toml").read_text()
    added = pyproject.replace('"tenacity>=9.2.1,<10",', '"tenacity>=9.2.1,<10",\n  "zzz-not-locked>=1",')
    assert added != pyproject
    (tmp_path / "pyproject.toml").write_text(added)
    serving = tmp_path / "locks" / "serving-cpu.txt"
    serving.write_text(re.sub(r"(?m)^numpy==\S+", "numpy==1.26.0", serving.read_text()))
    found = problems(tmp_path)
    assert any("locks/serving-cpu.txt lacks zzz-not-locked>=1" in p for p in found), found
    assert any(p.startswith("numpy: locks/serving-cpu.txt pins 1.26.0, locks/dev-cpu.txt ") for p in found), found


def _installed_onnxruntime() -> str:
    for name in ("onnxruntime", "onnxruntime-gpu"):
        try:
            importlib.metadata.version(name)
            return "gpu" if name.endswith("gpu") else "cpu"
        except importlib.metadata.PackageNotFoundError:
            continue
    pytest.fail("no ONNX Runtime installed")


def test_the_test_environment_is_the_dev_lock():
    """Every package of locks/dev-<ort>.txt is installed at its locked version: the tests run what the Bento ships."""
    lock = ROOT / "locks" / f"dev-{_installed_onnxruntime()}.txt"
    wrong = {}
    for name, version in read_pins(lock).items():
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have is None or canonicalize_name(have) != canonicalize_name(version):
            wrong[name] = (version, have)
    assert not wrong, f"installed differs from {lock.name} (locked, installed): {wrong}; run make install"


def test_protobuf_is_the_major_the_stubs_were_generated_for():
    stubs = sorted(GENERATED.glob("*_pb2.py"))
    assert stubs
    majors = {re.search(r"# Protobuf Python Version: (\d+)\.", p.read_text()).group(1) for p in stubs}
    assert len(majors) == 1, majors
    for lock in LOCKS:
        assert read_pins(lock.path)["protobuf"].split(".")[0] in majors, lock.name
