"""What every request carries whatever its transport: its id and its per-stage timings.

Why: every response (errors included) must be traceable by X-Request-ID, and every answer reports where its time went.
The HTTP edge that assigns ids and caps bodies is services/http_edge.py; the kernel knows no web framework.
"""
from __future__ import annotations

import os
import random
import re
import time
from dataclasses import dataclass, field

from opentelemetry import trace
from pydantic import BaseModel, Field

from triserve.observability.tracing import stage_tracer

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
