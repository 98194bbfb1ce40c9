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

Authentication. A 401 is answered the way its WWW-Authenticate challenge asks:
  * `Basic realm=...` (htpasswd registries; Harbor, Artifactory, Nexus in basic mode): the credentials as HTTP Basic,
    then sent up front on every later request;
  * `Bearer realm=...,service=...,scope=...` (the distribution token protocol: GHCR, Docker Hub, ECR, Harbor, GitLab,
    Quay, ACR): a token for exactly the challenged scope from the realm (HTTP Basic with the credentials, anonymous
    without them), kept per repository and re-requested whenever the registry challenges again (expired, or a wider
    scope such as pull,push for an upload). A request refused after its challenge was answered is not re-sent.
Credentials for a registry host, the first source that has them:
  1. TRISERVE_REGISTRY_USERNAME + TRISERVE_REGISTRY_PASSWORD (the TRISERVE_REGISTRY_* family of configs/settings.py:
     TRISERVE_REGISTRY_URI names the store); they apply to every oci:// store the process opens, so copying between
     two registries with different accounts takes the docker config file;
  2. the docker config file, $DOCKER_CONFIG/config.json if DOCKER_CONFIG is set, else ~/.docker/config.json: the
     `auths` entry of the host (keyed `host[:port]` with or without http(s)://, localhost and 127.0.0.1 alike, Docker
     Hub's `https://index.docker.io/v1/`) with base64 `auth` ("user:password") or `username` + `password`, as
     `docker login`, `podman login --authfile`, `oras login` and `skopeo login` write it. Credential helpers
     (credsStore, credHelpers) are not run: put the entry inline or use the environment variables;
  3. none: anonymous (public pulls). A registry that wants credentials then raises RegistryAuthError saying where
     they are looked for.
The password is never logged, never part of an exception message or the store's URI, never written into the
registry (manifests, alias documents) or into pulled files; credentials inside the URI (oci://user:pw@host) are
refused. A refused login (Basic credentials rejected, or the token service answering 401/403) raises
RegistryAuthError (models.stores.base, a RegistryError: the CLI prints "error: ... authentication failed ..." naming
the registry, the user and the credential source, and exits 1 without a traceback); it is never retried (only
RegistryUnavailable is, by models.cache).

Why the request layer is ours and not oras-py's. The store runs on oras-py's `oras.provider.Registry` (its requests
session with the cookie policy Harbor needs, the https/http and TLS-verification switch, blob HEAD and GET, manifest
PUT with its OCI-manifest schema check), `oras.container.Container` for references and API URLs, and
`oras.auth.utils` (WWW-Authenticate parsing, Basic encoding). Its one request method, `Registry.do_request`, is
replaced here (`_OrasRegistry.do_request`), because in oras 0.2.43, measured against docker-registry 2.8 with the
htpasswd and token servers of tests/models/conftest.py:
  * do_request is wrapped in `oras.decorator.retry`: a hand-written loop retrying any exception 5 times, sleeping 3, 5,
    11, 29 and 83 s (131 s, no jitter, not configurable). A refused connection takes over two minutes to report,
    where the store must raise RegistryUnavailable at once: models.cache owns retries and backoff, then falls back to
    the verified cache;
  * its token backend keeps one bearer token for every scope and asks for a new one only on 403: after the pull-scoped
    token of the blob HEAD that precedes an upload, the upload POST gets 401 insufficient_scope and the same token is
    re-sent, so it cannot push to a token-auth registry. The backend is also fixed up front: the default (token)
    against a Basic challenge requests the realm string as a URL, then enters the 131 s loop;
  * a refused login, a missing tag and a registry error all surface as ValueError("Issue with <url>: <reason>"), where
    the store needs RegistryAuthError, NotFound and RegistryUnavailable;
  * credentials come from ORAS_USER/ORAS_PASS (basic backend only) or ~/.docker/config.json ($DOCKER_CONFIG ignored).
Not used either: push()/pull() (layer titles flattened to base names, whole files read into memory, none of our
sha256 checks), put_upload (reads the whole file into memory: uploads stream here, with a progress bar, and can be
re-sent after an auth challenge) and get_tags (a 404 for an unknown repository raises instead of giving []).
Nothing here retries: a request is sent once, plus once more with the answer to an auth challenge.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload
from urllib.parse import parse_qs, urljoin, urlsplit

import oras.auth.utils
import oras.container
import oras.provider
import oras.utils
import requests

from models.manifest import NAME_PATTERN, VERSION_PATTERN, FileEntry, Manifest

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

ENV_USERNAME = "TRISERVE_REGISTRY_USERNAME"
ENV_PASSWORD = "TRISERVE_REGISTRY_PASSWORD"
DOCKER_HUB_HOSTS = ("docker.io", "index.docker.io", "registry-1.docker.io")
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


# -- credentials ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str  # where they came from, for messages: "$TRISERVE_REGISTRY_USERNAME" or "docker config <path>"

    def basic(self) -> str:
        return oras.auth.utils.get_basic_auth(self.username, self.password)

    def describe(self) -> str:
        return f"user {self.username!r} from {self.source}"


def docker_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """$DOCKER_CONFIG/config.json when DOCKER_CONFIG is set, else ~/.docker/config.json (docker's own rule)."""
    env = os.environ if environ is None else environ
    if env.get("DOCKER_CONFIG"):
        return Path(env["DOCKER_CONFIG"]).expanduser() / "config.json"
    return Path(os.path.expanduser("~")) / ".docker" / "config.json"


def _config_host(key: str) -> str:
    """An `auths` key (host, host:port, https://host/v1/) -> host[:port], lower case."""
    return re.sub(r"^[a-z][a-z0-9+.-]*://", "", key.strip().lower()).split("/", 1)[0]


def _same_host(key_host: str, host: str) -> bool:
    if key_host in DOCKER_HUB_HOSTS and host in DOCKER_HUB_HOSTS:
        return True
    return key_host in set(oras.utils.iter_localhosts(host))


def find_credentials(host: str, environ: Mapping[str, str] | None = None) -> Credentials | None:
    """The credentials for a registry host: the environment variables, else the docker config file, else None."""
    env = os.environ if environ is None else environ
    username, password = env.get(ENV_USERNAME), env.get(ENV_PASSWORD)
    if username or password:
        if not (username and password):
            missing = ENV_PASSWORD if username else ENV_USERNAME
            raise RegistryAuthError(f"registry {host}: {missing} is not set ({ENV_USERNAME} and {ENV_PASSWORD} go "
                                    "together)")
        return Credentials(username, password, f"${ENV_USERNAME}/${ENV_PASSWORD}")
    path = docker_config_path(env)
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # the message of a JSON error may quote the file: type only
        raise RegistryError(f"docker config {path} is unreadable ({type(exc).__name__})") from None
    auths = config.get("auths") if isinstance(config, dict) else None
    host = host.lower()
    for key, entry in (auths or {}).items():
        if not isinstance(entry, dict) or not _same_host(_config_host(key), host):
            continue
        source = f"docker config {path} (auths[{key!r}])"
        if entry.get("auth"):
            try:
                user, sep, secret = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
            except (binascii.Error, ValueError):
                raise RegistryError(f"{source}: `auth` is not base64 of 'user:password'") from None
            if not sep:
                raise RegistryError(f"{source}: `auth` is not base64 of 'user:password'")
            return Credentials(user, secret, source)
        if entry.get("username") and entry.get("password"):
            return Credentials(entry["username"], entry["password"], source)
    return None


def _where_credentials_go(host: str) -> str:
    return (f"set {ENV_USERNAME} and {ENV_PASSWORD}, or add an `auths` entry for {host} to {docker_config_path()} "
            f"(`docker login {host}` writes one; DOCKER_CONFIG names another directory)")


class _KeepHeaders(requests.auth.AuthBase):
    """Session auth that leaves requests as they are: stops requests from replacing our Authorization header with a
    ~/.netrc entry (requests consults netrc only when the session has no auth)."""

    def __call__(self, request):
        return request


# -- the request layer ---------------------------------------------------------------------------------------------
_REPO_PATH = re.compile(r"^/v2/(.+?)/(?:blobs|manifests|tags|referrers)/")


def _scope_key(url: str) -> str:
    """Which cached token a request may carry: its repository, or the catalog, or '' (the /v2/ ping)."""
    path = urlsplit(url).path
    if path.startswith("/v2/_catalog"):
        return "registry:catalog"
    match = _REPO_PATH.match(path)
    return match.group(1) if match else ""


class _OrasRegistry(oras.provider.Registry):
    """oras-py's Registry with its request method replaced: no retry loop, every challenge answered (Basic or a
    token per scope), auth and transport failures as RegistryAuthError / RegistryUnavailable (module docstring)."""

    def __init__(self, store: OciStore, api_host: str, insecure: bool, timeout: float):
        super().__init__(hostname=api_host, insecure=insecure, auth_backend="basic")
        self.session.auth = _KeepHeaders()
        self.store = store
        self.timeout = (min(timeout, 5.0), timeout)
        self._authorization: dict[str, str] = {}  # scope key -> Authorization value ("*": Basic, every request)

    def do_request(self, url: str, method: str = "GET", data=None, headers: dict | None = None,
                   json: dict | None = None, stream: bool = False) -> requests.Response:
        """One request (the signature of oras' do_request, which every Registry method calls); a 401 is answered
        once. Returns any other response for the caller to judge."""
        key = _scope_key(url)
        headers = dict(headers or {})  # oras passes its own self.headers: never write a token into it
        sent = self._authorization.get(key) or self._authorization.get("*")
        if sent:
            headers["Authorization"] = sent
        response = self._send(method, url, data, headers, json, stream)
        if response.status_code != 401:
            return response
        challenge = response.headers.get("WWW-Authenticate", "")
        response.close()
        answer = self._answer(challenge, sent, method, url)
        headers["Authorization"] = answer
        if hasattr(data, "seek"):
            data.seek(0)  # a streamed upload body is sent again from its start
        response = self._send(method, url, data, headers, json, stream)
        if response.status_code == 401:
            response.close()
            self._authorization.pop(key, None)
            raise self._refused(answer, method, url)
        self._authorization["*" if answer.startswith("Basic ") else key] = answer
        return response

    def _send(self, method: str, url: str, data, headers: dict, json_body, stream: bool) -> requests.Response:
        try:
            return self.session.request(method, url, data=data, json=json_body, headers=headers, stream=stream,
                                        timeout=self.timeout, verify=self._tls_verify)
        except requests.RequestException as exc:
            raise RegistryUnavailable(self.store._redact(
                f"{self.store.uri} unreachable: {type(exc).__name__}: {exc}")) from exc

    def _answer(self, challenge: str, sent: str | None, method: str, url: str) -> str:
        """The Authorization value a 401 challenge asks for."""
        scheme = challenge.split(" ", 1)[0].strip().lower()
        credentials = self.store.credentials
        where = f"registry {self.store.host}"
        if scheme == "basic":
            if credentials is None:
                raise RegistryAuthError(f"{self.store.uri}: {where} requires authentication (HTTP Basic) and no "
                                        f"credentials were found: {_where_credentials_go(self.store.host)}")
            answer = "Basic " + credentials.basic()
            if sent == answer:  # these very credentials were just refused
                raise self._refused(answer, method, url)
            return answer
        if scheme == "bearer":
            parsed = oras.auth.utils.parse_auth_header(challenge)
            if not parsed.realm:
                raise RegistryAuthError(f"{self.store.uri}: {where} sent a Bearer challenge without a realm")
            return "Bearer " + self._token(parsed)
        raise RegistryAuthError(f"{self.store.uri}: {where} asks for unsupported authentication "
                                f"{scheme or '(no WWW-Authenticate challenge)'!r} on {method} {urlsplit(url).path}")

    def _token(self, challenge: oras.auth.utils.authHeader) -> str:
        """A bearer token for the challenged scope from the token service (distribution token protocol)."""
        credentials = self.store.credentials
        params: dict[str, str | list[str]] = {}
        if challenge.service:
            params["service"] = challenge.service
        if challenge.scope:
            params["scope"] = challenge.scope.split()
        headers = {"Accept": "application/json"}
        if credentials is not None:
            headers["Authorization"] = "Basic " + credentials.basic()
        realm = challenge.realm
        try:
            response = self.session.get(realm, params=params, headers=headers, timeout=self.timeout,
                                        verify=self._tls_verify)
        except requests.RequestException as exc:
            raise RegistryUnavailable(self.store._redact(
                f"{self.store.uri}: token service {realm} unreachable: {type(exc).__name__}: {exc}")) from exc
        with response:
            status = response.status_code
            if status in (401, 403):
                if credentials is None:
                    raise RegistryAuthError(
                        f"{self.store.uri}: registry {self.store.host} requires authentication (its token service "
                        f"{realm} refused anonymous access, HTTP {status}) and no credentials were found: "
                        f"{_where_credentials_go(self.store.host)}")
                raise RegistryAuthError(
                    f"{self.store.uri}: authentication failed for registry {self.store.host}: its token service "
                    f"{realm} refused the credentials ({credentials.describe()}; HTTP {status})")
            if status != 200:
                cls = RegistryUnavailable if status >= 500 or status == 429 else RegistryError
                raise cls(self.store._redact(f"{self.store.uri}: token service {realm} -> HTTP {status} "
                                             f"{response.text[:300]}".strip()))
            try:
                body = response.json()
                token = body.get("token") or body.get("access_token")
            except (ValueError, AttributeError):
                token = None
        if not token:
            raise RegistryError(f"{self.store.uri}: token service {realm} answered without a token")
        log.debug("%s: bearer token for scope %s from %s", self.store.host, challenge.scope or "-", realm)
        return token

    def _refused(self, answer: str, method: str, url: str) -> RegistryAuthError:
        """The registry still says 401 with the answer to its own challenge."""
        credentials = self.store.credentials
        path = urlsplit(url).path
        if answer.startswith("Basic ") and credentials is not None:  # a Basic answer is made of the credentials
            return RegistryAuthError(f"{self.store.uri}: authentication failed for registry {self.store.host}: it "
                                     f"refused the credentials ({credentials.describe()}; HTTP 401 on {method} "
                                     f"{path})")
        if credentials is None:  # an anonymous token (public pulls) that does not cover this
            return RegistryAuthError(f"{self.store.uri}: registry {self.store.host} requires authentication for "
                                     f"{method} {path} (an anonymous token does not allow it) and no credentials were "
                                     f"found: {_where_credentials_go(self.store.host)}")
        return RegistryAuthError(f"{self.store.uri}: access denied by registry {self.store.host}: the token it issued "
                                 f"({credentials.describe()}) does not allow {method} {path} (HTTP 401)")


class _FileBody:
    """A file as an upload body: streamed in blocks with a known length (Content-Length), drawing the progress bar,
    and rewindable (re-sent from its start after an auth challenge)."""

    def __init__(self, path: Path, size: int, bar):
        self.path, self.size, self.bar = path, size, bar
        self.fh = open(path, "rb")

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        block = self.fh.read(CHUNK if n is None or n < 0 else n)
        self.bar.update(len(block))
        return block

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.fh.seek(offset, whence)

    def close(self) -> None:
        self.fh.close()


# -- the store -----------------------------------------------------------------------------------------------------
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
        self.oras = _OrasRegistry(self, api_host, insecure or _loopback(parts.hostname), timeout)
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

    def _redact(self, text: str) -> str:
        """Whatever a registry or a library put in a message, the password and Basic blob never leave."""
        creds = self._credentials
        if creds is not None:
            for secret in (creds.basic(), creds.password):
                if secret:
                    text = text.replace(secret, "***")
        return re.sub(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}", r"\1 ***", text)

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
        detail = self._redact(f"{method} {urlsplit(url).path} -> HTTP {status} {body}".strip())
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
        content: bytes, or a _FileBody streamed from disk."""
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
                body = _FileBody(staging / entry.path, entry.size, bar)
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
