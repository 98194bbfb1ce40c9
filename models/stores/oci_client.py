"""The oci:// store's request layer: oras-py's Registry with its one request method replaced, answering 401
challenges, and the streamed upload body.

Authentication. A 401 is answered the way its WWW-Authenticate challenge asks:
  * `Basic realm=...` (htpasswd registries; Harbor, Artifactory, Nexus in basic mode): the credentials as HTTP Basic,
    then sent up front on every later request;
  * `Bearer realm=...,service=...,scope=...` (the distribution token protocol: GHCR, Docker Hub, ECR, Harbor, GitLab,
    Quay, ACR): a token for exactly the challenged scope from the realm (HTTP Basic with the credentials, anonymous
    without them), kept per repository and re-requested whenever the registry challenges again (expired, or a wider
    scope such as pull,push for an upload). A request refused after its challenge was answered is not re-sent.

Why the request layer is ours and not oras-py's. The store runs on oras-py's `oras.provider.Registry` (its requests
session with the cookie policy Harbor needs, the https/http and TLS-verification switch, blob HEAD and GET, manifest
PUT with its OCI-manifest schema check), `oras.container.Container` for references and API URLs, and
`oras.auth.utils` (WWW-Authenticate parsing, Basic encoding). Its one request method, `Registry.do_request`, is
replaced here (`OrasRegistry.do_request`), because in oras 0.2.43, measured against docker-registry 2.8 with the
htpasswd and token servers of tests/models/conftest.py:
  * do_request is wrapped in `oras.decorator.retry`: a hand-written loop retrying any exception 5 times, sleeping 3, 5,
    11, 29 and 83 s (131 s, no jitter, not configurable). A refused connection takes over two minutes to report,
    where the store must raise RegistryUnavailable at once: triserve.models.cache owns retries and backoff, then falls
    back to
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

import logging
import re
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import oras.auth.utils
import oras.provider
import requests

from .base import CHUNK, RegistryAuthError, RegistryError, RegistryUnavailable
from .oci_auth import Credentials, where_credentials_go

log = logging.getLogger("triserve.models.stores.oci")


class Registrant(Protocol):
    """What the request layer needs of its store: names for messages, the credentials (looked up lazily), redaction."""

    uri: str
    host: str

    @property
    def credentials(self) -> Credentials | None: ...

    def redact(self, text: str) -> str: ...


class _KeepHeaders(requests.auth.AuthBase):
    """Session auth that leaves requests as they are: stops requests from replacing our Authorization header with a
    ~/.netrc entry (requests consults netrc only when the session has no auth)."""

    def __call__(self, request):
        return request


_REPO_PATH = re.compile(r"^/v2/(.+?)/(?:blobs|manifests|tags|referrers)/")


def _scope_key(url: str) -> str:
    """Which cached token a request may carry: its repository, or the catalog, or '' (the /v2/ ping)."""
    path = urlsplit(url).path
    if path.startswith("/v2/_catalog"):
        return "registry:catalog"
    match = _REPO_PATH.match(path)
    return match.group(1) if match else ""


class OrasRegistry(oras.provider.Registry):
    """oras-py's Registry with its request method replaced: no retry loop, every challenge answered (Basic or a
    token per scope), auth and transport failures as RegistryAuthError / RegistryUnavailable (module docstring)."""

    def __init__(self, store: Registrant, api_host: str, insecure: bool, timeout: float):
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
            raise RegistryUnavailable(self.store.redact(
                f"{self.store.uri} unreachable: {type(exc).__name__}: {exc}")) from exc

    def _answer(self, challenge: str, sent: str | None, method: str, url: str) -> str:
        """The Authorization value a 401 challenge asks for."""
        scheme = challenge.split(" ", 1)[0].strip().lower()
        credentials = self.store.credentials
        where = f"registry {self.store.host}"
        if scheme == "basic":
            if credentials is None:
                raise RegistryAuthError(f"{self.store.uri}: {where} requires authentication (HTTP Basic) and no "
                                        f"credentials were found: {where_credentials_go(self.store.host)}")
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
            raise RegistryUnavailable(self.store.redact(
                f"{self.store.uri}: token service {realm} unreachable: {type(exc).__name__}: {exc}")) from exc
        with response:
            status = response.status_code
            if status in (401, 403):
                if credentials is None:
                    raise RegistryAuthError(
                        f"{self.store.uri}: registry {self.store.host} requires authentication (its token service "
                        f"{realm} refused anonymous access, HTTP {status}) and no credentials were found: "
                        f"{where_credentials_go(self.store.host)}")
                raise RegistryAuthError(
                    f"{self.store.uri}: authentication failed for registry {self.store.host}: its token service "
                    f"{realm} refused the credentials ({credentials.describe()}; HTTP {status})")
            if status != 200:
                cls = RegistryUnavailable if status >= 500 or status == 429 else RegistryError
                raise cls(self.store.redact(f"{self.store.uri}: token service {realm} -> HTTP {status} "
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
                                     f"found: {where_credentials_go(self.store.host)}")
        return RegistryAuthError(f"{self.store.uri}: access denied by registry {self.store.host}: the token it issued "
                                 f"({credentials.describe()}) does not allow {method} {path} (HTTP 401)")


class FileBody:
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
