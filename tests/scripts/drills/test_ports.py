"""Ports held for a server until it stops (scripts/drills/ports.py): nobody else's bind(0) is handed them, the server
they are for binds and serves them, and they are free again once released."""
from __future__ import annotations

import errno
import socket
import subprocess
import sys
import time

import httpx
import pytest

from scripts.drills.ports import BIND_RETRY_MARK, PortPool, ReservedPort, address_in_use, bind_retries_in, held_port


def _server_socket(port: int, reuseport: bool = False) -> socket.socket:
    """What circus, haproxy and gRPC do: SO_REUSEADDR (gRPC also SO_REUSEPORT), bind, listen."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def test_a_held_port_is_never_handed_to_another_bind_zero():
    with ReservedPort() as held:
        seen = set()
        for _ in range(3000):  # BentoML's reserve_free_port and our old free_port: bind(0), read, close
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                seen.add(s.getsockname()[1])
        assert held.number not in seen and len(seen) > 100


def test_a_plain_bind_is_refused_while_held_and_allowed_after_release():
    port = ReservedPort()
    with socket.socket() as s, pytest.raises(OSError) as exc:
        s.bind(("127.0.0.1", port.number))
    assert exc.value.errno == errno.EADDRINUSE
    port.release()
    port.release()  # idempotent
    assert not port.held
    with socket.socket() as s:
        s.bind(("127.0.0.1", port.number))


@pytest.mark.parametrize("reuseport", [False, True], ids=["reuseaddr", "reuseaddr+reuseport"])
def test_the_server_it_is_for_binds_and_serves_it_while_held_and_again_after_a_restart(reuseport):
    with ReservedPort() as held:
        for _ in range(2):  # a restarted server gets its port back: it stayed ours in between
            server = _server_socket(held.number, reuseport)
            with socket.create_connection(("127.0.0.1", held.number), timeout=5) as client:
                conn, _ = server.accept()
                conn.sendall(b"ok")
                assert client.recv(2) == b"ok"
                conn.close()
            server.close()


def test_a_pool_hands_out_distinct_ports_and_releases_them_together():
    pool = PortPool()
    ports = [pool.take() for _ in range(5)]
    assert len(set(ports)) == 5 and pool.ports == ports
    pool.release()
    assert pool.ports == []
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_held_for_the_process_stays_held(tmp_path):
    port = held_port()
    with socket.socket() as s, pytest.raises(OSError):
        s.bind(("127.0.0.1", port))
    assert held_port() != port


APP = "async def app(scope, receive, send):\n" \
      "    if scope['type'] != 'http':\n        return\n" \
      "    await send({'type': 'http.response.start', 'status': 200, 'headers': []})\n" \
      "    await send({'type': 'http.response.body', 'body': b'ok'})\n"


@pytest.mark.parametrize("server", ["http.server", "uvicorn"])
def test_the_servers_the_harnesses_start_bind_a_held_port(server, tmp_path):
    """`python -m http.server` (scripts/bench/cold_start.py) and uvicorn (the naive, KServe and MLServer peers of
    scripts/bench/harness.py) set SO_REUSEADDR: each binds and serves its port while we hold it."""
    (tmp_path / "asgi_app.py").write_text(APP)
    with ReservedPort() as held:
        cmd = {"http.server": [sys.executable, "-m", "http.server", str(held.number), "--bind", "127.0.0.1",
                               "--directory", str(tmp_path)],
               "uvicorn": [sys.executable, "-m", "uvicorn", "asgi_app:app", "--app-dir", str(tmp_path), "--host",
                           "127.0.0.1", "--port", str(held.number), "--log-level", "warning"]}[server]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 20
            while True:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                try:
                    assert httpx.get(f"http://127.0.0.1:{held.number}/", timeout=2).status_code == 200
                    break
                except httpx.HTTPError:
                    assert time.monotonic() < deadline, f"{server} never answered on the held port"
                    time.sleep(0.1)
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_bind_retries_in_counts_the_marks_of_a_log(tmp_path):
    log = tmp_path / "a.log"
    assert bind_retries_in(log) == 0  # no log yet
    log.write_text(f"start\nOSError: [Errno 98] Address already in use\n{BIND_RETRY_MARK} again\nx {BIND_RETRY_MARK}\n")
    assert bind_retries_in(log) == 1 and address_in_use(log)  # only marks at the start of a line count
