"""Shared fixtures: tiny models built by the real pipeline once per session, and a real `bentoml serve`."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("BENTOML_DO_NOT_TRACK", "True")


@pytest.fixture(scope="session")
def tiny_registry(tmp_path_factory):
    """All three tasks built with the 'tiny' recipes into a throw-away registry (aliases 'stable' set)."""
    from models.registry import LocalRegistry
    from scripts.pipeline import build_task

    root = tmp_path_factory.mktemp("registry")
    cache = tmp_path_factory.mktemp("cache")
    registry = LocalRegistry(root)
    for task in ("detection", "text", "forecast"):
        build_task(task, "tiny", registry, cache)
    return registry


@pytest.fixture(scope="session")
def tiny_png_b64() -> str:
    import base64
    import io

    from PIL import Image, ImageDraw

    img = Image.new("RGB", (96, 64), (20, 20, 20))
    ImageDraw.Draw(img).rectangle([10, 10, 50, 40], fill=(200, 30, 30))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `bentoml serve services.gateway:Gateway` subprocess, stopped by PID (process group)."""

    def __init__(self, registry_dir: Path, env: dict[str, str] | None = None, log_path: Path | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # gRPC (services/protocols) binds with SO_REUSEPORT: every server gets its own port, never the default 3001.
        self.grpc_port = int((env or {}).get("TRISERVE_GRPC__PORT") or free_port())
        self.grpc_target = f"127.0.0.1:{self.grpc_port}"
        self.log_path = log_path
        # Each server gets its own BENTOML_HOME: BentoML keeps its prometheus multiprocess files there and wipes
        # them at start, so two servers sharing one home would erase each other's metrics.
        self.home = tempfile.mkdtemp(prefix="bentoml-home-")
        full_env = {**os.environ, "TRISERVE_REGISTRY_DIR": str(registry_dir), "BENTOML_HOME": self.home,
                    "TRISERVE_GRPC__PORT": str(self.grpc_port), **(env or {})}
        self._log = open(log_path, "wb") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bentoml", "serve", "services.gateway:Gateway", "--host", "127.0.0.1",
             "--port", str(self.port)], cwd=ROOT, env=full_env, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def wait_ready(self, timeout: float = 120) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; log: {self.log_path}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"not ready after {timeout}s; log: {self.log_path}")

    def stop(self) -> None:
        # BentoML starts workers in sessions of their own: collect the whole tree first, then stop every process.
        try:
            import psutil

            tree = psutil.Process(self.proc.pid).children(recursive=True)
        except Exception:  # noqa: BLE001 - already gone
            tree = []
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        for child in tree:
            try:
                child.kill()
            except Exception:  # noqa: BLE001 - exited with its parent
                pass
        if self._log is not subprocess.DEVNULL:
            self._log.close()
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture(scope="session")
def server(tiny_registry, tmp_path_factory):
    srv = Server(tiny_registry.root, log_path=tmp_path_factory.mktemp("logs") / "serve.log")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()
