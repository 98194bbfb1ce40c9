"""What a manifest records about where a model came from: hashes of the recipe, the code and the data, the commit,
the package versions.

The code is hashed relative to SOURCE_ROOT, the directory that holds the top-level packages (a checkout, or
site-packages for an installed wheel), so the same tree hashes the same wherever it lives.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from triserve.models.manifest import Source

SOURCE_ROOT = Path(__file__).resolve().parents[2]
# where git is looked up: the system directories only (no PATH lookup), as scripts/imagetools.py does
GIT_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def stable_hash(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def source_digest(paths: Iterable[Path]) -> str:
    """Hash of the code that builds a model, so a code change invalidates the build cache (and names a new
    version where the version is derived from it)."""
    h = hashlib.sha256()
    for root in paths:
        root = Path(root).resolve()
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for f in files:
            h.update(f.relative_to(SOURCE_ROOT).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def data_fingerprint(*arrays_or_files: object) -> str:
    """sha256 over arrays (their bytes) and files (their contents): the data version in the manifest."""
    h = hashlib.sha256()
    for item in arrays_or_files:
        if isinstance(item, np.ndarray):
            h.update(np.ascontiguousarray(item).tobytes())
        elif isinstance(item, (str, Path)) and Path(item).is_file():
            h.update(Path(item).read_bytes())
        else:
            h.update(json.dumps(item, sort_keys=True, default=str).encode())
    return h.hexdigest()


KNOWN_COMMIT: str | None = None  # set by the isolated import child (models/importing/sandbox_child.py): no git there


def git_commit() -> str:
    """HEAD's sha (+ "-dirty") of the checkout this code runs from, with the system git; "unknown" without one
    (an installed wheel, no git)."""
    if KNOWN_COMMIT is not None:
        return KNOWN_COMMIT
    git = shutil.which("git", path=os.pathsep.join(GIT_DIRS))
    if git is None:
        return "unknown"
    try:
        out = subprocess.run([git, "rev-parse", "HEAD"], cwd=SOURCE_ROOT, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run([git, "status", "--porcelain"], cwd=SOURCE_ROOT, capture_output=True, text=True,
                               timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions(*names: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            out[n] = "missing"
    return out


def export_source(source: Source | None, license: str | None, weights_license: str, path: Path, sha256: str,
                  metadata: Mapping[str, str], export: str, notes: str) -> Source:
    """Where an imported ultralytics ONNX export came from: a given `source` (a package build describes its own)
    with its licence replaced when `license` was given, else the user's file described from its metadata (`export`:
    what ultralytics exported, `notes`: what the import made of it)."""
    if source is None:
        return Source(kind="user", description=(
            f"user ONNX {path.name} (sha256 {sha256}), ultralytics {export} {metadata.get('version', '?')} "
            f"({metadata.get('description', 'no description')}); {notes}"),
            license=weights_license, packages=package_versions("onnx", "onnxruntime", "ultralytics"))
    return source.model_copy(update={"license": weights_license}) if license else source
