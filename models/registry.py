"""Append-only local model registry.

Layout (one directory per model; versions are immutable, aliases are the only mutable pointers):

    <root>/<name>/versions/<version>/manifest.json + files
    <root>/<name>/aliases.json        {"stable": "1.0.0-3fa2b1c9"}
    <root>/<name>/alias_log.jsonl     one line per alias move: when, alias, from, to, by

Why: the seeds' rule that model files are registered with source, data version, metrics and hash, and that a
published version is never overwritten. Verification (sha256 of every file) happens on every load, not only at publish;
with stamps (models/stamps.py) a file hashed at an earlier load and unchanged since is not hashed again.
"""
from __future__ import annotations

import getpass
import json
import os
import shutil
import tempfile
from pathlib import Path

from .manifest import Manifest, describe_files, sha256_file, utcnow
from .stamps import Stamps, identity


class RegistryError(Exception):
    """Base class for registry failures."""


class VersionExists(RegistryError):
    """Publishing a version that is already there is refused: versions are immutable."""


class NotFound(RegistryError):
    pass


class IntegrityError(RegistryError):
    """A file is missing or its hash differs from the manifest: the artifact was tampered with or corrupted."""


def verify_artifact(directory: Path, manifest: Manifest, stamps: Stamps | None = None) -> None:
    """Check every manifest file exists with the recorded size and sha256; raise IntegrityError otherwise. With
    `stamps`, a file whose stamp says it was hashed to that sha256 and is unchanged since is not hashed again, and a
    file that hashes right gets a stamp."""
    for entry in manifest.files:
        path = Path(directory) / entry.path
        if not path.is_file():
            raise IntegrityError(f"{manifest.name}:{manifest.version}: missing file {entry.path}")
        if path.stat().st_size != entry.size:
            raise IntegrityError(f"{manifest.name}:{manifest.version}: size mismatch for {entry.path}")
        if stamps is not None and stamps.matches(path, entry.sha256):
            continue
        before = identity(path)
        if sha256_file(path) != entry.sha256:
            if stamps is not None:
                stamps.forget(path)
            raise IntegrityError(f"{manifest.name}:{manifest.version}: sha256 mismatch for {entry.path}")
        if stamps is not None:
            stamps.record(path, entry.sha256, before)


class LocalRegistry:
    """A registry in a local directory (the default store and the pipeline's output)."""

    def __init__(self, root: Path | str, stamps: Stamps | None = None):
        self.root = Path(root)
        self.stamps = stamps  # verified stamps (models/stamps.py): None hashes every file at every load

    # -- reading -------------------------------------------------------------------------------------------------
    def models(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "versions").is_dir())

    def versions(self, name: str) -> list[str]:
        vdir = self.root / name / "versions"
        if not vdir.is_dir():
            return []
        found = [p for p in vdir.iterdir() if (p / "manifest.json").is_file()]
        return [p.name for p in sorted(found, key=lambda p: (p / "manifest.json").stat().st_mtime)]

    def has(self, name: str, version: str) -> bool:
        return (self.root / name / "versions" / version / "manifest.json").is_file()

    def path(self, name: str, version: str) -> Path:
        if not self.has(name, version):
            raise NotFound(f"{name}:{version} is not in registry {self.root}")
        return self.root / name / "versions" / version

    def manifest(self, name: str, version: str) -> Manifest:
        return Manifest.load(self.path(name, version) / "manifest.json")

    def aliases(self, name: str) -> dict[str, str]:
        path = self.root / name / "aliases.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def resolve(self, name: str, ref: str) -> str:
        """An alias (stable, canary, ...) or a version -> a version."""
        aliases = self.aliases(name)
        version = aliases.get(ref, ref)
        if not self.has(name, version):
            raise NotFound(f"{name}:{ref} resolves to nothing in registry {self.root}")
        return version

    def load_verified(self, name: str, ref: str) -> tuple[Path, Manifest]:
        """Resolve, then verify every file's hash before anyone loads it."""
        version = self.resolve(name, ref)
        directory = self.path(name, version)
        manifest = self.manifest(name, version)
        verify_artifact(directory, manifest, self.stamps)
        return directory, manifest

    def alias_log(self, name: str) -> list[dict]:
        path = self.root / name / "alias_log.jsonl"
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    # -- writing -------------------------------------------------------------------------------------------------
    def publish(self, staging: Path, manifest: Manifest) -> Manifest:
        """Copy `staging` into the registry as name:version with hashes filled in. Refuses existing versions."""
        if self.has(manifest.name, manifest.version):
            raise VersionExists(f"{manifest.name}:{manifest.version} already exists; versions are immutable")
        vroot = self.root / manifest.name / "versions"
        vroot.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".publish-", dir=vroot))
        try:
            for item in Path(staging).rglob("*"):
                if item.is_file() and item.name != "manifest.json":
                    dest = tmp / item.relative_to(staging)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(item, dest)
            final = manifest.model_copy(update={"files": describe_files(tmp)})
            Manifest.model_validate(final.model_dump())  # re-validate the filled manifest
            (tmp / "manifest.json").write_text(final.dumps())
            target = vroot / manifest.version
            try:
                os.rename(tmp, target)  # atomic; fails if a concurrent publisher won
            except OSError as exc:
                raise VersionExists(f"{manifest.name}:{manifest.version} already exists") from exc
            return final
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def set_alias(self, name: str, alias: str, version: str, by: str | None = None) -> None:
        """Move an alias and append the move to the audit log."""
        if not self.has(name, version):
            raise NotFound(f"{name}:{version} is not in registry {self.root}")
        if alias in self.versions(name):
            raise RegistryError(f"alias {alias!r} would shadow a version name")
        aliases = self.aliases(name)
        previous = aliases.get(alias)
        aliases[alias] = version
        mdir = self.root / name
        tmp = mdir / ".aliases.json.tmp"
        tmp.write_text(json.dumps(aliases, indent=2, sort_keys=True))
        os.replace(tmp, mdir / "aliases.json")
        entry = {"when": utcnow().isoformat(), "alias": alias, "from": previous, "to": version,
                 "by": by or _whoami()}
        with open(mdir / "alias_log.jsonl", "a") as fh:
            fh.write(json.dumps(entry) + "\n")


def _whoami() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return str(os.getuid())
