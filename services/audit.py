"""Every admin call audited (observability/audit.py): who (the key's name, or the address of a caller without a
valid admin key), what (the method and route template, the slot or deployment it names), the routing of that target
before and after, and the result (status and error code). A router-level dependency of the admin routers, entered
before their access check, so refused attempts are audited too; read-only calls (GET) are not."""
from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request

from triserve.kernel.context import ServingContext
from triserve.kernel.errors import ApiError
from triserve.observability.audit import record
from triserve.services.gateway_deps import current_context


def _state(ctx: ServingContext | None, target: dict[str, str]) -> Any:
    """The routing of the slot a call names (active, canary, shadow versions), or whether a deployment exists."""
    if ctx is None:
        return None
    if "slot" in target:
        entry = ctx.routing.table.get(target["slot"]) or {}
        return {k: entry.get(k) for k in ("active", "canary", "shadow")}
    if "name" in target:
        dep = ctx.repository.find(target["name"])
        return None if dep is None else {"deployment": dep.name, "model": dep.model.name, "ref": dep.model.ref}
    return None


def _who(ctx: ServingContext | None, request: Request) -> str:
    """The caller as the access layer names it ('key:<name>' or 'addr:<ip>'); never the key itself."""
    if ctx is None:
        return "unknown"
    try:
        return ctx.protection.access.identify(request, admin=True).id
    except ApiError:
        return f"addr:{ctx.protection.access.address(request).host}"


async def audit(request: Request) -> AsyncIterator[None]:
    if request.method in ("GET", "HEAD", "OPTIONS"):
        yield
        return
    try:
        ctx: ServingContext | None = current_context()
    except ApiError:  # not ready: the call is refused with 503, and audited without a routing state
        ctx = None
    route = request.scope.get("route")
    action = f"{request.method} {getattr(route, 'path', 'unmatched')}"
    target = {k: str(v) for k, v in request.path_params.items()}
    before = _state(ctx, target)
    status, error = 200, None
    try:
        yield
    except ApiError as exc:
        status, error = exc.status, exc.code
        raise
    except Exception as exc:
        status, error = getattr(exc, "status_code", 500), type(exc).__name__
        raise
    finally:
        record(action, _who(ctx, request), status, target, before, _state(ctx, target),
               request.scope.get("state", {}).get("request_id", ""), error)
