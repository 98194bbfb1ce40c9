"""The harness's open-loop cell (compare.py --open-loop-rate, knee.py) without Grafana's k6: scripts/drills/loadgen.py
at a constant arrival rate, reported with k6's numbers (requests, dropped arrivals, failed share, latency percentiles)
against a loopback server."""
from __future__ import annotations

import json

import pytest

from scripts.bench import harness


@pytest.fixture()
def server(json_server):
    return json_server(lambda path, body: (200 if body.get("ok", True) else 503, {"timings": {"total_ms": 0.1}}, 0.0))


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
