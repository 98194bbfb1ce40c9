"""The soak drill's fault fixtures (scripts/drills/soak.py): a redis-server of its own for the shared rate limits
(access.limits_scope=cluster), and the registry served over HTTP by a small server the drill makes slow or
unreachable on command.

Both on 127.0.0.1, on ports held for the whole run (scripts/drills/ports.py: redis-server and Python's socketserver
set SO_REUSEADDR, so each binds its held port again after a stop), and both stopped at the end, on failure too.

Why a static HTTP server of our own and not a forwarding proxy in front of one: the server reads an http(s)://
registry as a static tree with the local registry's layout (models/stores/static_http.py), so serving the drill's
registry copy directly, with a delay before each response ("slow") or its listener closed (connection refused,
"down"), is the whole fault with one moving part less.
"""
from __future__ import annotations

import functools
import http.server
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from scripts.drills.ports import ReservedPort

REDIS_SERVER = Path("/usr/bin/redis-server")  # the system's (Debian's redis-server package), never one on PATH
SLOW_S = 3.0  # added before every registry response while the registry is slow
HOLD_LIMIT_S = 300.0  # a held request is answered after this at the latest (a forgotten release ends no test run)
Mode = Literal["ok", "slow", "down", "held"]


class RedisServer:
    """`with RedisServer(workdir) as redis: redis.url ...`; kill() is the fault (SIGKILL), start() the recovery on
    the same port. No persistence: a restarted Redis is empty, as after a real crash without a disk."""

    def __init__(self, workdir: Path, binary: Path = REDIS_SERVER):
        if not binary.is_file():
            raise FileNotFoundError(f"{binary} not found: install it with `apt-get install redis-server`")
        self.binary, self.dir = binary, workdir / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.held = ReservedPort()
        self.port = self.held.number
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1)

    def start(self, timeout: float = 20) -> int:
        """Start it and wait until it answers PING; its PID."""
        self.proc = subprocess.Popen([str(self.binary), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(self.dir), "--daemonize", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        with self.client() as c:
            while True:
                try:
                    c.ping()
                    return self.proc.pid
                except Exception:  # noqa: BLE001  # redis.ConnectionError until it listens
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server on port {self.port} did not answer within {timeout} s "
                                           f"(exit code {self.proc.poll()})") from None
                    time.sleep(0.05)

    def kill(self) -> int:
        """SIGKILL, by PID; the PID killed."""
        assert self.proc is not None
        pid = self.proc.pid
        self.proc.kill()
        self.proc.wait(timeout=10)
        return pid

    def bucket_calls(self) -> int | None:
        """Bucket checks Redis has run since it started (EVALSHA and EVAL calls: kernel/protection/redis_buckets.py
        runs one script per check); None when it does not answer."""
        try:
            with self.client() as c:
                stats = c.info("commandstats")
        except Exception:  # noqa: BLE001  # down: no count
            return None
        return sum(int(stats.get(f"cmdstat_{cmd}", {}).get("calls", 0)) for cmd in ("evalsha", "eval"))

    def wait_for_calls(self, timeout: float = 30) -> float | None:
        """Seconds until Redis counts a bucket check again (the API workers back on the shared buckets after their
        fallback's retry), or None within `timeout`."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if (self.bucket_calls() or 0) > 0:
                return round(time.monotonic() - started, 2)
            time.sleep(0.1)
        return None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.held.release()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(http.server.SimpleHTTPRequestHandler):
    registry: RegistryHttp  # set per server (functools.partial cannot: the attribute is read on the class)

    def log_message(self, *args: object) -> None:
        pass

    def _delay(self) -> None:
        mode = self.registry.mode
        self.registry.served[mode] += 1
        self.registry.requests.append((mode, self.command, self.path))
        if mode == "slow":
            time.sleep(self.registry.slow_s)
        elif mode == "held":
            self.registry.holding.set()
            self.registry._released.wait(HOLD_LIMIT_S)

    def do_GET(self) -> None:
        self._delay()
        super().do_GET()
        self.registry._answered(self.path)

    def do_HEAD(self) -> None:
        self._delay()
        super().do_HEAD()


class RegistryHttp:
    """A registry directory served read-only over HTTP on 127.0.0.1 (registry_uri=self.url); set("slow") delays
    every response by `slow_s`, set("held") holds every request until the mode changes (tests wait on `holding`, set
    once a request is held, instead of on a clock), set("down") closes the listener (connections refused), set("ok")
    restores it. hold_after(suffix): answer until a GET of a path ending with `suffix` has been answered (a pull's last
    file), then hold."""

    def __init__(self, root: Path, slow_s: float = SLOW_S):
        self.root, self.slow_s = root, slow_s
        self.held = ReservedPort()
        self.port = self.held.number
        self.url = f"http://127.0.0.1:{self.port}/"
        self.mode: Mode = "ok"
        self.served: Counter[str] = Counter()  # requests answered per mode
        self.requests: list[tuple[str, str, str]] = []  # (mode, method, path) of every request, in arrival order
        self.holding = threading.Event()
        self._released = threading.Event()
        self._released.set()
        self._hold_after: str | None = None
        self._server: http.server.ThreadingHTTPServer | None = None

    def _listen(self) -> None:
        handler = type("RegistryHandler", (_Handler,), {"registry": self})
        self._server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", self.port), functools.partial(handler, directory=str(self.root)))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="soak-registry", daemon=True).start()

    def _close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def set(self, mode: Mode) -> None:
        self._hold_after = None
        if mode == "held":
            self.holding.clear()
            self._released.clear()
        else:
            self._released.set()
        if mode == "down":
            self._close()
        elif self._server is None:
            self._listen()
        self.mode = mode

    def hold_after(self, suffix: str) -> None:
        self.set("ok")
        self._hold_after = suffix

    def _answered(self, path: str) -> None:
        suffix = self._hold_after
        if suffix is not None and path.split("?")[0].endswith(suffix):
            self.set("held")

    def stop(self) -> None:
        self._released.set()
        self._close()
        self.held.release()

    def __enter__(self) -> RegistryHttp:
        self._listen()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
