"""Stores whose keys mirror the local directory layout (static HTTP trees, S3 buckets):

    <prefix>/<name>/aliases.json                      {"stable": "1.0.0-3fa2b1c9"}
    <prefix>/<name>/alias_log.jsonl                   one JSON line per alias move
    <prefix>/<name>/versions/<version>/manifest.json  written last: its presence is what makes a version exist
    <prefix>/<name>/versions/<version>/<files>

so a local registry can be uploaded or served as it is, and one store's tree is readable by another.
"""
from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Iterable, Iterator
from pathlib import Path

from triserve.models.manifest import Manifest

from .base import NotFound, RegistryStore, alias_entry


class TreeStore(RegistryStore):
    """Everything but the key-value primitives, which subclasses provide."""

    # -- primitives ----------------------------------------------------------------------------------------------
    @abstractmethod
    def _get(self, key: str) -> bytes | None:
        """The object's bytes, None when absent."""

    @abstractmethod
    def _stream(self, key: str) -> Iterator[bytes]:
        """The object's bytes in chunks (NotFound when absent)."""

    def _exists(self, key: str) -> bool:
        return self._get(key) is not None

    def _put(self, key: str, data: bytes, if_absent: bool = False) -> None:  # pragma: no cover - read-only stores
        raise NotImplementedError

    def _put_file(self, key: str, path: Path, sha256: str, progress: bool) -> None:  # pragma: no cover
        raise NotImplementedError

    # -- reading -------------------------------------------------------------------------------------------------
    def _manifest_key(self, name: str, version: str) -> str:
        return f"{name}/versions/{version}/manifest.json"

    def has(self, name: str, version: str) -> bool:
        return self._exists(self._manifest_key(name, version))

    def aliases(self, name: str) -> dict[str, str]:
        raw = self._get(f"{name}/aliases.json")
        return json.loads(raw) if raw else {}

    def alias_log(self, name: str) -> list[dict]:
        raw = self._get(f"{name}/alias_log.jsonl")
        return [json.loads(line) for line in (raw or b"").decode().splitlines() if line.strip()]

    def manifest(self, name: str, version: str) -> Manifest:
        raw = self._get(self._manifest_key(name, version))
        if raw is None:
            raise NotFound(f"{name}:{version} is not in registry {self.uri}")
        return Manifest.model_validate_json(raw)

    def _reader(self, name: str, version: str):
        manifest = self.manifest(name, version)

        def read(entry) -> Iterable[bytes]:
            return self._stream(f"{name}/versions/{version}/{entry.path}")

        return manifest, read

    # -- writing -------------------------------------------------------------------------------------------------
    def _publish(self, staging: Path, manifest: Manifest, progress: bool) -> None:
        base = f"{manifest.name}/versions/{manifest.version}"
        for entry in manifest.files:
            self._put_file(f"{base}/{entry.path}", staging / entry.path, entry.sha256, progress)
        # The manifest goes last and only if absent: a version exists once, and readers never see half of one.
        self._put(self._manifest_key(manifest.name, manifest.version), manifest.dumps().encode(), if_absent=True)

    def _set_alias(self, name: str, alias: str, version: str, by: str | None) -> None:
        aliases = self.aliases(name)
        previous = aliases.get(alias)
        aliases[alias] = version
        log = self.alias_log(name)
        log.append(alias_entry(alias, previous, version, by))
        self._put(f"{name}/aliases.json", json.dumps(aliases, indent=2, sort_keys=True).encode())
        self._put(f"{name}/alias_log.jsonl", "".join(json.dumps(e) + "\n" for e in log).encode())
