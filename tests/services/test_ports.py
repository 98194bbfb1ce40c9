"""services/ports.py: a port something listens on is refused with its number; a port only held by the test harness
(bound, never listening: scripts/drills/ports.py) is not, or no test server could start on its held ports."""
from __future__ import annotations

import socket

import pytest

from scripts.drills.ports import ReservedPort
from triserve.services.ports import PortInUse, ensure_free


def listening(reuseport: bool = False) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


@pytest.mark.parametrize("reuseport", [False, True], ids=["plain", "so_reuseport"])
def test_a_port_in_use_is_refused_with_its_number(reuseport):
    with listening(reuseport) as other:
        port = other.getsockname()[1]
        with pytest.raises(PortInUse) as err:
            ensure_free("127.0.0.1", port, "HTTP", "give this server another one: --port")
        assert str(err.value) == (f"HTTP port {port} on 127.0.0.1 is already in use (another triserve, or another "
                                  f"server); give this server another one: --port")
        with pytest.raises(PortInUse):  # a wildcard bind needs the port on every address
            ensure_free("0.0.0.0", port, "gRPC")


def test_a_port_the_harness_holds_but_nobody_listens_on_is_free():
    with ReservedPort() as held:
        ensure_free("127.0.0.1", held.number, "gRPC")


def test_other_bind_failures_are_left_to_the_server():
    ensure_free("192.0.2.1", 3000, "HTTP")  # TEST-NET-1, not an address of this host: BentoML says so itself
