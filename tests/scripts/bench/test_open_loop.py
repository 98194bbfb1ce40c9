"""The harness's open-loop cell (compare.py --open-loop-rate, knee.py) without Grafana's k6: scripts/drills/loadgen.py
at a constant arrival rate, reported with k6's numbers (requests, dropped arrivals, failed share, latency percentiles)
against a loopback server."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scripts.bench import harness


class _Echo(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # http.server's method naming
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        status = 200 if json.loads(body).get("ok", True) else 503
        out = json.dumps({"timings": {"total_ms": 0.1}}).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture()
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_without_k6_the_cell_runs_on_loadgen(server, tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "k6_binary", lambda: None)
    requests = [(f"{server}/v1/classify", json.dumps({"texts": ["hi"], "ok": i != 3}).encode()) for i in range(4)]
    cell = harness.open_loop("naive", requests, rate=40, duration_s=1.0, tmp=tmp_path, cpu=0)
    assert cell["load_generator"].startswith("scripts/drills/loadgen.py")
    assert cell["rate"] == 40 and cell["seconds"] == 1.0
    assert 35 <= cell["requests"] <= 40 and cell["dropped_iterations"] == 0
    assert cell["failed_share"] == pytest.approx(0.25, abs=0.05)  # one request in four answers 503
    assert set(cell["latency_ms"]) == {"p50", "p90", "p99", "max"}
    assert 0 < cell["latency_ms"]["p50"] <= cell["latency_ms"]["p99"] <= cell["latency_ms"]["max"]
