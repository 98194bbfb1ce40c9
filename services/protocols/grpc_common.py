"""What every gRPC handler shares: request id, deadline, access control and the error mapping.

Per call: the request id comes from the `x-request-id` metadata (or is generated) and is returned as trailing
metadata; an already expired gRPC deadline is answered DEADLINE_EXCEEDED before any work; otherwise the remaining
time becomes the request's Deadline (clamped to deadlines.max_ms, and never longer than an `x-request-timeout-ms`
metadata value), so the runner drops the item once it is too late, exactly as for REST. API keys (`x-api-key` or
`authorization: Bearer ...`) and rate limits are the REST ones (kernel/protection/access.py), and so is the cap on
inference requests in flight (admission.max_inflight_requests, one count with REST's: kernel/protection/inflight.py).

Errors keep the project's error model: the status message is "<code>: <message>", and trailing metadata carries
`triserve-error-code`, `triserve-http-status` (the REST status of the same error), `triserve-error-details` (JSON)
and `x-request-id`. Status codes: 400/415/422 -> INVALID_ARGUMENT, 401 -> UNAUTHENTICATED, 403 -> PERMISSION_DENIED,
404 -> NOT_FOUND, 413/429 -> RESOURCE_EXHAUSTED, 503 -> UNAVAILABLE, 504 -> DEADLINE_EXCEEDED, anything else
INTERNAL.
"""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import TypeVar

import grpc

from triserve.kernel.call import CallContext
from triserve.kernel.errors import ApiError
from triserve.kernel.protection import inflight
from triserve.kernel.protection.deadlines import HEADER as TIMEOUT_HEADER
from triserve.kernel.protection.deadlines import Deadline
from triserve.kernel.request_context import new_request_id
from triserve.services.gateway_deps import ready_context
from triserve.services.protocols.calls import ErrorInfo, describe_error

REQUEST_ID_KEY = "x-request-id"
ERROR_CODE_KEY = "triserve-error-code"
ERROR_DETAILS_KEY = "triserve-error-details"
HTTP_STATUS_KEY = "triserve-http-status"
MAX_DETAILS_CHARS = 4096

_STATUS_BY_HTTP = {
    400: grpc.StatusCode.INVALID_ARGUMENT, 401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED, 404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED, 415: grpc.StatusCode.INVALID_ARGUMENT,
    422: grpc.StatusCode.INVALID_ARGUMENT, 429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    501: grpc.StatusCode.UNIMPLEMENTED, 503: grpc.StatusCode.UNAVAILABLE, 504: grpc.StatusCode.DEADLINE_EXCEEDED,
}

T = TypeVar("T")


def grpc_status(http_status: int, code: str = "") -> grpc.StatusCode:
    if code == "deadline_unattainable":  # the client's own deadline cannot be met: that is its gRPC meaning
        return grpc.StatusCode.DEADLINE_EXCEEDED
    if http_status in _STATUS_BY_HTTP:
        return _STATUS_BY_HTTP[http_status]
    return grpc.StatusCode.INVALID_ARGUMENT if 400 <= http_status < 500 else grpc.StatusCode.INTERNAL


def error_metadata(info: ErrorInfo, request_id: str) -> tuple[tuple[str, str], ...]:
    md = [(REQUEST_ID_KEY, request_id), (ERROR_CODE_KEY, info.code), (HTTP_STATUS_KEY, str(info.status))]
    if info.details is not None:
        md.append((ERROR_DETAILS_KEY, json.dumps(info.details, default=str)[:MAX_DETAILS_CHARS]))
    retry_after = {k.lower(): v for k, v in info.headers.items()}.get("retry-after")
    if retry_after:
        md.append(("retry-after", str(retry_after)))
    return tuple(md)


def metadata_of(context) -> dict[str, str]:
    return {k.lower(): v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def _peer_host(peer: str | None) -> str:
    """'ipv4:127.0.0.1:5000' -> '127.0.0.1', 'ipv6:[::1]:5000' -> '::1'."""
    if not peer:
        return "unknown"
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1:].split("]", 1)[0]
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    return kind or "unknown"


class MetadataRequest:
    """The two things AccessControl.identify reads from an HTTP request, taken from gRPC metadata and the peer."""

    def __init__(self, metadata: dict[str, str], peer: str | None):
        self.headers = metadata
        self.client = SimpleNamespace(host=_peer_host(peer))


def deadline_of(context, metadata: dict[str, str], cfg) -> Deadline:
    remaining = context.time_remaining()
    if remaining is None:
        return Deadline.from_header(metadata.get(TIMEOUT_HEADER), cfg)
    if remaining <= 0:
        raise ApiError(504, "deadline_exceeded", "the gRPC deadline had passed before the request was processed",
                       {"stage": "arrival"})
    budget_ms = min(int(remaining * 1000), cfg.max_ms)
    if metadata.get(TIMEOUT_HEADER):
        budget_ms = min(budget_ms, Deadline.from_header(metadata[TIMEOUT_HEADER], cfg).budget_ms)
    return Deadline.from_budget(max(1, budget_ms))


class RpcScope:
    """Handed to each handler's work function: the ready serving context and a CallContext factory."""

    def __init__(self, gateway, context, metadata: dict[str, str], request_id: str):
        self._gateway, self.context, self.metadata, self.request_id = gateway, context, metadata, request_id
        self.holding: str | None = None  # the family whose in-flight place this call holds (released by handle)

    @property
    def ctx(self):
        return ready_context(self._gateway)

    def call(self, family: str) -> CallContext:
        """Deadline, then authentication and rate limit (labelled by `family`), as REST's inference_guard does."""
        gateway = self.ctx
        deadline = deadline_of(self.context, self.metadata, gateway.settings.deadlines)
        prot = gateway.protection
        client = prot.access.admit(MetadataRequest(self.metadata, self.context.peer()), family)
        if self.holding is None:  # admission.max_inflight_requests, counted with REST's (kernel/protection/inflight)
            inflight.admit(family, gateway.settings.admission.max_inflight_requests)
            self.holding = family
        key = self.metadata.get(gateway.settings.rollout.canary_header) or client.canary_key
        return CallContext(self.request_id, deadline, client, route_key=key)


async def handle(context, gateway, work: Callable[[RpcScope], Awaitable[T]], where: str) -> T:
    """Run one RPC: expired deadline first, then `work`; map any failure to a status with the error metadata."""
    metadata = metadata_of(context)
    request_id = new_request_id(metadata.get(REQUEST_ID_KEY))
    try:
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            raise ApiError(504, "deadline_exceeded", "the gRPC deadline had passed before the request was processed",
                           {"stage": "arrival"})
        scope = RpcScope(gateway, context, metadata, request_id)
        try:
            result = await work(scope)
        finally:
            if scope.holding is not None:
                inflight.leave(scope.holding)
    except Exception as exc:  # mapped to a status below; CancelledError is not an Exception
        info = describe_error(exc, where)
        await context.abort(grpc_status(info.status, info.code), f"{info.code}: {info.message}",
                            trailing_metadata=error_metadata(info, request_id))
        raise AssertionError("unreachable: abort raises") from exc  # pragma: no cover
    context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
    return result
