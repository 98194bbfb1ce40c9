"""Loopback ports held for a child process until it is done with them (no pick-then-release race).

`free_port()` binds port 0, reads the number and closes the socket: until the child binds it, any other bind(0) on
the host (BentoML picks its circus control and pub/sub endpoints that way, as do other servers started beside ours)
may be handed the same number, and one of the two fails with EADDRINUSE. A `ReservedPort` keeps a socket bound to the
port, with SO_REUSEADDR and never listening, for as long as the port is ours, restarts of its server included:

* Linux refuses the port to every bind without SO_REUSEADDR, bind(0) included (a conflict with the held socket), and
  connect() skips it when it picks an ephemeral port (the port has a bind bucket of its own);
* a server that binds with SO_REUSEADDR and listens on it succeeds (both sockets reuse, the held one does not listen):
  circus' sockets (BentoML's HTTP port), haproxy, gRPC and Python's socketserver all set it.

Servers we start that set SO_REUSEADDR and so bind a held port: BentoML (circus), haproxy, gRPC, uvicorn (asyncio's
create_server; the naive, KServe and MLServer peers), Triton (libevhtp; the PyTriton peer), Python's socketserver
(http.server, werkzeug/moto), Go's net.Listen (prometheus, docker-registry), redis-server. A server that does not
would fail at once with EADDRINUSE: release the port right before starting it instead.

Why not a library: `portpicker` binds and releases (the same race, unless its port server runs), and
`ephemeral-port-reserve` leaves the port in TIME_WAIT, which protects it for 60 s only (a runner replica restarted
minutes later by a drill would be exposed again).
"""
from __future__ import annotations

import socket
from pathlib import Path

# what a harness writes into a server's log before it starts the server again after a lost bind (Server,
# scripts/tiers.ServiceProcess.launch): scripts/drills/starts.py counts bind retries from the logs by it
BIND_RETRY_MARK = "=== bind retry:"


class ReservedPort:
    """`with ReservedPort() as port: start a server on port.number ...` or keep it and call `release()` at the end."""

    def __init__(self, host: str = "127.0.0.1"):
        self.host = host
        self._sock: socket.socket | None = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self.number: int = self._sock.getsockname()[1]

    @property
    def held(self) -> bool:
        return self._sock is not None

    def release(self) -> None:
        """Let the port go (idempotent): call after the server using it has stopped for good."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __int__(self) -> int:
        return self.number

    def __enter__(self) -> ReservedPort:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class PortPool:
    """Every port one harness hands to its processes, released together when the harness stops."""

    def __init__(self, host: str = "127.0.0.1"):
        self.host = host
        self._held: list[ReservedPort] = []

    def take(self) -> int:
        port = ReservedPort(self.host)
        self._held.append(port)
        return port.number

    @property
    def ports(self) -> list[int]:
        return [p.number for p in self._held if p.held]

    def release(self) -> None:
        for p in self._held:
            p.release()
        self._held.clear()


_PROCESS_PORTS = PortPool()


def held_port() -> int:
    """A port held until this process exits: for a server started once per run by a harness that does not track when
    it stops (the bench peers, a container); a few sockets per run, closed by the kernel at exit."""
    return _PROCESS_PORTS.take()


def address_in_use(log_path: Path, offset: int = 0) -> bool:
    """Whether the log, from `offset` on, reports a bind that failed with EADDRINUSE (zmq's or the socket's)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return False
    return "Address already in use" in text or "EADDRINUSE" in text


def bind_retries_in(log_path: Path) -> int:
    """How many times a harness started a server again after a lost bind, by the marks it wrote into the log."""
    try:
        with open(log_path, "rb") as f:
            return sum(1 for line in f if line.startswith(BIND_RETRY_MARK.encode()))
    except FileNotFoundError:
        return 0
