"""Routing one deployment's request to its primary or fallback model, with every protection on the way.

Order per attempt: deadline check -> per-slot admission (bounded queue, wait estimate) -> runner call bounded by the
remaining deadline (idempotent transport retries inside) -> output sanity. The primary sits behind a circuit breaker;
'auto' requests go to the fallback when the breaker is open, when the primary is overloaded (a configured share), or
when the primary fails or returns garbage. Every answer says whether it is degraded and why.
"""
from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from triserve.configs.deployments import FALLBACK_SUFFIX, Deployment, ModelRepository
from triserve.configs.settings import Settings
from triserve.kernel.errors import ApiError, InvalidOutput
from triserve.kernel.family import Family
from triserve.kernel.protection.access import AccessControl
from triserve.kernel.protection.admission import AdmissionControl
from triserve.kernel.protection.breaker import CircuitBreaker
from triserve.kernel.protection.deadlines import Deadline
from triserve.kernel.request_context import StageClock
from triserve.kernel.routing.rollout import CanaryGuard, ModelCatalog, RoutingTable, ShadowMirror
from triserve.kernel.served import RunnerResult, ServedModel
from triserve.observability.metrics import (
    CANARY_ROLLBACKS,
    DEGRADED,
    REJECTED,
    VERSION_REQUESTS,
    VERSION_SECONDS,
    labelled,
    pending_declared,
    pending_finished,
    pending_started,
    version_failed,
    version_succeeded,
)

log = logging.getLogger("triserve.inference")



class InferenceHost(Protocol):
    """What a runner call needs of the serving context (kernel/context.ServingContext implements it): named here so
    that the routing never imports the context that is built on it."""

    settings: Settings
    runner: Any
    protection: Protection
    canary: CanaryGuard
    shadow: ShadowMirror
    routing: RoutingTable
    catalog: ModelCatalog

    @property
    def repository(self) -> ModelRepository: ...

    def family(self, dep: Deployment) -> Family: ...

    def client_for(self, slot: str) -> Any: ...

    async def withdraw_canary(self, slot: str) -> None: ...


class Protection:
    """Per-process protection state: admission per slot, a breaker per deployment's primary, access control."""

    def __init__(self, settings: Settings, slot_batch: Callable[[str], int]):
        self.settings = settings
        runner = settings.runner
        self.admission = AdmissionControl(
            settings.admission, slot_batch, lanes=runner.compute_lanes if runner.placement == "remote" else 1,
            short_item_s=runner.short_item_ms / 1000,
            shares_runner=lambda slot: runner.fallbacks == "runner" or not slot.endswith(FALLBACK_SUFFIX))
        self.breakers: dict[str, CircuitBreaker] = {}
        self.access = AccessControl(settings.access, workers=settings.gateway.workers)
        self._declared: object | None = None  # the model repository whose deployments' gauges are exported
        self._runner_boots: dict[str, None] = {}  # the runner processes seen (insertion-ordered, the last 64)

    def declare(self, repository) -> None:
        """Every deployment of the (immutable) repository exports its pending gauges, at 0 until its first request."""
        if repository is not self._declared:
            for dep in repository.deployments:
                pending_declared(dep.name)
            self._declared = repository

    def runner_seen(self, boot: str | None) -> None:
        """The routing table names the runner process it came from: when that is a process never seen before (a
        restart), open breakers probe it at once (CircuitBreaker.reprobe). Several runner workers answer in turn:
        each is new only once."""
        if boot is None or boot in self._runner_boots:
            return
        if self._runner_boots:
            for b in self.breakers.values():
                b.reprobe()
        self._runner_boots[boot] = None
        while len(self._runner_boots) > 64:
            del self._runner_boots[next(iter(self._runner_boots))]

    def breaker(self, deployment: str) -> CircuitBreaker:
        b = self.breakers.get(deployment)
        if b is None:
            b = self.breakers[deployment] = CircuitBreaker(deployment, self.settings.breaker)
        return b

    def plan(self, dep: Deployment, choice: str) -> list[tuple[str, str | None]]:
        """(slot, degraded reason) in the order they are tried."""
        primary, fallback = dep.name, dep.fallback_slot
        if choice == "fallback":
            if fallback is None:
                raise ApiError(422, "no_fallback", f"deployment {dep.name!r} has no fallback model",
                               {"deployment": dep.name})
            return [(fallback, "requested")]
        if choice == "primary" and fallback is not None and not self.breaker(dep.name).allow():
            # known failing (errors, timeouts, a runner that is gone): refuse fast instead of waiting for it
            wait = max(1, math.ceil(self.breaker(dep.name).retry_after_s()))
            raise ApiError(503, "circuit_open", f"the primary model of {dep.name!r} is failing; retry after {wait} s "
                           "or ask for model 'auto' (its fallback answers)", {"deployment": dep.name},
                           headers={"Retry-After": str(wait)})
        if choice == "primary" or fallback is None:
            return [(primary, None)]
        breaker = self.breaker(dep.name)
        if not breaker.allow():
            return [(fallback, "circuit_open")]
        share = self.settings.admission.overload_fallback_share
        if share and self.admission.overloaded(primary) and random.random() < share:
            breaker.release()
            return [(fallback, "overload")]
        return [(primary, None), (fallback, "primary_failed")]


async def run_task(ctx: InferenceHost, dep: Deployment, items_for: Callable[[ServedModel], list[np.ndarray]],
                   choice: str, clock: StageClock, deadline: Deadline, request_id: str = "",
                   route_key: str = "", arrived: Callable[[], None] | None = None,
                   slot: str | None = None, keep: dict | None = None) -> RunnerResult:
    """items_for(model) preprocesses for that model version (sizes may differ between primary and fallback, or
    between versions); the family's check_outputs refuses outputs that must not reach the client; arrived: the
    request's batcher-arrival callback (CallContext.arrived); slot: run exactly this slot (OIP tensor models); keep:
    what of each output the pipeline will read, for the family's runtime to cut the rest at the runner
    (runners/compute.compacted; RunnerResult.facts says what it did)."""
    prot: Protection = ctx.protection
    family = ctx.family(dep)
    await ctx.routing.ensure_fresh(ctx.runner)
    prot.declare(ctx.repository)
    prot.runner_seen(ctx.routing.runner_boot)
    plan = [(slot, None)] if slot else prot.plan(dep, choice)
    last_error: ApiError | None = None
    fallback_reason: str | None = None
    for index, (slot, planned_reason) in enumerate(plan):
        reason = fallback_reason or planned_reason if index else planned_reason
        is_primary = slot == dep.name
        breaker = prot.breaker(dep.name) if is_primary and dep.fallback else None
        has_next = index + 1 < len(plan)
        for attempt in range(2):  # a second pass only when the pinned version was retired meanwhile
            version, role = ctx.routing.pick(slot, route_key or request_id)
            model = await ctx.catalog.resolve(slot, version)
            deadline.check("preprocess")
            xs = items_for(model)
            clock.stage("preprocess")
            cap = ctx.routing.memory_cap(slot)
            if cap is not None and len(xs) > cap:  # never split silently: the client learns the limit (Triton's rule)
                if breaker:
                    breaker.release()
                REJECTED.labels(dep.family, dep.name, "exceeds_memory_cap").inc()
                raise ApiError(413, "exceeds_memory_cap", f"{len(xs)} items in one request exceed the {cap} that "
                               f"{slot}'s memory budget allows in one model call; send at most {cap}",
                               {"slot": slot, "items": len(xs), "memory_batch_cap": cap})
            try:
                prot.admission.admit(slot, len(xs), deadline)
            except ApiError as exc:
                REJECTED.labels(dep.family, dep.name, exc.code).inc()
                version_failed(slot, model.manifest.name, model.manifest.version, 0.0)  # Triton: a queue rejection
                if breaker:
                    breaker.release()
                if has_next:
                    last_error = exc
                    fallback_reason = "overload" if exc.code == "overloaded" else "deadline"
                    break
                raise
            prot.admission.started(slot, len(xs))
            pending_started(dep.name, len(xs))  # the scaling signal: admitted until the runner's answer
            items = None
            payload = [{"slot": slot, "x": x, "deadline": deadline.epoch, "rid": request_id, "version": version}
                       for x in xs]
            if keep:
                for item in payload:
                    item["keep"] = keep
            started = time.perf_counter()
            attempt_s = _attempt_timeout(ctx, slot, len(xs), is_primary and dep.fallback is not None)
            try:
                items = await asyncio.wait_for(ctx.client_for(slot).call(slot, payload, arrived),
                                               timeout=max(min(deadline.remaining(), attempt_s), 0.001))
            except TimeoutError:
                if breaker:
                    breaker.record(False)
                ctx.canary.record(slot, role, False, time.perf_counter() - started)
                version_failed(slot, model.manifest.name, model.manifest.version, time.perf_counter() - started)
                if attempt_s < deadline.remaining():  # the primary did not answer in time: the fallback does
                    last_error = ApiError(503, "runner_unavailable", f"{slot} did not answer within "
                                          f"{attempt_s * 1000:.0f} ms", {"slot": slot}, headers={"Retry-After": "1"})
                    fallback_reason = "primary_timeout"
                    break
                REJECTED.labels(dep.family, dep.name, "deadline_exceeded").inc()
                raise ApiError(504, "deadline_exceeded", f"no answer within the {deadline.budget_ms} ms deadline",
                               {"budget_ms": deadline.budget_ms, "stage": "inference", "slot": slot}) from None
            except ApiError as exc:
                if breaker:
                    breaker.record(False)
                _count(ctx, slot, version, role, False, started, model)
                last_error, fallback_reason = exc, "primary_failed"
                break
            except asyncio.CancelledError:  # the client went away: no verdict on the model, free a half-open probe
                if breaker:
                    breaker.release()
                raise
            finally:
                first = items[0] if items else {}
                prot.admission.finished(slot, len(xs), first.get("infer_ms"), first.get("batch"))
                pending_finished(dep.name, len(xs))
                clock.stage("runner")
            unavailable = next((it for it in items if it.get("error") in ("loading", "model_unavailable")), None)
            if unavailable is not None:  # an on-demand deployment still loading at the deadline, or refused
                if breaker:
                    breaker.release()
                loading = unavailable["error"] == "loading"
                refusal = ApiError(503, "model_loading" if loading else "model_unavailable",
                               f"{slot} is loading on demand; retry shortly" if loading else
                               f"{slot} cannot be loaded: {unavailable.get('reason')}",
                               {"slot": slot, "reason": unavailable.get("reason") or unavailable.get("state")},
                               headers={"Retry-After": "1" if loading else "10"})
                REJECTED.labels(dep.family, dep.name, refusal.code).inc()
                if has_next:
                    last_error, fallback_reason = refusal, "primary_unavailable"
                    break
                raise refusal
            if any(it.get("error") == "version_unavailable" for it in items) and attempt == 0:
                await ctx.routing.refresh(ctx.runner)
                if breaker:
                    breaker.release()
                    breaker.allow()
                continue
            if any("error" in it for it in items):
                if breaker:
                    breaker.record(False)
                version_failed(slot, model.manifest.name, model.manifest.version, time.perf_counter() - started)
                REJECTED.labels(dep.family, dep.name, "deadline_exceeded").inc()
                raise ApiError(504, "deadline_exceeded", "the deadline passed while the request was queued",
                               {"budget_ms": deadline.budget_ms, "stage": "queue", "slot": slot})
            outputs = [np.asarray(it["y"]) for it in items]
            try:
                family.check_outputs(model.manifest, outputs)
            except InvalidOutput as exc:
                if breaker:
                    breaker.record(False)
                _count(ctx, slot, version, role, False, started, model)
                last_error = ApiError(503, "invalid_model_output", "the model produced an invalid output",
                                      {"slot": slot, "reason": str(exc)}, headers={"Retry-After": "1"})
                fallback_reason = "invalid_output"
                break
            if breaker:
                breaker.record(True)
            _count(ctx, slot, version, role, True, started, model, items)
            shadow = ctx.routing.shadow(slot)
            if shadow and shadow != version:
                ctx.shadow.mirror(ctx.runner, family, model.manifest, slot, shadow, payload, outputs)
            if reason:
                DEGRADED.labels(dep.name, reason).inc()
            return RunnerResult(outputs=outputs, model=items[0]["model"], version=items[0]["version"],
                                infer_ms=max(it["infer_ms"] for it in items), batch=max(it["batch"] for it in items),
                                slot=slot, degraded=reason is not None, degraded_reason=reason, served=model,
                                role=role, facts=[it.get("facts") or {} for it in items])
    assert last_error is not None
    raise last_error


def _attempt_timeout(ctx: InferenceHost, slot: str, items: int, has_fallback: bool) -> float:
    """Seconds a runner call may take before it is abandoned (inf: until the deadline). Only the primary of a
    deployment whose fallback runs elsewhere (runner.fallbacks='gateway') is abandoned early: a killed runner's socket
    accepts and never answers; 'auto' requests then get the fallback, explicit 'primary' ones a 503 with Retry-After
    instead of a wait for the restart. The limit grows with the admission's estimate of the wait, so a loaded but
    healthy runner is not abandoned."""
    runner = ctx.settings.runner
    if not has_fallback or runner.fallbacks != "gateway":
        return float("inf")
    return max(runner.primary_attempt_ms / 1000, 3 * ctx.protection.admission.estimated_wait(slot, items))


def _count(ctx: InferenceHost, slot: str, version: str, role: str, ok: bool, started: float, model: ServedModel,
           items: list[dict] | None = None) -> None:
    """Per-version metrics (Triton's statistics included: `items`, the runner's answers of a successful call), and
    the canary verdict: a canary worse than allowed is withdrawn on the spot."""
    seconds = time.perf_counter() - started
    labelled(VERSION_REQUESTS, slot, version, role, "ok" if ok else "error").inc()
    labelled(VERSION_SECONDS, slot, version, role).observe(seconds)
    name, served = model.manifest.name, model.manifest.version
    if ok and items:
        version_succeeded(slot, name, served, len(items), seconds, max(it["infer_ms"] for it in items) / 1000)
    else:
        version_failed(slot, name, served, seconds)
    ctx.canary.record(slot, role, ok, seconds)
    if role == "canary":
        verdict = ctx.canary.verdict(slot)
        if verdict:
            CANARY_ROLLBACKS.labels(slot, verdict).inc()
            log.warning("canary %s:%s withdrawn (%s)", slot, version, verdict)
            ctx.canary.reset(slot)
            asyncio.create_task(ctx.withdraw_canary(slot))
