"""http(s)://host/prefix: a read-only store over a static HTTP tree with the local registry's layout.

Any static server works for resolve/manifest/pull (aliases.json, versions/<v>/manifest.json and files are plain GETs).
`models()` and `versions()` need directory listings (python -m http.server, nginx autoindex, ...): without them they
return what cannot be listed as empty. Writes raise ReadOnlyStore: publish to the store behind the tree instead.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import unquote, urljoin

import httpx

from triserve.models.manifest import NAME_PATTERN, VERSION_PATTERN

from .base import CHUNK, NotFound, RegistryError, RegistryUnavailable
from .tree import TreeStore

_HREF = re.compile(r'href="([^"?#]+)"', re.IGNORECASE)


class HttpStore(TreeStore):
    read_only = True

    def __init__(self, uri: str, timeout: float = 30.0, client: httpx.Client | None = None):
        self.uri = uri.rstrip("/")
        self.base = self.uri + "/"
        self.client = client or httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
                                             follow_redirects=True)

    def _url(self, key: str) -> str:
        return urljoin(self.base, key)

    def _check(self, response: httpx.Response, key: str) -> None:
        if response.status_code >= 500:
            raise RegistryUnavailable(f"{self.uri}: HTTP {response.status_code} for {key}")
        if response.status_code >= 400:
            raise RegistryError(f"{self.uri}: HTTP {response.status_code} for {key}")

    def _get(self, key: str) -> bytes | None:
        try:
            response = self.client.get(self._url(key))
        except httpx.TransportError as exc:
            raise RegistryUnavailable(f"{self.uri} unreachable: {type(exc).__name__}: {exc}") from exc
        if response.status_code == 404:
            return None
        self._check(response, key)
        return response.content

    def _exists(self, key: str) -> bool:
        try:
            response = self.client.head(self._url(key))
        except httpx.TransportError as exc:
            raise RegistryUnavailable(f"{self.uri} unreachable: {type(exc).__name__}: {exc}") from exc
        if response.status_code in (405, 501):
            return self._get(key) is not None  # servers without HEAD
        if response.status_code == 404:
            return False
        self._check(response, key)
        return True

    def _stream(self, key: str) -> Iterator[bytes]:
        try:
            with self.client.stream("GET", self._url(key)) as response:
                if response.status_code == 404:
                    raise NotFound(f"{self.uri}: {key} not found")
                self._check(response, key)
                yield from response.iter_bytes(CHUNK)
        except httpx.TransportError as exc:
            raise RegistryUnavailable(f"{self.uri} unreachable: {type(exc).__name__}: {exc}") from exc

    def _listing(self, key: str) -> list[str]:
        """Sub-directory names from an autoindex page ([] when the server does not list)."""
        raw = self._get(key)
        if raw is None:
            return []
        names = set()
        for href in _HREF.findall(raw.decode(errors="replace")):
            if href.endswith("/") and "/" not in href[:-1] and not href.startswith("."):
                names.add(unquote(href[:-1]))
        return sorted(names)

    def models(self) -> list[str]:
        return [n for n in self._listing("") if re.match(NAME_PATTERN, n) and self._listing(f"{n}/versions/")]

    def versions(self, name: str) -> list[str]:
        found = [v for v in self._listing(f"{name}/versions/") if re.match(VERSION_PATTERN, v) and self.has(name, v)]
        return sorted(found, key=lambda v: (self.manifest(name, v).created_at, v))

    def close(self) -> None:
        self.client.close()
