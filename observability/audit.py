"""The audit trail of admin actions: one JSON line per call on the 'triserve.audit' logger (stdout, written off the
event loop) and a counter per action and outcome. Who is the key's name (or the caller's address), never the key."""
from __future__ import annotations

import json
import time
from typing import Any

from prometheus_client import Counter

from triserve.observability.request_log import stdout_json_logger

ADMIN_ACTIONS = Counter("triserve_admin_actions_total", "Admin calls by action (method and route template) and "
                        "outcome (ok, refused: a 4xx, error: a 5xx).", ["action", "outcome"])


def outcome_of(status: int) -> str:
    return "ok" if status < 400 else "refused" if status < 500 else "error"


def record(action: str, who: str, status: int, target: dict[str, Any], before: Any, after: Any,
           request_id: str, error: str | None = None) -> dict[str, Any]:
    """Write one audit line and count it; returns the line (tests read it back)."""
    line = {"ts": round(time.time(), 3), "audit": action, "who": who, "status": status,
            "outcome": outcome_of(status), "target": target, "before": before, "after": after,
            "request_id": request_id, "error": error}
    ADMIN_ACTIONS.labels(action, line["outcome"]).inc()
    stdout_json_logger("triserve.audit").info(json.dumps(line, default=str, sort_keys=True))
    return line
