"""The HTTP edge of the gateway, pure ASGI (no body read): request ids, the body-size cap (413 before the body is
read into memory), the task routes' access decision (API key 401, per-client rate limit 429), the in-flight limit and
queue control's front door (503), 415 for a wrong Content-Type, request metrics and one JSON log line (plus, sampled,
the payload) per task request. Each refusal is decided from the headers alone and answered before the body is read:
it costs no body transfer, parsing or validation.

Why here and not in the kernel: the kernel serves every transport (typed gRPC, OIP) and knows no web framework; this
is what HTTP alone needs around it.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from triserve.kernel.errors import ApiError, ErrorBody, ErrorResponse
from triserve.kernel.protection import inflight, queue_control
from triserve.kernel.protection.access import AccessControl
from triserve.kernel.request_context import new_request_id
from triserve.kernel.runner_call.batcher import approaching
from triserve.observability.metrics import REJECTED, REQUESTS, labelled, observe_rss
from triserve.observability.request_log import RequestLog
from triserve.services.http_errors import error_response

ADMITTED = "access_client"  # the request state's key of the Client the edge admitted (read by the route's guard)


class RequestContextMiddleware:
    """Assigns/echoes X-Request-ID, enforces the body-size cap on the raw ASGI stream, and writes one JSON log line
    (plus, sampled, the payload) per task request."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, request_log: RequestLog | None = None,
                 max_inflight_requests: int | None = None, family_by_path: dict[str, str] | None = None,
                 front_door: bool = False, access: Callable[[], AccessControl | None] | None = None):
        """front_door: refuse a task's requests before reading their body while every slot of the task is full
        under queue control (admission.queue_front_door; kernel/protection/queue_control.shedding). access: this
        worker's access control (None while it is not loaded: the route's guard decides), which admits each task
        request once, here, before its body is read."""
        self.app = app
        self.access = access
        self.front_door = front_door
        self.family_by_path = family_by_path or {}  # inference path -> model family (families' REST routes)
        self.max_body_bytes = max_body_bytes
        self.log = request_log
        self.max_inflight = max_inflight_requests
        self.inflight = inflight.COUNTS  # shared with OIP REST and gRPC (kernel/protection/inflight.py)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        rid = new_request_id(headers.get("x-request-id"))
        state = scope.setdefault("state", {})
        state["request_id"] = rid
        state["arrived"] = (time.monotonic(), time.time())  # deadlines count from arrival, not from parsing
        task = self.family_by_path.get(scope.get("path", ""))
        started = time.perf_counter()
        status = [0]
        request_log = self.log
        keep_body = bool(task and request_log and request_log.payloads is not None
                         and random.random() < request_log.cfg.payload_sample_rate)
        kept_max = request_log.cfg.payload_max_bytes + 1 if request_log else 0
        body_parts: list[bytes] = []

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                if task:
                    labelled(REQUESTS, task, state.get("deployment", ""), str(message["status"])).inc()
                hdrs = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                hdrs.append((b"x-request-id", rid.encode()))
                message = {**message, "headers": hdrs}
            await send(message)

        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await self._reject(send_with_id, rid, int(declared))
            return
        received = 0
        too_large = False

        async def capped_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    too_large = True
                    raise _BodyTooLarge()
                if keep_body and received <= kept_max:
                    body_parts.append(message.get("body", b""))
            return message

        if task and self.access is not None and (control := self.access()) is not None:
            caller = Request(scope)  # headers and peer only
            try:
                state[ADMITTED] = control.admit(caller, task)
            except ApiError as exc:  # the error model's answer, byte for byte what the route's guard answered
                await error_response(caller, exc.status, exc.code, exc.message, exc.details, exc.headers)(
                    scope, receive, send_with_id)
                await _drain(receive, self.max_body_bytes)
                if request_log:
                    self._log(request_log, task, scope, state, rid, exc.status, started, None)
                return
        refusal: tuple[str, dict] | None = None  # (message, details) of a refusal before the body is read
        limit = self.max_inflight
        if task and inflight.full(task, limit):
            refusal = (inflight.refusal(task, limit).message, {"limit": limit})
        elif task and self.front_door and queue_control.shedding(task):  # every slot full: refuse before the body
            refusal = (f"{task} is over capacity", {"reason": "standing_queue"})
        if task and refusal:
            REJECTED.labels(task, "", "overloaded").inc()  # triserve_requests_total: send_with_id counts it
            await _send_error(send_with_id, 503, "overloaded", *refusal, rid, {b"retry-after": b"1"})
            await _drain(receive, self.max_body_bytes)
            if request_log:
                state["error_code"] = "overloaded"
                self._log(request_log, task, scope, state, rid, 503, started, None)
            return
        if task:
            inflight.enter(task)
            state["batch_arrival"] = approaching(task).enter()  # on its way to a batcher until it submits
        try:
            await self.app(scope, capped_receive, send_with_id)
        except _BodyTooLarge:
            await self._reject(send_with_id, rid, received)
        finally:
            if task:
                state["batch_arrival"]()  # no-op once the request reached its batcher
                inflight.leave(task)
                observe_rss("gateway")
                if request_log:
                    self._log(request_log, task, scope, state, rid, status[0], started,
                              body_parts if keep_body else None)

    @staticmethod
    def _log(request_log: RequestLog, task: str, scope: Scope, state: dict, rid: str, status: int, started: float,
             body_parts: list[bytes] | None) -> None:
        record = {"request_id": rid, "task": task, "method": scope.get("method"), "path": scope.get("path"),
                  "status": status, "duration_ms": round((time.perf_counter() - started) * 1000, 3)}
        record.update(state.get("outcome", {}))
        if "error_code" in state:
            record["error_code"] = state["error_code"]
        request_log.request(record)
        if body_parts is not None and status == 200:
            request_log.payload(task, scope.get("path", ""), rid, b"".join(body_parts))

    async def _reject(self, send: Send, rid: str, size: int) -> None:
        await _send_error(send, 413, "payload_too_large", f"request body exceeds {self.max_body_bytes} bytes",
                          {"limit_bytes": self.max_body_bytes, "received_bytes": size}, rid)


async def _drain(receive: Receive, limit: int) -> None:
    """Discard the request body (no parsing) so the connection can be reused. After the answer: a client that is
    slow to send (or never sends) its body has its refusal at once. Uvicorn discards the rest of a body itself once
    the response is complete (its receive then says http.disconnect): this is for servers that do not."""
    seen = 0
    while seen <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return
        seen += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


async def _send_error(send: Send, status: int, code: str, message: str, details: dict, rid: str,
                      headers: dict[bytes, bytes] | None = None) -> None:
    """An error-model response written straight to the ASGI channel (no app, no body read)."""
    body = ErrorResponse(error=ErrorBody(code=code, message=message, details=details,
                                         request_id=rid)).model_dump_json().encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or {}).items()]})
    await send({"type": "http.response.body", "body": body})


class _BodyTooLarge(Exception):
    pass


class ContentTypeMiddleware:
    """415 for a POST whose Content-Type is not what the route consumes (checked before the body is read)."""

    def __init__(self, app: ASGIApp, rules: dict[str, str]):
        self.app = app
        self.rules = rules  # path -> required media type

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        required = self.rules.get(scope.get("path", "")) if scope["type"] == "http" else None
        if required and scope.get("method") == "POST":
            ctype = dict(scope.get("headers", [])).get(b"content-type", b"").decode("latin-1")
            if ctype.split(";")[0].strip().lower() != required:
                rid = scope.get("state", {}).get("request_id", "unknown")
                await _send_error(send, 415, "unsupported_media_type", f"this endpoint consumes {required}",
                                  {"received": ctype or None, "required": required}, rid)
                return
        await self.app(scope, receive, send)
