"""One inference call as every transport hands it to a family pipeline: who calls, by when, and where its outcome
goes. Transports build it (REST: services/gateway_deps.inference_guard; gRPC: services/protocols/grpc_common); the
kernel and the families only read it, so neither depends on a transport."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from triserve.kernel.protection.access import Client
from triserve.kernel.protection.deadlines import Deadline
from triserve.observability.metrics import observe_timings


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
