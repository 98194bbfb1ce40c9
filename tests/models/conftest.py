"""Fixtures for the registry store tests: real servers on 127.0.0.1, each stopped by PID or handle.

  * oci_registry: Debian's `docker-registry` (CNCF distribution 2.x) with filesystem storage in a tmp dir;
    skipped with the reason when the binary is not installed (.ci/run apt-installs it);
  * s3_endpoint: moto's ThreadedMotoServer;
  * http_root: a threaded http.server serving a directory that a LocalStore writes into.
"""
from __future__ import annotations

import functools
import http.server
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid

import httpx
import pytest

DOCKER_REGISTRY_CANDIDATES = ("docker-registry", "registry")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_port() -> int:
    """A port nothing listens on (bound then released)."""
    return free_port()


def unique_name(prefix: str = "toy") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _docker_registry_binary() -> str | None:
    for name in DOCKER_REGISTRY_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="session")
def oci_registry(tmp_path_factory):
    """URI prefix of a fresh docker-registry: oci://127.0.0.1:<port>/test."""
    binary = _docker_registry_binary()
    if binary is None:
        pytest.skip("the docker-registry binary is not installed (Debian package docker-registry; .ci/run installs "
                    "it with apt-get when available)")
    root = tmp_path_factory.mktemp("oci-registry")
    port = free_port()
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: "
        f"{root / 'data'}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n")
    log = open(root / "registry.log", "wb")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                pytest.fail(f"docker-registry exited with {proc.returncode}: {(root / 'registry.log').read_text()}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("docker-registry did not answer /v2/ within 20s")
            time.sleep(0.1)
        yield f"oci://127.0.0.1:{port}/test"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        log.close()


@pytest.fixture(scope="session")
def s3_endpoint():
    """http://127.0.0.1:<port> of a moto S3 server with credentials in the environment and bucket 'models'."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed (dev extra)")
    boto3 = pytest.importorskip("boto3", reason="boto3 is not installed (s3 / dev extra)")
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="models")
        yield endpoint
    finally:
        server.stop()
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
