"""scripts/bench/wrk.py: the closed loop replays the mix through a real wrk, counts failures, respects its bounds."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scripts.bench import wrk


class _Echo(ThreadingHTTPServer):
    """POST /ok answers 200, anything else 503; remembers the bodies it got."""

    def __init__(self):
        self.bodies: list[bytes] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as wrk expects

            def do_POST(self):  # http.server's naming
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                server.bodies.append(body)
                code = 200 if self.path == "/ok" else 503
                self.send_response(code)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture()
def echo():
    srv = _Echo()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()


needs_wrk = pytest.mark.skipif(not wrk.available(), reason="wrk not installed (apt-get install -y wrk)")


@needs_wrk
def test_replays_the_mix_and_counts_failed_statuses(echo):
    base = f"http://127.0.0.1:{echo.server_port}"
    mix = [(f"{base}/ok", json.dumps({"texts": ["a"]}).encode()),
           (f"{base}/bad", json.dumps({"texts": ["b"]}).encode())]
    cell = wrk.closed_loop(mix, concurrency=1, warmup_s=0, duration_s=1, max_requests=40)
    assert cell["generator"] == "wrk"
    assert cell["sent_total"] >= 10
    assert cell["status"][">=400"] >= 5 and cell["ok"] >= 5  # both halves of the mix, alternating
    assert abs(cell["status"][">=400"] - cell["ok"]) <= 1
    assert cell["non_200"] == cell["status"][">=400"]
    assert 0 < cell["latency_ms"]["p50"] <= cell["latency_ms"]["p99"] <= cell["latency_ms"]["p99.9"]
    assert {json.loads(b)["texts"][0] for b in echo.bodies} == {"a", "b"}  # bodies arrive intact


@needs_wrk
def test_stops_sending_at_the_request_cap(echo):
    base = f"http://127.0.0.1:{echo.server_port}"
    cell = wrk.closed_loop([(f"{base}/ok", b"{}")], concurrency=2, warmup_s=0, duration_s=2, max_requests=25)
    assert cell["capped"]
    assert 25 <= len(echo.bodies) <= 25 + 2  # what was in flight when the cap hit


def test_refuses_remote_targets_and_mixed_servers(tmp_path):
    with pytest.raises(SystemExit, match="non-loopback"):
        wrk._requests_file([("http://10.0.0.1:80/x", b"{}")], tmp_path / "r.txt")
    with pytest.raises(ValueError, match="one server"):
        wrk._requests_file([("http://127.0.0.1:1/x", b"{}"), ("http://127.0.0.1:2/x", b"{}")], tmp_path / "r.txt")
    with pytest.raises(ValueError, match="single-line"):
        wrk._requests_file([("http://127.0.0.1:1/x", b'{\n"a": 1}')], tmp_path / "r.txt")


def test_requests_file_keeps_path_query_and_body(tmp_path):
    path = tmp_path / "r.txt"
    base = wrk._requests_file([("http://127.0.0.1:9/v1/classify?x=1", b'{"texts": ["hi"]}')], path)
    assert base == "http://127.0.0.1:9"
    assert path.read_bytes() == b'/v1/classify?x=1\t{"texts": ["hi"]}\n'
