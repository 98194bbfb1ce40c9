"""What task routers need from the gateway without importing it (avoids a cycle)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import bentoml
from fastapi import Depends, Request

from services.common.access import Client
from services.common.deadlines import HEADER, Deadline
from services.common.errors import ApiError
from services.common.metrics import observe_timings


def current_gateway():
    """FastAPI dependency: the running Gateway service instance; 503 until its models are loaded."""
    gateway = bentoml.get_current_service()
    if gateway is None or not gateway.loaded:
        reason = getattr(gateway, "load_error", None) or "models are loading"
        raise ApiError(503, "not_ready", "service is not ready", {"reason": reason}, headers={"Retry-After": "2"})
    return gateway


async def loaded_gateway():
    """current_gateway as a FastAPI dependency. Async on purpose: FastAPI runs a plain `def` dependency in its
    threadpool, a thread round trip on every request (3-4% of the API worker's CPU at c=32)."""
    return current_gateway()


@dataclass
class CallContext:
    """Who is calling, by when they need the answer, and how to find the request in logs."""

    request_id: str
    deadline: Deadline
    client: Client
    state: Any = None  # the request's state: the outcome for the request log goes here
    route_key: str = ""  # keeps a user on one side of a canary split

    @property
    def arrived(self):
        """Called when this request reaches its slot's batcher (services/common/batcher.Approaching); None when the
        request did not come through RequestContextMiddleware."""
        return getattr(self.state, "batch_arrival", None)


def inference_guard(task: str):
    """Dependency for inference routes: authenticate (if configured), rate-limit, fix the deadline."""

    async def guard(request: Request, gateway=Depends(loaded_gateway)) -> CallContext:
        prot = gateway.protection
        client = prot.access.identify(request)
        prot.access.limit(client, task)
        deadline = Deadline.from_header(request.headers.get(HEADER), gateway.settings.deadlines,
                                        getattr(request.state, "arrived", None))
        key = request.headers.get(gateway.settings.rollout.canary_header) or client.id
        return CallContext(request.state.request_id, deadline, client, request.state, key)

    return guard


async def admin_guard(request: Request, gateway=Depends(loaded_gateway)) -> Client:
    return gateway.protection.access.identify(request, admin=True)


def finish(task: str, response, call: CallContext, batch: int):
    """Record per-stage latency of a successful response, leave its outcome for the request log, return it."""
    observe_timings(task, response.timings)
    if call.state is not None:
        call.state.outcome = {"model": response.model.name, "version": response.model.version, "batch": batch,
                              "degraded": response.degraded, "degraded_reason": response.degraded_reason,
                              "timings": response.timings.model_dump()}
    return response
