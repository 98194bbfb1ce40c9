"""What family routers need from the gateway without importing it (avoids a cycle): the serving context, the access
guard of inference routes, and the bookkeeping of a finished response."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import bentoml
from fastapi import Depends, Request

from kernel.context import ServingContext
from kernel.errors import ApiError
from kernel.protection.access import Client
from kernel.protection.deadlines import HEADER, Deadline
from observability.metrics import observe_timings


def ready_context(gateway: Any) -> ServingContext:
    """The gateway's serving context, or 503 while its model metadata is not loaded."""
    if gateway is None or not getattr(gateway, "loaded", False):
        reason = getattr(gateway, "load_error", None) or "models are loading"
        raise ApiError(503, "not_ready", "service is not ready", {"reason": reason}, headers={"Retry-After": "2"})
    return gateway.ctx


def current_context() -> ServingContext:
    """The running Gateway's serving context; 503 until its models are loaded."""
    return ready_context(bentoml.get_current_service())


async def loaded_context() -> ServingContext:
    """current_context as a FastAPI dependency. Async on purpose: FastAPI runs a plain `def` dependency in its
    threadpool, a thread round trip on every request (3-4% of the API worker's CPU at c=32)."""
    return current_context()


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
        """Called when this request reaches its slot's batcher (kernel/runner_call/batcher.Approaching); None when the
        request did not come through RequestContextMiddleware."""
        return getattr(self.state, "batch_arrival", None)


def inference_guard(family: str):
    """Dependency for inference routes: authenticate (if configured), rate-limit, fix the deadline."""

    async def guard(request: Request, ctx: ServingContext = Depends(loaded_context)) -> CallContext:
        prot = ctx.protection
        client = prot.access.identify(request)
        prot.access.limit(client, family)
        deadline = Deadline.from_header(request.headers.get(HEADER), ctx.settings.deadlines,
                                        getattr(request.state, "arrived", None))
        key = request.headers.get(ctx.settings.rollout.canary_header) or client.id
        return CallContext(request.state.request_id, deadline, client, request.state, key)

    return guard


async def admin_guard(request: Request, ctx: ServingContext = Depends(loaded_context)) -> Client:
    return ctx.protection.access.identify(request, admin=True)


def bind(call: CallContext, deployment: str) -> None:
    """Name the request's deployment for the request metrics and log (RequestContextMiddleware reads it)."""
    if call.state is not None:
        try:
            call.state.deployment = deployment
        except AttributeError:  # a plain dict state (transports without starlette's State)
            pass


def finish(deployment: str, response, call: CallContext, batch: int):
    """Record per-stage latency of a successful response, leave its outcome for the request log, return it."""
    observe_timings(deployment, response.timings)
    if call.state is not None:
        call.state.outcome = {"deployment": deployment, "model": response.model.name,
                              "version": response.model.version, "batch": batch, "degraded": response.degraded,
                              "degraded_reason": response.degraded_reason, "timings": response.timings.model_dump()}
    return response
