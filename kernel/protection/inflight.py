"""Inference requests in flight per family, one count per API worker shared by every transport.

Why: admission.max_inflight_requests is the cheapest refusal under overload (a 503 before any work). REST's request
middleware (kernel/request_context.py) counts its family routes before their body is read; OIP REST and both gRPC
services count here too, so a request over one transport holds a place that a request over another cannot take.
"""
from __future__ import annotations

from triserve.kernel.errors import ApiError
from triserve.observability.metrics import INFLIGHT, REJECTED, REQUESTS, labelled

COUNTS: dict[str, int] = {}  # family -> requests in flight in this API worker (one event loop: no lock needed)


def full(family: str, limit: int | None) -> bool:
    return limit is not None and COUNTS.get(family, 0) >= limit


def refusal(family: str, limit: int | None) -> ApiError:
    return ApiError(503, "overloaded", f"{family} is at its limit of {limit} requests in flight", {"limit": limit},
                    headers={"Retry-After": "1"})


def enter(family: str) -> None:
    labelled(INFLIGHT, family).inc()
    COUNTS[family] = COUNTS.get(family, 0) + 1


def leave(family: str) -> None:
    labelled(INFLIGHT, family).dec()
    COUNTS[family] = max(COUNTS.get(family, 0) - 1, 0)


def admit(family: str, limit: int | None) -> None:
    """enter(family), or the 503 when `limit` requests of the family are in flight already (counted as refused)."""
    if full(family, limit):
        REJECTED.labels(family, "", "overloaded").inc()
        REQUESTS.labels(family, "", "503").inc()
        raise refusal(family, limit)
    enter(family)
