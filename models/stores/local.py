"""file:///path or a plain path: the existing local directory layout, served by
triserve.models.registry.LocalRegistry."""
from __future__ import annotations

from pathlib import Path

from triserve.models.manifest import Manifest
from triserve.models.registry import LocalRegistry

from .base import RegistryStore, check_alias, iter_file


class LocalStore(RegistryStore):
    """A thin adapter: every rule (append-only, atomic publish, alias log) stays in LocalRegistry."""

    def __init__(self, root: Path | str):
        self.registry = LocalRegistry(root)
        self.uri = Path(root).resolve().as_uri()

    def models(self) -> list[str]:
        return self.registry.models()

    def versions(self, name: str) -> list[str]:
        return self.registry.versions(name)

    def has(self, name: str, version: str) -> bool:
        return self.registry.has(name, version)

    def aliases(self, name: str) -> dict[str, str]:
        return self.registry.aliases(name)

    def alias_log(self, name: str) -> list[dict]:
        return self.registry.alias_log(name)

    def resolve(self, name: str, ref: str) -> str:
        return self.registry.resolve(name, ref)

    def manifest(self, name: str, version: str) -> Manifest:
        return self.registry.manifest(name, version)

    def _reader(self, name: str, version: str):
        directory = self.registry.path(name, version)
        return self.registry.manifest(name, version), lambda entry: iter_file(directory / entry.path)

    def publish(self, staging: Path | str, manifest: Manifest, progress: bool = False) -> Manifest:
        return self.registry.publish(Path(staging), manifest)

    def _publish(self, staging: Path, manifest: Manifest, progress: bool) -> None:  # pragma: no cover - publish()
        raise NotImplementedError

    def set_alias(self, name: str, alias: str, version: str, by: str | None = None) -> None:
        check_alias(alias)
        self.registry.set_alias(name, alias, version, by=by)

    def _set_alias(self, name: str, alias: str, version: str, by: str | None) -> None:  # pragma: no cover
        raise NotImplementedError

