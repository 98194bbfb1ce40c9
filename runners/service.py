"""The shared runner tier: one BentoML service that holds every deployment's models and runs their batches.

Inputs are plain tensors: letterboxed images (S x S x 3 uint8 from the gateway, [3, S, S] float32 from OIP clients),
ragged token-id sequences (padded per batch to the longest item), forecast windows. How items become ONNX feeds
is the model family's runner hook (families/<family>/runtime.py); the runner knows slots and tensors, never tasks.

A slot is one model of a deployment: '<deployment>' (primary) or '<deployment>_fallback' (configs/deployments.py).
The runner is the source of truth for the model repository: deployments added, changed or removed at run time
(add_deployment / remove_deployment, called by the gateway's admin API) are staged, verified, loaded and warmed here
before they are routed to, and persisted so a restart serves the same set.

This module is the BentoML service only (its definition, the wire format of its answers, its APIs); the work is done by
one object per concern, sharing the model pool and one control lock:
  runners/compute.py           the compute host: runs batches of items on the loaded models (`infer`)
  runners/repository_state.py  what is served: deployments, slots, versions, rollout roles; add/replace/remove, stage,
                               activate, canary, shadow, retire
  runners/on_demand.py         on-demand residency: load on first use, unload, explicit load/unload (policy:
                               runners/residency.py)
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any, ClassVar, cast

import bentoml
import psutil

from triserve.configs.deployments import load_repository
from triserve.configs.settings import get_settings
from triserve.models.cache import open_serving_registry
from triserve.observability import heapdump, memory
from triserve.observability.device import start_device_sampler
from triserve.observability.metrics import settle_heap
from triserve.observability.tracing import service_tracing
from triserve.runners.compute import ComputeHost
from triserve.runners.fast_path import FastPathServer
from triserve.runners.merge import CallMerger
from triserve.runners.on_demand import OnDemand
from triserve.runners.pool import ModelPool
from triserve.runners.repository_state import STAGING, IncompatibleFallback, Manifested, RepositoryState, check_pair
from triserve.runners.wire import pickled_response, sent_pickle

# the names other modules have imported from here (the repository's checks now live in runners/repository_state.py)
__all__ = ["STAGING", "STARTUP_REPOSITORY", "IncompatibleFallback", "Manifested", "ModelRunner", "check_pair",
           "fallback_host"]

settings = get_settings()
memory.install(settings.memory)  # before any request thread allocates
# The repository at startup: the runner API's batching limits (runner.batching="runner") are fixed per process.
STARTUP_REPOSITORY = load_repository(state_file=settings.deployments_state_file, overrides=settings.slots)


def _answer(results: list[dict], ctx: bentoml.Context):
    """Gateway-batched pickle calls get one pickled body (runners/wire.py); BentoML's dispatcher (runner batching)
    needs the list to split it between the requests it merged, and other callers get BentoML's normal answer."""
    if settings.runner.batching == "gateway" and sent_pickle(ctx):
        return pickled_response(results)
    return results


def _batching() -> dict:
    """BentoML's dispatcher merges calls only when batching happens here (one limit for every slot: the largest
    configured at startup); gateway-batched calls arrive whole."""
    if settings.runner.batching == "gateway":
        return {}
    slots = STARTUP_REPOSITORY.slots.values()
    return {"batchable": True, "max_batch_size": max(m.batching.max_batch_size for m in slots),
            "max_latency_ms": max(m.batching.max_latency_ms for m in slots)}


@bentoml.service(
    name="triserve-runner",
    workers=settings.runner.workers,
    resources={"gpu": 1},
    traffic={"timeout": settings.runner.timeout_s},
    logging={"access": {"enabled": settings.observability.bentoml_access_log}},  # batch_log has every call
    # The stock client recycles its HTTP session every 100 requests while calls are in flight and drops them
    # ("Connector is closed"); a session per process lifetime removes that source of 5xx.
    runner_connection={"max_requests": 1_000_000_000, "max_age": 1e9},
    # the tracing middleware runs per runner call too (the c=1 hop paid it); off unless trace_sample_rate > 0
    **service_tracing(settings.observability.trace_sample_rate, settings.observability.otlp_endpoint),
)
class ModelRunner:
    # Which slots this process hosts when runner.fallbacks='gateway': the runner tier the primaries, the API workers'
    # in-process FallbackHost (fallback_host()) the fallbacks; with 'runner' every slot is hosted here.
    hosts: ClassVar[str] = "primary"

    def __init__(self) -> None:
        entered = time.time()
        if settings.runner.startup_delay_s:
            time.sleep(settings.runner.startup_delay_s)
        # every change of what is loaded or routed (repository, rollout roles, on-demand loads) runs under this lock
        self._control = threading.Lock()
        self.pool = ModelPool(open_serving_registry(settings, STARTUP_REPOSITORY), settings.runner)
        self.state = RepositoryState(STARTUP_REPOSITORY, self.pool, self._control, hosts=self.hosts)
        self.on_demand = OnDemand(self.state, self._control)
        self.state.on_change = self.on_demand.sync  # residency follows every change of the repository
        self.compute = ComputeHost(self.pool, self.state, self.on_demand.residency)
        self._merger: CallMerger | None = None
        self._fast: FastPathServer | None = None  # bound at startup in the serving event loop
        room = self.on_demand.sync()
        opened = time.time()
        self.state.load_startup(keep_free_mb=room)
        # where this process's start went (status.startup; scripts/bench/restart.py reports it)
        created = psutil.Process().create_time()
        self.boot = f"{os.getpid()}@{created}"  # this process's life: gateways see a restarted runner (routing())
        self.startup = {"process_to_init_s": round(entered - created, 3),
                        "registry_s": round(opened - entered, 3), "load_s": round(time.time() - opened, 3)}
        start_device_sampler()  # device memory and utilisation via NVML where a GPU is present (else nothing)
        settle_heap("runner")
        heapdump.install("runner", settings.observability.heap_snapshot_dir)

    def __is_ready__(self) -> bool:
        return self._ready()

    def _ready(self) -> bool:
        """Every 'always' deployment loaded (on-demand ones load on use: the service is ready without them)."""
        return not self.pool.errors and bool(self.pool.models or self.on_demand.residency.entries)

    def _serve(self, items: list[dict]) -> list[dict]:
        """The model call without BentoML (the merger's and runners/local.py's entry): runners/compute.py."""
        return self.compute.serve(items)

    if settings.runner.batching == "runner":
        @bentoml.api(**_batching())
        def infer(self, items: list[dict], ctx: bentoml.Context) -> list[dict]:
            """Every model call: items name their slot; one ONNX Runtime call per (slot, version) present."""
            return _answer(self._serve(items), ctx)
    else:
        @bentoml.api
        async def infer(self, items: list[dict], ctx: bentoml.Context) -> list[dict]:
            """Every model call: items name their slot. Calls of the same slot from other API workers or gateway
            instances that wait while a computation runs are computed together (runners/merge.py)."""
            return _answer(await self._submit(items), ctx)

    async def _submit(self, items: list[dict]) -> list[dict]:
        """Items into the call merger (made in the serving event loop): BentoML's `infer` and the fast path."""
        if self._merger is None:
            self._merger = CallMerger(self._serve, max_gather_s=settings.runner.merge_gather_ms / 1000,
                                      lanes=settings.runner.compute_lanes,
                                      short_item_s=settings.runner.short_item_ms / 1000)
        return await self._merger.submit(items)

    @bentoml.on_startup
    async def _start_fast_path(self) -> None:
        """The gateway's model calls on this process's own socket (runners/fast_path.py), where they can come."""
        runner = settings.runner
        if runner.fast_path and runner.workers == 1 and runner.batching == "gateway":
            self._fast = FastPathServer(self._submit, runner.timeout_s,
                                        traced=settings.observability.trace_sample_rate > 0)
            await self._fast.start()

    @bentoml.on_shutdown
    async def _stop_fast_path(self) -> None:
        if self._fast is not None:
            await self._fast.stop()

    @bentoml.api
    def fast_path(self) -> dict:
        """Where the gateway may send model calls past BentoML's stack: {"path": the UNIX socket, or None}."""
        return {"path": self._fast.path if self._fast is not None else None}

    @bentoml.api
    def status(self) -> dict:
        """Loaded models, their versions and providers, load errors (the reason behind not-ready), and every
        configured slot's residency (state: resident, unloaded, loading, refused)."""
        out = self.pool.describe()
        slots, refused = self.on_demand.slot_states()
        return {**out, "ready": self._ready(), "errors": {**out["errors"], **refused}, "slots": slots,
                "startup": self.startup}

    @bentoml.api
    def load_deployment(self, name: str) -> dict:
        """Explicit model control (Triton's load): start loading an on-demand deployment now; returns its state
        (poll `status` for 'resident' or 'refused')."""
        return self.on_demand.load_deployment(name)

    @bentoml.api
    def unload_deployment(self, name: str) -> dict:
        """Explicit model control (Triton's unload): evict a resident on-demand deployment; its next request (or
        load_deployment) loads it again."""
        return self.on_demand.unload_deployment(name)

    # --- rollout control (called by the gateway's admin API) ---------------------------------------------------
    @bentoml.api
    def routing(self) -> dict:
        """{"slots": per slot the active version, every loaded version, the canary (version, weight) and the shadow;
        "repository": the deployments served now; "boot": this runner process's life (a new one after a restart)}."""
        return self._routing()

    def _routing(self) -> dict:
        # a plain method: API methods must not call each other (BentoML serialises sync APIs on one thread)
        slots = {slot: self.state.slot_routing(slot) for slot in list(self.pool.models)}
        for slot, version in self.on_demand.versions.items():  # not loaded yet: routed, loaded on first use
            slots.setdefault(slot, {"active": version, "loaded": [], "resident": False, "batch_cap": None,
                                    "canary": None, "shadow": None})
        return {"slots": slots, "repository": self.state.repository.model_dump(mode="json"), "boot": self.boot}

    @bentoml.api
    async def stage(self, slot: str, ref: str) -> dict:
        """Resolve, pull/verify, load and warm a version next to the active one (not serving yet). A failure (unknown
        version, tampered file, broken graph) is returned as {"error": ...}; the active version is untouched.
        In a thread of its own, as add_deployment."""
        return await asyncio.to_thread(self.state.stage, slot, ref)

    @bentoml.api
    def activate(self, slot: str, version: str, retire_after_s: float = 10.0, record: dict | None = None) -> dict:
        """Atomically switch the slot to a loaded version; the previous one is unloaded after `retire_after_s` (in
        flight batches finish on it; gateways refresh their routing well within that time). `record`: remember an
        admin promote with what served before it (a rollback returns there), or take one off on rollback."""
        return self.state.activate(slot, version, retire_after_s, record)

    @bentoml.api
    def set_canary(self, slot: str, version: str | None = None, weight: float = 0.0) -> dict:
        """Send `weight` of the slot's traffic (sticky per request key) to a loaded candidate; None clears it."""
        return self.state.set_canary(slot, version, weight)

    @bentoml.api
    def set_shadow(self, slot: str, version: str | None = None) -> dict:
        """Mirror the slot's traffic to a loaded candidate whose answers are compared, never returned."""
        return self.state.set_shadow(slot, version)

    # --- model repository control (called by the gateway's admin API) ------------------------------------------
    @bentoml.api
    async def add_deployment(self, deployment: dict, retire_after_s: float = 10.0) -> dict:
        """Add a deployment or replace one of the same name: stage (pull, verify), load and warm every model next to
        what serves, check the pair (family, labels), then swap the repository in one assignment and persist it.
        Requests keep going to the old models until the swap; a refusal leaves everything as it was. In a thread of
        its own: BentoML runs the sync APIs on one thread, and a pull from a slow registry there would hold back
        `routing` and `status`, which every API worker asks."""
        return await asyncio.to_thread(self.state.add, deployment, retire_after_s)

    @bentoml.api
    def remove_deployment(self, name: str, retire_after_s: float = 10.0) -> dict:
        """Stop routing to a deployment at once (persisted); its models are unloaded after `retire_after_s`, when
        the requests already on their way have finished."""
        return self.state.remove(name, retire_after_s)


def fallback_host() -> type:
    """ModelRunner's code hosting only the deployments' fallbacks, built in each API worker when
    runner.fallbacks='gateway' (services/gateway.py, through runners/local.LocalRunner): a fallback keeps answering
    when the runner tier's process dies."""
    inner = cast(Any, ModelRunner).inner  # @bentoml.service made ModelRunner a Service; .inner is the class
    return type("FallbackHost", (inner,), {"hosts": "fallback"})
