"""The one interface every registry store implements, and the pieces the stores share.

A store holds models by name, each with immutable versions (a directory of files + manifest.json) and mutable aliases
whose every move is logged. Stores differ only in where the bytes live: a local directory, an OCI registry, a static
HTTP tree or an S3 bucket. Pulling always verifies every file's size and sha256 against the manifest while it streams,
so a tampered or corrupted artifact is refused (IntegrityError naming the file) whatever the store.
"""
from __future__ import annotations

import getpass
import hashlib
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from triserve.models.manifest import FileEntry, Manifest, describe_files, utcnow
from triserve.models.registry import IntegrityError, NotFound, RegistryError, VersionExists  # also re-exported

CHUNK = 1 << 20


class ReadOnlyStore(RegistryError):
    """A write (publish, set_alias) on a store that cannot be written (e.g. a static HTTP tree)."""


class RegistryUnavailable(RegistryError):
    """The store could not be reached (connection refused, timeout, 5xx): transient, worth retrying."""


class RegistryAuthError(RegistryError):
    """The store refused the credentials (or wants some and none were found), or denies this account the action.
    Not transient (never retried); the message names the store and where the credentials came from, never a secret."""


def whoami() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return str(os.getuid())


def alias_entry(alias: str, previous: str | None, version: str, by: str | None) -> dict:
    """One alias-log line, the same shape in every store: when, alias, from, to, by."""
    return {"when": utcnow().isoformat(), "alias": alias, "from": previous, "to": version, "by": by or whoami()}


def progress_bar(progress: bool, total: int, desc: str):
    """A tqdm byte bar, or a no-op stand-in when progress is off (services log instead of drawing bars)."""
    if progress:
        from tqdm import tqdm

        return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, leave=False)
    return _NoBar()


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


class RegistryStore(ABC):
    """Models, versions, aliases and the alias log behind one small interface (see models/stores/__init__.py)."""

    uri: str
    read_only: bool = False

    # -- reading -------------------------------------------------------------------------------------------------
    @abstractmethod
    def models(self) -> list[str]:
        """Model names, sorted."""

    @abstractmethod
    def versions(self, name: str) -> list[str]:
        """Versions of a model, oldest first ([] for an unknown model)."""

    @abstractmethod
    def aliases(self, name: str) -> dict[str, str]:
        """Alias -> version ({} for none)."""

    @abstractmethod
    def alias_log(self, name: str) -> list[dict]:
        """Every alias move, oldest first: {when, alias, from, to, by}."""

    @abstractmethod
    def manifest(self, name: str, version: str) -> Manifest:
        """The version's manifest; NotFound when the version is not there."""

    def has(self, name: str, version: str) -> bool:
        return version in self.versions(name)

    def resolve(self, name: str, ref: str) -> str:
        """An alias (stable, canary, ...) or a version -> a version."""
        version = self.aliases(name).get(ref, ref)
        if not self.has(name, version):
            raise NotFound(f"{name}:{ref} resolves to nothing in registry {self.uri}")
        return version

    @abstractmethod
    def _reader(self, name: str, version: str) -> tuple[Manifest, Callable[[FileEntry], Iterable[bytes]]]:
        """The manifest, and a function streaming one file's bytes."""

    def pull(self, name: str, version: str, dest_dir: Path | str, progress: bool = True) -> Manifest:
        """Download name:version into dest_dir (files + manifest.json), verifying size and sha256 of every file as it
        streams; IntegrityError (naming the file) on any mismatch. The caller owns dest_dir (use a temp dir and
        rename it into place: a failed pull leaves partial files behind)."""
        manifest, read = self._reader(name, version)
        if manifest.name != name or manifest.version != version:
            raise IntegrityError(f"{name}:{version}: the manifest in {self.uri} describes "
                                 f"{manifest.name}:{manifest.version}")
        dest = Path(dest_dir)
        dest.mkdir(parents=True, exist_ok=True)
        for entry in manifest.files:
            target = dest / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            digest, size = hashlib.sha256(), 0
            with open(target, "wb") as fh, progress_bar(progress, entry.size, f"{name}:{entry.path}") as bar:
                chunks = read(entry)
                try:
                    for block in chunks:
                        digest.update(block)
                        fh.write(block)
                        size += len(block)
                        bar.update(len(block))
                        if size > entry.size:
                            break  # never write more than the manifest promised
                except (NotFound, FileNotFoundError) as exc:
                    raise IntegrityError(f"{name}:{version}: missing file {entry.path} in {self.uri}") from exc
                finally:
                    close = getattr(chunks, "close", None)
                    if close is not None:
                        close()  # releases the HTTP stream of a download cut short
            if size != entry.size:
                raise IntegrityError(f"{name}:{version}: size mismatch for {entry.path} from {self.uri} "
                                     f"(manifest {entry.size} bytes, got {size}{'+' if size > entry.size else ''})")
            if digest.hexdigest() != entry.sha256:
                raise IntegrityError(f"{name}:{version}: sha256 mismatch for {entry.path} from {self.uri} "
                                     f"(manifest {entry.sha256[:12]}…, got {digest.hexdigest()[:12]}…)")
        (dest / "manifest.json").write_text(manifest.dumps())
        return manifest

    # -- writing -------------------------------------------------------------------------------------------------
    def _writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStore(f"registry {self.uri} is read-only")

    def publish(self, staging: Path | str, manifest: Manifest, progress: bool = False) -> Manifest:
        """Publish the files of `staging` as manifest.name:manifest.version (hashes filled in). Refuses a version
        that exists: versions are immutable."""
        self._writable()
        staging = Path(staging)
        if self.has(manifest.name, manifest.version):
            raise VersionExists(f"{manifest.name}:{manifest.version} already exists in {self.uri}; "
                                "versions are immutable")
        final = manifest.model_copy(update={"files": describe_files(staging)})
        Manifest.model_validate(final.model_dump())  # re-validate the filled manifest
        self._publish(staging, final, progress)
        return final

    @abstractmethod
    def _publish(self, staging: Path, manifest: Manifest, progress: bool) -> None:
        """Store the files and the (filled) manifest; raise VersionExists if another publisher won."""

    def set_alias(self, name: str, alias: str, version: str, by: str | None = None) -> None:
        """Point alias at version and log the move (when, from, to, by)."""
        self._writable()
        check_alias(alias)
        if not self.has(name, version):
            raise NotFound(f"{name}:{version} is not in registry {self.uri}")
        if self.has(name, alias):
            raise RegistryError(f"alias {alias!r} would shadow a version name")
        self._set_alias(name, alias, version, by)

    @abstractmethod
    def _set_alias(self, name: str, alias: str, version: str, by: str | None) -> None:
        pass

    def close(self) -> None:  # noqa: B027 - an optional hook: stores that hold connections override it
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"


_ALIAS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_alias(alias: str) -> None:
    if not _ALIAS.match(alias):
        raise RegistryError(f"invalid alias {alias!r} (letters, digits, '.', '_', '-'; must start alphanumeric)")


def iter_file(path: Path, chunk: int = CHUNK) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            yield block
