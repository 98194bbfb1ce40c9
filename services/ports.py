"""A server's ports are its own: a port another process listens on is a start-up error that names it, never a port
silently shared (the gRPC listener, services/protocols/grpc_server.py) or a bare EADDRINUSE traceback (BentoML's
HTTP socket). `triserve serve` checks both ports before BentoML starts (which would first wipe the metrics files of
a server sharing its BENTOML_HOME); the arbiter checks the gRPC port again however the server is started.

`ensure_free` probes the way the servers bind: SO_REUSEADDR (circus and gRPC set it), no SO_REUSEPORT. Linux then
refuses the probe while any socket listens on the address, SO_REUSEPORT or not, and allows it for a port in TIME_WAIT
or held by a harness (scripts/drills/ports.py: bound with SO_REUSEADDR, never listening). It is a check, not a hold:
the listener's own bind stays the authority (a start racing ours fails there).
"""
from __future__ import annotations

import errno
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from triserve.configs.settings import GrpcSettings

# how to choose another gRPC port, said with a taken one
GRPC_HINT = "give this server another one: grpc.port (TRISERVE_GRPC__PORT, triserve serve --grpc-port)"


class PortInUse(OSError):
    """Something already listens on a port this server must listen on; the message names the listener and port."""


def ensure_free(host: str, port: int, listener: str, hint: str = "") -> None:
    """Raise PortInUse when a process listens on host:port (any address `host` resolves to); `hint`: how to pick
    another port, appended to the message. Other bind failures (an address not on this host, ::1 without IPv6) are
    the server's to report, or not: its own bind may still succeed on the other addresses."""
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                              flags=socket.AI_PASSIVE):
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise PortInUse(f"{listener} port {port} on {host} is already in use (another triserve, or "
                                    f"another server){'; ' + hint if hint else ''}") from None


def ensure_grpc_free(cfg: GrpcSettings) -> None:
    """The gRPC port, when gRPC is on: checked by `triserve serve`, and however the server is started by its arbiter
    before any worker starts (services/gateway.py)."""
    if cfg.enabled:
        ensure_free(cfg.host, cfg.port, "gRPC", GRPC_HINT)
