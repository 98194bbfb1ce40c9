"""The repository page's live figures, read from the Prometheus metrics every process of the server writes (the same
samples /metrics exports, merged over all API workers and the runner: services/protocols/statistics.read_samples).

Per deployment the totals since the server started: requests by status class, degraded answers, the latency histogram
of successful requests (stage "total") with its p50/p99, and the items pending now; per slot the breaker state and
the runner calls per version and role (the canary split). The figures are cumulative on purpose: the page turns two
consecutive answers into a window (throughput, windowed p50/p99, degraded share), so every API worker can answer
any refresh without keeping state of its own.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from triserve.services.protocols.statistics import Sample

REQUESTS = "triserve_requests_total"
DEGRADED = "triserve_degraded_total"
LATENCY = "triserve_stage_seconds"
PENDING = "triserve_deployment_pending_items"
BREAKER = "triserve_breaker_state"
VERSION_REQUESTS = "triserve_version_requests_total"
NAMES = frozenset({REQUESTS, DEGRADED, f"{LATENCY}_bucket", f"{LATENCY}_count", f"{LATENCY}_sum", PENDING, BREAKER,
                   VERSION_REQUESTS})
BREAKER_STATES = {0: "closed", 1: "half-open", 2: "open"}


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile over cumulative (upper bound, count) buckets, +Inf last: linear within the
    bucket that holds the rank; the highest finite bound when the rank falls in +Inf. None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def summarize(samples: list[Sample], now: float) -> dict[str, Any]:
    """{time, deployments: {name: figures}, slots: {slot: {breaker, versions}}} from merged metric samples."""
    deps: dict[str, dict[str, Any]] = defaultdict(lambda: {
        "requests": 0.0, "ok": 0.0, "client_errors": 0.0, "server_errors": 0.0, "degraded": 0.0,
        "pending_items": 0.0, "latency": {"count": 0.0, "sum_s": 0.0, "buckets": {}}})
    slots: dict[str, dict[str, Any]] = defaultdict(lambda: {"breaker": "closed", "versions": {}})
    for name, labels, value in samples:
        dep = labels.get("deployment", "")
        if name == REQUESTS and dep:
            status = labels.get("status", "")
            kind = "ok" if status.startswith("2") else "client_errors" if status.startswith("4") else "server_errors"
            deps[dep]["requests"] += value
            deps[dep][kind] += value
        elif name == DEGRADED and dep:
            deps[dep]["degraded"] += value
        elif name == PENDING and dep:
            deps[dep]["pending_items"] += value
        elif name.startswith(LATENCY) and labels.get("stage") == "total" and dep:
            lat = deps[dep]["latency"]
            if name.endswith("_bucket"):
                bound = float(labels["le"])
                lat["buckets"][bound] = lat["buckets"].get(bound, 0.0) + value
            elif name.endswith("_count"):
                lat["count"] += value
            elif name.endswith("_sum"):
                lat["sum_s"] += value
        elif name == BREAKER and "slot" in labels:
            slots[labels["slot"]]["breaker"] = BREAKER_STATES.get(int(value), str(value))
        elif name == VERSION_REQUESTS and "slot" in labels:
            per = slots[labels["slot"]]["versions"].setdefault(labels.get("version", ""), {})
            role = labels.get("role", "stable")
            per[role] = per.get(role, 0.0) + value
    out = {}
    for dep, figures in deps.items():
        lat = figures["latency"]
        buckets = sorted(lat["buckets"].items())
        p50, p99 = quantile(0.5, buckets), quantile(0.99, buckets)
        lat["buckets"] = [["+Inf" if math.isinf(b) else b, c] for b, c in buckets]
        lat["p50_ms"] = None if p50 is None else round(p50 * 1000, 3)
        lat["p99_ms"] = None if p99 is None else round(p99 * 1000, 3)
        out[dep] = figures
    return {"time": now, "deployments": out, "slots": dict(slots)}
