"""Per-request plumbing: request ids, body-size cap, per-stage timings.

Why: every response (errors included) must be traceable by X-Request-ID, and an oversized body must be refused before
it is read into memory (413), not after.
"""
from __future__ import annotations

import os
import random
import re
import time
from dataclasses import dataclass, field

from opentelemetry import trace
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kernel.errors import ErrorBody, ErrorResponse
from kernel.protection import inflight, queue_control
from kernel.runner_call.batcher import approaching
from observability.metrics import REJECTED, REQUESTS, labelled, observe_rss
from observability.request_log import RequestLog

_tracer: trace.Tracer | None = None  # BentoML's, on first use (its provider is not OpenTelemetry's global one)


def stage_tracer() -> trace.Tracer:
    """A tracer of the provider BentoML exports request spans with: a tracer from OpenTelemetry's global provider
    (never set in a BentoML worker) would make every stage span a no-op."""
    global _tracer
    if _tracer is None:
        from bentoml._internal.configuration.containers import BentoMLContainer

        _tracer = BentoMLContainer.tracer_provider.get().get_tracer("triserve")
    return _tracer

_VALID_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


# Fresh ids: 128 random bits from a generator seeded by the OS (re-seeded in forked children) - the uniqueness of
# uuid4 without its os.urandom syscall per request (3.6% of the API worker's main thread at c=32).
_ids = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _ids.seed(os.urandom(32)))


def new_request_id(candidate: str | None) -> str:
    """Keep a well-formed client id; replace anything else (log injection, huge headers) with a fresh one."""
    if candidate and _VALID_ID.match(candidate):
        return candidate
    return f"{_ids.getrandbits(128):032x}"


class Timings(BaseModel):
    """Milliseconds spent per stage of this request."""

    preprocess_ms: float = Field(0.0, description="Decode, validate, letterbox/tokenise/window.")
    queue_ms: float = Field(0.0, description="Runner round trip minus compute: batching wait plus transport.")
    infer_ms: float = Field(0.0, description="ONNX Runtime time of the batch this request rode in.")
    postprocess_ms: float = Field(0.0, description="NMS, label mapping, inverse scaling.")
    total_ms: float = Field(0.0, description="Whole request inside the service.")


@dataclass
class StageClock:
    """Measures stages in order; `stage()` closes the previous one and records it as an OpenTelemetry span (a no-op
    unless BentoML's tracing is configured with a sample rate and exporter)."""

    started: float = field(default_factory=time.perf_counter)
    values: dict[str, float] = field(default_factory=dict)
    _mark: float = field(default_factory=time.perf_counter)
    _mark_ns: int = field(default_factory=time.time_ns)

    def stage(self, name: str) -> None:
        now, now_ns = time.perf_counter(), time.time_ns()
        self.values[name] = self.values.get(name, 0.0) + (now - self._mark) * 1000
        if trace.get_current_span().is_recording():  # tracing off (or not sampled): no span objects on the hot path
            span = stage_tracer().start_span(f"triserve.{name}", start_time=self._mark_ns)
            span.end(end_time=now_ns)
        self._mark, self._mark_ns = now, now_ns

    def timings(self, infer_ms: float = 0.0) -> Timings:
        runner = self.values.get("runner", 0.0)
        infer = min(infer_ms, runner) if runner else infer_ms
        return Timings(preprocess_ms=round(self.values.get("preprocess", 0.0), 3),
                       queue_ms=round(max(runner - infer, 0.0), 3), infer_ms=round(infer, 3),
                       postprocess_ms=round(self.values.get("postprocess", 0.0), 3),
                       total_ms=round((time.perf_counter() - self.started) * 1000, 3))


class RequestContextMiddleware:
    """Assigns/echoes X-Request-ID, enforces the body-size cap on the raw ASGI stream, and writes one JSON log line
    (plus, sampled, the payload) per task request."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, request_log: RequestLog | None = None,
                 max_inflight_requests: int | None = None, family_by_path: dict[str, str] | None = None,
                 front_door: bool = False):
        """front_door: refuse a task's requests before reading their body while every slot of the task is full
        under queue control (admission.queue_front_door; kernel/protection/queue_control.shedding)."""
        self.app = app
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

        refusal: tuple[str, dict] | None = None  # (message, details) of a refusal before the body is read
        limit = self.max_inflight
        if task and inflight.full(task, limit):
            refusal = (inflight.refusal(task, limit).message, {"limit": limit})
        elif task and self.front_door and queue_control.shedding(task):  # every slot full: refuse before the body
            refusal = (f"{task} is over capacity", {"reason": "standing_queue"})
        if task and refusal:
            REJECTED.labels(task, "", "overloaded").inc()
            REQUESTS.labels(task, "", "503").inc()
            await _drain(receive, self.max_body_bytes)  # unread bodies would cost the client its keep-alive connection
            await _send_error(send_with_id, 503, "overloaded", *refusal, rid, {b"retry-after": b"1"})
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
    """Discard the request body (no parsing) so the connection can be reused."""
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
