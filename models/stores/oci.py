"""oci://host[:port]/<repo-prefix>: models as OCI artifacts in an OCI (container image) registry, through oras-py.

Layout, through the OCI distribution HTTP API (blob upload POST/PUT, manifest PUT/GET/HEAD, tags list, catalog):

  * one repository per model: `<prefix>/<name>`; one tag per version (versions are valid OCI tags);
  * one OCI image manifest per version (artifactType application/vnd.triserve.model.v1): its config blob is our
    manifest.json (application/vnd.triserve.model.manifest.v1+json), each artifact file one layer whose digest is the
    file's sha256 and whose annotations carry its relative path (org.opencontainers.image.title, dev.triserve.file.path)
    and sha256 (dev.triserve.file.sha256); manifest annotations carry name, version, task and creation time, and
    the weights' licence and provenance (manifest_annotations: org.opencontainers.image.licenses = the manifest's
    SPDX `source.license`, .source = `source.url` when known, .description = `source.description`);
  * aliases: the special tag `_aliases` (never a version: versions start alphanumeric) points at a manifest whose one
    layer is a JSON document {"name", "aliases": {alias: version}, "log": [{when, alias, from, to, by}, ...]}; it is
    the only mutable tag, and every move appends to the log inside the document (earlier documents stay in the
    registry as untagged manifests until garbage-collected).

Immutability: publishing refuses a tag that exists (checked before the upload and again right before the manifest
PUT; the distribution API has no conditional tag write, so two publishers racing on one version within that window
are not excluded: publish from one pipeline). Alias moves are read-modify-write of `_aliases` (last writer wins).
Transport: plain HTTP for loopback hosts (127.0.0.0/8, localhost, ::1) or `?insecure=true`, HTTPS otherwise.
oci://docker.io/<namespace> talks to registry-1.docker.io.
Pulls verify every file's sha256 against OUR manifest.json (not only the registry's digest), so a manifest whose
layer differs from the recorded hash is refused.

Authentication and credentials: oci_auth.py (where credentials are looked up, how they are kept out of messages);
the request layer and why it is ours, not oras-py's: oci_client.py.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, overload
from urllib.parse import parse_qs, urljoin, urlsplit

import oras.container
import requests

from triserve.models.manifest import NAME_PATTERN, VERSION_PATTERN, FileEntry, Manifest

from .base import (
    CHUNK,
    IntegrityError,
    NotFound,
    RegistryAuthError,
    RegistryError,
    RegistryStore,
    RegistryUnavailable,
    VersionExists,
    alias_entry,
    progress_bar,
)
from .oci_auth import DOCKER_HUB_HOSTS, ENV_PASSWORD, ENV_USERNAME, Credentials, find_credentials, redact
from .oci_client import FileBody, OrasRegistry

log = logging.getLogger(__name__)

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ARTIFACT_TYPE = "application/vnd.triserve.model.v1"
CONFIG_TYPE = "application/vnd.triserve.model.manifest.v1+json"
FILE_TYPE = "application/vnd.triserve.model.file.v1"
ONNX_TYPE = "application/vnd.triserve.model.onnx.v1"
ALIASES_TYPE = "application/vnd.triserve.aliases.v1+json"
ALIASES_ARTIFACT = "application/vnd.triserve.aliases.v1"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
ALIASES_TAG = "_aliases"
ANN_TITLE = "org.opencontainers.image.title"
ANN_CREATED = "org.opencontainers.image.created"
ANN_LICENSES = "org.opencontainers.image.licenses"
ANN_SOURCE = "org.opencontainers.image.source"
ANN_DESCRIPTION = "org.opencontainers.image.description"
ANN_VERSION = "org.opencontainers.image.version"
ANN_PATH = "dev.triserve.file.path"
ANN_SHA = "dev.triserve.file.sha256"

DOCKER_HUB_API = "registry-1.docker.io"


def manifest_annotations(manifest: Manifest) -> dict[str, str]:
    """The OCI manifest annotations of a model version: the pre-defined org.opencontainers.image.* keys where they
    apply (created, version, licenses, source, description) and ours."""
    out = {ANN_CREATED: manifest.created_at.isoformat(), ANN_VERSION: manifest.version,
           ANN_LICENSES: manifest.source.license, ANN_DESCRIPTION: manifest.source.description,
           "dev.triserve.model.name": manifest.name, "dev.triserve.model.version": manifest.version,
           "dev.triserve.model.task": manifest.task, "dev.triserve.model.variant": manifest.variant}
    if manifest.source.url:
        out[ANN_SOURCE] = manifest.source.url
    return out


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def file_media_type(path: str) -> str:
    if path.endswith(".onnx"):
        return ONNX_TYPE
    if path.endswith(".json"):
        return FILE_TYPE + "+json"
    return FILE_TYPE


class OciStore(RegistryStore):
    def __init__(self, uri: str, timeout: float = 60.0, credentials: Credentials | None = None):
        parts = urlsplit(uri)
        if parts.username is not None or parts.password is not None:  # never echo this URI: it holds a secret
            raise RegistryError("credentials inside an oci:// URI are refused (they would end up in logs, errors and "
                                f"alias logs): use {ENV_USERNAME} / {ENV_PASSWORD} or the docker config file")
        if not parts.hostname:
            raise RegistryError(f"bad OCI registry URI {uri!r}: expected oci://host[:port]/prefix")
        query = parse_qs(parts.query)
        insecure = (query.get("insecure") or [""])[0].lower() in ("1", "true", "yes")
        self.prefix = parts.path.strip("/")
        self.host = parts.netloc.lower()
        self.uri = f"oci://{parts.netloc}/{self.prefix}".rstrip("/")
        api_host = DOCKER_HUB_API if parts.hostname.lower() in DOCKER_HUB_HOSTS else parts.netloc
        self._credentials, self._credentials_read = credentials, credentials is not None
        self.oras = OrasRegistry(self, api_host, insecure or _loopback(parts.hostname), timeout)
        self.base = f"{self.oras.prefix}://{api_host}"

    @property
    def credentials(self) -> Credentials | None:
        """Looked up at the first auth challenge (an anonymous registry never reads them)."""
        if not self._credentials_read:
            self._credentials = find_credentials(self.host)
            self._credentials_read = True
            if self._credentials is not None:
                log.debug("%s: credentials: %s", self.host, self._credentials.describe())
        return self._credentials

    def redact(self, text: str) -> str:
        """Whatever a registry or a library put in a message, the password and Basic blob never leave."""
        return redact(text, self._credentials)

    # -- HTTP ----------------------------------------------------------------------------------------------------
    def _repo(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def _container(self, name: str, tag: str | None = None) -> oras.container.Container:
        """oras' reference for <prefix>/<name>[:tag] on this registry (fields set, not parsed: a prefix with a dot
        would read as a registry host)."""
        container = oras.container.Container("placeholder", registry=self.oras.hostname)
        namespace, _, repository = self._repo(name).rpartition("/")
        container.registry, container.namespace, container.repository = self.oras.hostname, namespace or None, \
            repository
        container.tag, container.digest = tag or "latest", None
        return container

    def _url(self, path: str) -> str:
        return path if path.startswith("http") else self.base + path

    @overload
    def _request(self, method: str, url: str, ok: Iterable[int] = ..., allow_404: Literal[False] = ...,
                 content: Any = ..., headers: dict | None = ...) -> requests.Response: ...

    @overload
    def _request(self, method: str, url: str, ok: Iterable[int] = ..., *, allow_404: bool,
                 content: Any = ..., headers: dict | None = ...) -> requests.Response | None: ...

    def _request(self, method: str, url: str, ok: Iterable[int] = (200,), allow_404: bool = False,
                 content: Any = None, headers: dict | None = None) -> requests.Response | None:
        """The registry's answer when its status is in `ok`, None for a 404 when `allow_404`; else raises."""
        url = self._url(url)
        response = self.oras.do_request(url, method, data=content, headers=headers)
        return self._checked(response, method, url, ok, allow_404)

    def _checked(self, response: requests.Response, method: str, url: str, ok: Iterable[int],
                 allow_404: bool) -> requests.Response | None:
        status = response.status_code
        if status in ok:
            return response
        if status == 404 and allow_404:
            response.close()
            return None
        try:
            body = response.text[:300]
        except requests.RequestException:
            body = ""
        response.close()
        detail = self.redact(f"{method} {urlsplit(url).path} -> HTTP {status} {body}".strip())
        if status >= 500 or status == 429:
            raise RegistryUnavailable(f"{self.uri}: {detail}")
        if status in (401, 403):
            who = self._credentials.describe() if self._credentials else "anonymous"
            raise RegistryAuthError(f"{self.uri}: access denied by registry {self.host} ({who}): {detail}")
        raise RegistryError(f"{self.uri}: {detail}")

    def _get_manifest(self, name: str, ref: str) -> tuple[dict, bytes] | None:
        url = f"{self.oras.prefix}://{self._container(name).manifest_url(ref)}"
        response = self._request("GET", url, allow_404=True, headers={"Accept": OCI_MANIFEST})
        return None if response is None else (response.json(), response.content)

    def _manifest_exists(self, name: str, ref: str) -> bool:
        url = f"{self.oras.prefix}://{self._container(name).manifest_url(ref)}"
        return self._request("HEAD", url, allow_404=True, headers={"Accept": OCI_MANIFEST}) is not None

    def _blob(self, name: str, digest: str) -> bytes:
        url = f"{self.oras.prefix}://{self._container(name).get_blob_url(digest)}"
        response = self._checked(self.oras.get_blob(self._container(name), digest), "GET", url, (200,), True)
        if response is None:
            raise NotFound(f"{self.uri}: blob {digest} missing from {self._repo(name)}")
        if _digest(response.content) != digest:
            raise IntegrityError(f"{self.uri}: blob {digest} of {self._repo(name)} does not match its digest")
        return response.content

    def _stream_blob(self, name: str, digest: str) -> Iterator[bytes]:
        container = self._container(name)
        url = f"{self.oras.prefix}://{container.get_blob_url(digest)}"
        response = self.oras.get_blob(container, digest, stream=True)
        try:
            if response.status_code == 404:
                raise NotFound(f"{self.uri}: blob {digest} missing from {self._repo(name)}")
            self._checked(response, "GET", url, (200,), False)
            yield from response.iter_content(CHUNK)
        except requests.RequestException as exc:
            raise RegistryUnavailable(f"{self.uri}: download of {digest} failed: {type(exc).__name__}") from exc
        finally:
            response.close()

    def _upload(self, name: str, digest: str, size: int, content) -> None:
        """Monolithic blob upload (POST to open a session, PUT the bytes with ?digest=), skipped if present.
        content: bytes, or a FileBody streamed from disk."""
        container = self._container(name)
        if self.oras.blob_exists({"digest": digest, "size": size}, container):
            return
        started = self._request("POST", f"{self.oras.prefix}://{container.upload_blob_url()}", ok=(202,),
                                headers={"Content-Length": "0"})
        location = urljoin(self.base + "/", started.headers["Location"])
        location += ("&" if "?" in location else "?") + f"digest={digest}"
        self._request("PUT", location, ok=(201,), content=content,
                      headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)})

    def _put_manifest(self, name: str, tag: str, manifest: dict) -> None:
        url = f"{self.oras.prefix}://{self._container(name, tag).manifest_url()}"
        self._checked(self.oras.upload_manifest(manifest, self._container(name, tag)), "PUT", url, (201,), False)

    def _paged(self, path: str, key: str) -> list[str]:
        out: list[str] = []
        url: str | None = self._url(path)
        while url:
            response = self._request("GET", url, allow_404=True)
            if response is None:
                return out
            out += response.json().get(key) or []
            link = response.links.get("next", {}).get("url")
            url = urljoin(url, link) if link else None
        return out

    # -- reading -------------------------------------------------------------------------------------------------
    def models(self) -> list[str]:
        head = f"{self.prefix}/" if self.prefix else ""
        names = [r[len(head):] for r in self._paged("/v2/_catalog?n=1000", "repositories") if r.startswith(head)]
        return sorted(n for n in names if "/" not in n and re.match(NAME_PATTERN, n) and self._tags(n))

    def _tags(self, name: str) -> list[str]:
        return [t for t in self._paged(f"/v2/{self._repo(name)}/tags/list?n=1000", "tags")
                if re.match(VERSION_PATTERN, t)]

    def versions(self, name: str) -> list[str]:
        """Version tags, oldest first (by the creation time annotated on each manifest)."""
        created = {}
        for tag in self._tags(name):
            found = self._get_manifest(name, tag)
            if found:
                created[tag] = (found[0].get("annotations") or {}).get(ANN_CREATED, "")
        return sorted(created, key=lambda t: (created[t], t))

    def has(self, name: str, version: str) -> bool:
        return bool(re.match(VERSION_PATTERN, version)) and self._manifest_exists(name, version)

    def _alias_doc(self, name: str) -> dict:
        found = self._get_manifest(name, ALIASES_TAG)
        if found is None:
            return {"name": name, "aliases": {}, "log": []}
        layers = [layer for layer in found[0].get("layers", []) if layer.get("mediaType") == ALIASES_TYPE]
        if not layers:
            raise RegistryError(f"{self.uri}: tag {ALIASES_TAG} of {self._repo(name)} holds no alias document")
        return json.loads(self._blob(name, layers[0]["digest"]))

    def aliases(self, name: str) -> dict[str, str]:
        return dict(self._alias_doc(name)["aliases"])

    def alias_log(self, name: str) -> list[dict]:
        return list(self._alias_doc(name)["log"])

    def _version_manifest(self, name: str, version: str) -> tuple[dict, Manifest]:
        found = self._get_manifest(name, version) if re.match(VERSION_PATTERN, version) else None
        if found is None:
            raise NotFound(f"{name}:{version} is not in registry {self.uri}")
        oci = found[0]
        config = oci.get("config") or {}
        if config.get("mediaType") != CONFIG_TYPE:
            raise RegistryError(f"{self.uri}: {self._repo(name)}:{version} is not a triserve model "
                                f"(config media type {config.get('mediaType')!r})")
        return oci, Manifest.model_validate_json(self._blob(name, config["digest"]))

    def manifest(self, name: str, version: str) -> Manifest:
        return self._version_manifest(name, version)[1]

    def _reader(self, name: str, version: str):
        oci, manifest = self._version_manifest(name, version)
        layers = {}
        for layer in oci.get("layers", []):
            ann = layer.get("annotations") or {}
            path = ann.get(ANN_PATH) or ann.get(ANN_TITLE)
            if path:
                layers[path] = layer

        def read(entry: FileEntry) -> Iterator[bytes]:
            layer = layers.get(entry.path)
            if layer is None:
                raise IntegrityError(f"{name}:{version}: missing file {entry.path} (no layer in {self.uri})")
            if layer["digest"] != f"sha256:{entry.sha256}" or layer.get("size") != entry.size:
                raise IntegrityError(
                    f"{name}:{version}: sha256 mismatch for {entry.path} in {self.uri}: the layer is "
                    f"{layer['digest'][:19]}… ({layer.get('size')} bytes), manifest.json records "
                    f"sha256:{entry.sha256[:12]}… ({entry.size} bytes)")
            return self._stream_blob(name, layer["digest"])

        return manifest, read

    # -- writing -------------------------------------------------------------------------------------------------
    def _publish(self, staging: Path, manifest: Manifest, progress: bool) -> None:
        name, version = manifest.name, manifest.version
        layers = []
        for entry in manifest.files:
            digest = f"sha256:{entry.sha256}"
            with progress_bar(progress, entry.size, f"push {name}:{entry.path}") as bar:
                body = FileBody(staging / entry.path, entry.size, bar)
                try:
                    self._upload(name, digest, entry.size, body)
                finally:
                    body.close()
            layers.append({"mediaType": file_media_type(entry.path), "digest": digest, "size": entry.size,
                           "annotations": {ANN_TITLE: entry.path, ANN_PATH: entry.path, ANN_SHA: entry.sha256}})
        config = manifest.dumps().encode()
        self._upload(name, _digest(config), len(config), config)
        oci = {
            "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": ARTIFACT_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": _digest(config), "size": len(config)},
            "layers": layers,
            "annotations": manifest_annotations(manifest),
        }
        if self._manifest_exists(name, version):  # narrow the window: someone published it during our upload
            raise VersionExists(f"{name}:{version} already exists in {self.uri}; versions are immutable")
        self._put_manifest(name, version, oci)

    def _set_alias(self, name: str, alias: str, version: str, by: str | None) -> None:
        doc = self._alias_doc(name)
        previous = doc["aliases"].get(alias)
        doc["aliases"][alias] = version
        doc["log"].append(alias_entry(alias, previous, version, by))
        self._put_alias_doc(name, doc)

    def _put_alias_doc(self, name: str, doc: dict) -> None:
        body = json.dumps(doc, indent=2, sort_keys=True).encode()
        empty = b"{}"
        self._upload(name, _digest(body), len(body), body)
        self._upload(name, _digest(empty), len(empty), empty)
        self._put_manifest(name, ALIASES_TAG, {
            "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": ALIASES_ARTIFACT,
            "config": {"mediaType": EMPTY_TYPE, "digest": _digest(empty), "size": len(empty)},
            "layers": [{"mediaType": ALIASES_TYPE, "digest": _digest(body), "size": len(body),
                        "annotations": {ANN_TITLE: "aliases.json"}}],
        })

    def close(self) -> None:
        self.oras.session.close()
