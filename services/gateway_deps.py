"""What task routers need from the gateway without importing it (avoids a cycle)."""
from __future__ import annotations

import bentoml

from services.common.errors import ApiError
from services.common.metrics import observe_timings


def current_gateway():
    """FastAPI dependency: the running Gateway service instance; 503 until its models are loaded."""
    gateway = bentoml.get_current_service()
    if gateway is None or not gateway.loaded:
        reason = getattr(gateway, "load_error", None) or "models are loading"
        raise ApiError(503, "not_ready", "service is not ready", {"reason": reason}, headers={"Retry-After": "2"})
    return gateway


def finish(task: str, response):
    """Record per-stage latency of a successful response and return it."""
    observe_timings(task, response.timings)
    return response
