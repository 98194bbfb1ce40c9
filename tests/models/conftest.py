"""Fixtures for the registry store tests: real servers on 127.0.0.1, each stopped by PID or handle.

  * oci_registry: Debian's `docker-registry` (CNCF distribution 2.x) with filesystem storage in a tmp dir;
    skipped with the reason when the binary is not installed (.ci/run apt-installs it);
  * oci_registry_basic: the same registry behind htpasswd (HTTP Basic) auth, one user with a random password (the
    bcrypt htpasswd line comes from `htpasswd -Bbn` (apache2-utils), else python `bcrypt`, else libxcrypt's crypt(3));
  * oci_registry_token: the same registry behind token (Bearer) auth, with a token server on 127.0.0.1 (a thread
    here) that checks HTTP Basic credentials and signs RS256 JWTs with a throw-away self-signed certificate;
  * s3_endpoint: moto's ThreadedMotoServer;
  * http_root: a threaded http.server serving a directory that a LocalStore writes into.
"""
from __future__ import annotations

import base64
import contextlib
import ctypes
import ctypes.util
import dataclasses
import functools
import http.server
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from scripts.drills.ports import ReservedPort
from scripts.drills.server import free_port

DOCKER_REGISTRY_CANDIDATES = ("docker-registry", "registry")


def closed_port() -> int:
    """A port nothing listens on (bound then released): for a client that must find nothing there. A port a server
    of ours binds is held until it stops (scripts/drills/ports.py)."""
    return free_port()


def unique_name(prefix: str = "toy") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _docker_registry_binary() -> str | None:
    for name in DOCKER_REGISTRY_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class RegistryStartFailed(RuntimeError):
    pass


@contextlib.contextmanager
def docker_registry(root: Path, auth_yaml: str = "", binary: str | None = None):
    """A docker-registry on 127.0.0.1:<free port> storing under root; yields its host:port; stopped by PID (its
    process group) on exit. auth_yaml: an `auth:` section (htpasswd or token) or "" for an anonymous registry."""
    binary = binary or _docker_registry_binary()
    if binary is None:
        raise RegistryStartFailed("the docker-registry binary is not installed")
    held = ReservedPort()  # until the registry has stopped (Go's net.Listen sets SO_REUSEADDR: it binds it meanwhile)
    port = held.number
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: "
        f"{root / 'data'}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n{auth_yaml}")
    log = open(root / "registry.log", "wb")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                raise RegistryStartFailed(f"docker-registry exited with {proc.returncode}: "
                                          f"{(root / 'registry.log').read_text()}")
            try:  # 401 is an answer too: the auth-protected registries challenge /v2/
                if httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=1).status_code in (200, 401):
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RegistryStartFailed("docker-registry did not answer /v2/ within 20s")
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        log.close()
        held.release()


def _started(root: Path, auth_yaml: str = ""):
    """docker_registry() for a fixture: a missing binary skips, a registry that does not start fails."""
    binary = _docker_registry_binary()
    if binary is None:
        pytest.skip("the docker-registry binary is not installed (Debian package docker-registry; .ci/run installs "
                    "it with apt-get when available)")
    cm = docker_registry(root, auth_yaml, binary)
    try:
        return cm, cm.__enter__()
    except RegistryStartFailed as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def oci_registry(tmp_path_factory):
    """URI prefix of a fresh docker-registry: oci://127.0.0.1:<port>/test."""
    cm, host = _started(tmp_path_factory.mktemp("oci-registry"))
    try:
        yield f"oci://{host}/test"
    finally:
        cm.__exit__(None, None, None)


# -- authenticated registries -------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class AuthRegistry:
    host: str  # 127.0.0.1:<port>
    uri: str  # oci://<host>/test
    username: str
    password: str
    scheme: str  # "basic" or "token"
    token_requests: list = dataclasses.field(default_factory=list, compare=False)  # token server: (user, scopes)


def htpasswd_line(user: str, password: str) -> str | None:
    """A bcrypt htpasswd line (the only hash docker-registry accepts), or None when nothing here can make one."""
    tool = shutil.which("htpasswd")
    if tool:
        out = subprocess.run([tool, "-Bbn", user, password], capture_output=True, text=True, check=True).stdout
        return out.strip()
    try:
        import bcrypt
    except ImportError:
        bcrypt = None
    if bcrypt is not None:
        return f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()}"
    lib = ctypes.util.find_library("crypt")  # libxcrypt (Debian's libcrypt1) implements $2b$ bcrypt
    if lib:
        crypt = ctypes.CDLL(lib).crypt
        crypt.restype, crypt.argtypes = ctypes.c_char_p, [ctypes.c_char_p, ctypes.c_char_p]
        alphabet = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
        salt = "$2b$05$" + "".join(secrets.choice(alphabet) for _ in range(21)) + "."
        hashed = crypt(password.encode(), salt.encode())
        if hashed and hashed.startswith(b"$2b$"):
            return f"{user}:{hashed.decode()}"
    return None


def registry_password() -> str:
    """Distinctive, so a leak into logs or files is found by a plain substring search."""
    return "pw-" + secrets.token_hex(12)


@pytest.fixture(scope="session")
def oci_registry_basic(tmp_path_factory) -> AuthRegistry:
    """A docker-registry behind htpasswd auth (HTTP Basic challenge) with one user."""
    root = tmp_path_factory.mktemp("oci-registry-basic")
    user, password = "triserve-ci", registry_password()
    line = htpasswd_line(user, password)
    if line is None:
        pytest.skip("no bcrypt htpasswd generator: install apache2-utils (htpasswd) or python bcrypt")
    (root / "htpasswd").write_text(line + "\n")
    cm, host = _started(root, f"auth:\n  htpasswd:\n    realm: triserve-test\n    path: {root / 'htpasswd'}\n")
    try:
        yield AuthRegistry(host, f"oci://{host}/test", user, password, "basic")
    finally:
        cm.__exit__(None, None, None)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _TokenIssuer:
    """Signs distribution-style registry JWTs (RS256, x5c header naming a self-signed certificate)."""

    ISSUER, SERVICE = "triserve-test-issuer", "triserve-test-registry"

    def __init__(self, root: Path):
        import datetime

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "triserve test token issuer")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self.key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, content_commitment=False,
                                             key_encipherment=False, data_encipherment=False, key_agreement=False,
                                             crl_sign=False, encipher_only=False, decipher_only=False),
                               critical=True)
                .sign(self.key, hashes.SHA256()))
        self.bundle = root / "token-ca.pem"
        self.bundle.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.x5c = base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()

    def token(self, subject: str, scopes: list[str], ttl: int = 300) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        access = []
        for scope in scopes:  # type:name:actions (a name may hold ':' as in host:port/repo)
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": name, "actions": [a for a in actions.split(",") if a]})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}
        claims = {"iss": self.ISSUER, "sub": subject, "aud": self.SERVICE, "exp": now + ttl, "nbf": now - 60,
                  "iat": now, "jti": uuid.uuid4().hex, "access": access}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}"


def _token_handler(issuer: _TokenIssuer, users: dict[str, str], requests_seen: list):
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            user = None
            header = self.headers.get("Authorization", "")
            if header.startswith("Basic "):
                try:
                    given_user, _, given_pw = base64.b64decode(header[6:]).decode().partition(":")
                except ValueError:
                    given_user, given_pw = "", ""
                if users.get(given_user) == given_pw:
                    user = given_user
            requests_seen.append((user, query.get("scope", [])))
            if user is None or query.get("service", [""])[0] != issuer.SERVICE:
                body = json.dumps({"errors": [{"code": "UNAUTHORIZED", "message": "authentication required"}]})
                self._send(401, body.encode(), {"WWW-Authenticate": 'Basic realm="triserve-test-token"'})
                return
            token = issuer.token(user, query.get("scope", []))
            self._send(200, json.dumps({"token": token, "access_token": token, "expires_in": 300}).encode(), {})

        def _send(self, status: int, body: bytes, headers: dict) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.fixture(scope="session")
def oci_registry_token(tmp_path_factory) -> AuthRegistry:
    """A docker-registry behind token auth: a 401 Bearer challenge names our token server, which checks HTTP Basic
    credentials and returns a JWT granting the requested scopes; the registry verifies it against the certificate."""
    pytest.importorskip("cryptography", reason="cryptography signs the test token server's JWTs")
    root = tmp_path_factory.mktemp("oci-registry-token")
    user, password = "triserve-ci", registry_password()
    issuer = _TokenIssuer(root)
    seen: list = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _token_handler(issuer, {user: password}, seen))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    realm = f"http://127.0.0.1:{server.server_address[1]}/token"
    try:
        cm, host = _started(root, f"auth:\n  token:\n    realm: {realm}\n    service: {issuer.SERVICE}\n"
                                  f"    issuer: {issuer.ISSUER}\n    rootcertbundle: {issuer.bundle}\n")
        try:
            yield AuthRegistry(host, f"oci://{host}/test", user, password, "token", seen)
        finally:
            cm.__exit__(None, None, None)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="session")
def s3_endpoint():
    """http://127.0.0.1:<port> of a moto S3 server with credentials in the environment and bucket 'models'."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed (dev extra)")
    boto3 = pytest.importorskip("boto3", reason="boto3 is not installed (s3 / dev extra)")
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    held = ReservedPort()  # until the server has stopped (werkzeug's server sets SO_REUSEADDR: it binds it meanwhile)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=held.number, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{held.number}"
    try:
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="models")
        yield endpoint
    finally:
        server.stop()
        held.release()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="session")
def http_root(tmp_path_factory):
    """(directory, base URL): a real threaded HTTP server on 127.0.0.1 serving the directory."""
    root = tmp_path_factory.mktemp("http-tree")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
