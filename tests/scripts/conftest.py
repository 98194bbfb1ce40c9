"""Fixtures of the scripts' tests: a loopback JSON server the load generators can be pointed at."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

# (path, request body) -> (status, answer, seconds to wait before answering)
Answer = Callable[[str, dict], tuple[int, dict, float]]


@pytest.fixture()
def json_server():
    """json_server(answer) -> the base URL of a keep-alive HTTP server on 127.0.0.1 answering every POST with
    answer(path, body); stopped after the test."""
    servers: list[ThreadingHTTPServer] = []

    def start(answer: Answer) -> str:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the load generators expect

            def do_POST(self) -> None:  # http.server's method naming
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                status, out, delay = answer(self.path, json.loads(raw or b"{}"))
                time.sleep(delay)
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()
