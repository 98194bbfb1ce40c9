"""What the REST routes need from the gateway without importing it (avoids a cycle): the serving context and the
access guards of inference and admin routes (the guard builds the kernel's CallContext)."""
from __future__ import annotations

from typing import Any

import bentoml
from fastapi import Depends, Request

from triserve.kernel.call import CallContext
from triserve.kernel.context import ServingContext
from triserve.kernel.errors import ApiError
from triserve.kernel.protection.access import AccessControl, Client
from triserve.kernel.protection.deadlines import HEADER, Deadline
from triserve.services.http_edge import ADMITTED


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


def worker_access() -> AccessControl | None:
    """This API worker's access control for the HTTP edge (services/http_edge.py), None until its serving context is
    loaded (the route then answers 503 not_ready, as before)."""
    gateway = bentoml.get_current_service()
    ctx = getattr(gateway, "ctx", None) if getattr(gateway, "loaded", False) else None
    return ctx.protection.access if ctx is not None else None


def inference_guard(family: str):
    """Dependency for inference routes: authenticate (if configured), rate-limit, fix the deadline. The families'
    REST routes were admitted at the HTTP edge before their body was read (its Client is in the request state): that
    decision is used, not taken again (a second token); OIP REST, which the edge does not know, is admitted here."""

    async def guard(request: Request, ctx: ServingContext = Depends(loaded_context)) -> CallContext:
        client = request.scope.get("state", {}).get(ADMITTED) or ctx.protection.access.admit(request, family)
        deadline = Deadline.from_header(request.headers.get(HEADER), ctx.settings.deadlines,
                                        getattr(request.state, "arrived", None))
        # the canary's route key: X-Canary-Key, else the API key or forwarded address, else a per-request draw
        key = request.headers.get(ctx.settings.rollout.canary_header) or client.canary_key
        return CallContext(request.state.request_id, deadline, client, request.state, key)

    guard.access = "inference"  # type: ignore[attr-defined]  # services/openapi.py: the key when it is required
    return guard


async def admin_guard(request: Request, ctx: ServingContext = Depends(loaded_context)) -> Client:
    return ctx.protection.access.identify(request, admin=True)


admin_guard.access = "admin"  # type: ignore[attr-defined]  # services/openapi.py: the admin key, always
