"""Drill helpers that read the server's log."""
from __future__ import annotations

import json

from scripts.drills.common import access_log


def test_access_log_reads_the_gateway_request_lines_only(tmp_path):
    log = tmp_path / "serve.log"
    lines = [json.dumps({"ts": 1700000000.5, "request_id": "a", "task": "text", "method": "POST",
                         "path": "/v1/classify", "status": 200, "duration_ms": 12.5}),
             '2026-12-02T18:00:00+0000 [INFO] [entry_service:triserve:1] 127.0.0.1 (scheme=http,method=POST) 1ms',
             json.dumps({"ts": 1700000001.0, "event": "batch", "slot": "text", "size": 3}),  # a runner batch line
             '{"ts": broken',
             json.dumps({"ts": 1700000002.0, "request_id": "b", "path": "/v1/classify", "status": 429,
                         "duration_ms": 0.4})]
    log.write_text("\n".join(lines) + "\n")
    assert access_log(log) == [(1700000000.5, "/v1/classify", 200, 12.5), (1700000002.0, "/v1/classify", 429, 0.4)]
    assert access_log(tmp_path / "missing.log") == []
