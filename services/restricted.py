"""Who may call each API category, on REST and gRPC alike (access.restricted_apis; Triton's --http-restricted-api and
--grpc-restricted-protocol): health, metadata, model-config, model-repository, statistics and metrics, each 'open',
'key' or 'admin'. Inference and admin calls keep their own guards (require_key_for_inference, admin keys).

One table per transport maps a request to its category: REST by path (a pure ASGI layer around BentoML's whole app,
so its own /metrics, /livez and /schema.json are covered), gRPC by method (a server interceptor). A refusal is the
service's error model (401/403) on REST and UNAUTHENTICATED/PERMISSION_DENIED on gRPC, before any handler runs.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

import grpc
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from triserve.configs.access import AccessSettings, ApiCategory
from triserve.kernel.errors import ApiError
from triserve.kernel.protection.access import AccessControl
from triserve.services.http_errors import error_response
from triserve.services.protocols.grpc_common import MetadataRequest

_MODEL = r"/v2/models/[^/]+(?:/versions/[^/]+)?"
_REST: tuple[tuple[str, ApiCategory], ...] = (
    (r"/(?:livez|readyz|healthz)", "health"),
    (r"/v2/health/(?:live|ready)", "health"),
    (_MODEL + r"/ready", "health"),
    (r"/metrics", "metrics"),
    (r"/console/api/summary", "metrics"),  # the console's figures are the metrics' (its static files hold no data)
    (r"/v2/models(?:/[^/]+(?:/versions/[^/]+)?)?/stats", "statistics"),
    (_MODEL + r"/config", "model-config"),
    (r"/v2/repository(?:/.*)?", "model-repository"),
    (r"/v2", "metadata"),
    (_MODEL, "metadata"),
    (r"/v1/models(?:/.*)?", "metadata"),
    (r"/(?:schema\.json|openapi\.json|docs\.json|docs(?:/.*)?|redoc)?", "metadata"),
)
REST_CATEGORIES: tuple[tuple[re.Pattern[str], ApiCategory], ...] = tuple((re.compile(p), c) for p, c in _REST)
# the table as one pattern, alternatives in its order (the first that matches the whole path wins, as in the loop it
# replaces): one regex call per request instead of up to twelve, inference paths included
_ANY_CATEGORY = re.compile("|".join(f"(?P<c{i}>{p})" for i, (p, _) in enumerate(_REST)))
_CATEGORY_OF_GROUP = {f"c{i}": c for i, (_, c) in enumerate(_REST)}

_OIP = "/inference.GRPCInferenceService/"
GRPC_CATEGORIES: dict[str, ApiCategory] = {
    _OIP + "ServerLive": "health", _OIP + "ServerReady": "health", _OIP + "ModelReady": "health",
    "/grpc.health.v1.Health/Check": "health", "/grpc.health.v1.Health/Watch": "health",
    _OIP + "ServerMetadata": "metadata", _OIP + "ModelMetadata": "metadata",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": "metadata",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": "metadata",
    _OIP + "ModelConfig": "model-config",
    _OIP + "RepositoryIndex": "model-repository", _OIP + "RepositoryModelLoad": "model-repository",
    _OIP + "RepositoryModelUnload": "model-repository",
    _OIP + "ModelStatistics": "statistics",
}


def rest_category(path: str) -> ApiCategory | None:
    """The category of a REST path; None for inference, admin and anything else (their own guards apply)."""
    match = _ANY_CATEGORY.fullmatch(path)
    return _CATEGORY_OF_GROUP[match.lastgroup] if match is not None and match.lastgroup else None


class RestrictedApis:
    """ASGI layer: a request whose path falls in a category not open to it gets 401/403 before the app sees it."""

    def __init__(self, app: ASGIApp, access: AccessSettings):
        self.app, self.cfg = app, access
        self.rules = {c: access.api_rule(c) for _, c in REST_CATEGORIES}
        self.control = AccessControl(access)  # key lookups only: no rate buckets are taken here
        self.open = all(rule == "open" for rule in self.rules.values())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.open:
            await self.app(scope, receive, send)
            return
        category = rest_category(scope["path"])
        if category is not None and self.rules[category] != "open":
            request = Request(scope)
            try:
                self.control.require(request, self.rules[category])
            except ApiError as exc:
                response = error_response(request, exc.status, exc.code, f"{exc.message} ({category} API)",
                                          {"category": category}, exc.headers)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class RestrictedRpcs(grpc.aio.ServerInterceptor):
    """gRPC server interceptor: the same rules by method name, refused with UNAUTHENTICATED or PERMISSION_DENIED."""

    def __init__(self, access: AccessSettings):
        self.rules = {c: access.api_rule(c) for c in GRPC_CATEGORIES.values()}
        self.control = AccessControl(access)

    async def intercept_service(self, continuation: Callable, details: grpc.HandlerCallDetails) -> Any:
        category = GRPC_CATEGORIES.get(details.method)
        rule = self.rules.get(category, "open") if category is not None else "open"
        if rule != "open":
            metadata = {k.lower(): v for k, v in (details.invocation_metadata or ()) if isinstance(v, str)}
            try:
                self.control.require(cast(Any, MetadataRequest(metadata, None)), rule)
            except ApiError as exc:
                code = grpc.StatusCode.UNAUTHENTICATED if exc.status == 401 else grpc.StatusCode.PERMISSION_DENIED
                return _refusal(await continuation(details), code, f"{exc.message} ({category} API)")
        return await continuation(details)


def _refusal(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same kind as the method's own (unary or streaming, e.g. health Watch, reflection) that aborts
    with `code` before reading anything."""
    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(code, message)

    async def refuse_stream(request: Any, context: grpc.aio.ServicerContext):
        await context.abort(code, message)
        yield  # pragma: no cover - abort raises first

    kind = {(False, False): grpc.unary_unary_rpc_method_handler, (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler, (True, True): grpc.stream_stream_rpc_method_handler}
    streaming = (handler.request_streaming, handler.response_streaming)
    return kind[streaming](refuse_stream if streaming[1] else refuse,
                           request_deserializer=handler.request_deserializer,
                           response_serializer=handler.response_serializer)
