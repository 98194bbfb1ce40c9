"""The shared runner tier: one BentoML service that holds every deployment's models and runs their batches.

Inputs are plain tensors: letterboxed images (S x S x 3 uint8 from the gateway, [3, S, S] float32 from OIP clients),
ragged token-id sequences (padded here, per batch, to the longest item), forecast windows. How items become ONNX feeds
is the model family's runner hook (families/<family>/runtime.py); this module knows slots and tensors, never tasks.

A slot is one model of a deployment: '<deployment>' (primary) or '<deployment>_fallback' (configs/deployments.py).
The runner is the source of truth for the model repository: deployments added, changed or removed at run time
(add_deployment / remove_deployment, called by the gateway's admin API) are staged, verified, loaded and warmed here
before they are routed to, and persisted so a restart serves the same set.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple, cast

import bentoml
import numpy as np

import families
from configs.deployments import FALLBACK_SUFFIX, Deployment, ModelRepository, load_repository, save_state
from configs.settings import ModelSlot, get_settings
from models.cache import open_serving_registry
from models.manifest import Manifest
from observability import heapdump, memory
from observability.device import start_device_sampler
from observability.metrics import observe_rss, settle_heap
from observability.request_log import stdout_json_logger
from observability.tracing import service_tracing
from runners.faults import inject_faults
from runners.memory import MB
from runners.merge import CallMerger
from runners.metrics import (
    BATCH_SECONDS,
    BATCH_SIZE,
    EXPIRED,
    LOAD_DURATION,
    LOAD_SECONDS,
    MEMORY_BUDGET,
    MEMORY_SPLITS,
    MODEL_EVICTIONS,
    MODEL_INFO,
    MODEL_LOADS,
    MODEL_MEMORY,
    MODEL_RESIDENT,
)
from runners.pool import LoadedModel, ModelPool, fixed_batch
from runners.ragged import length_buckets, token_groups
from runners.residency import REFUSED, RESIDENT, UNLOADED, Residency
from runners.wire import pickled_response, sent_pickle

log = logging.getLogger("triserve.runner")
batch_log = stdout_json_logger("triserve.runner.batches")  # a JSON line per batch
settings = get_settings()
memory.install(settings.memory)  # before any request thread allocates
# The repository at startup: the runner API's batching limits (runner.batching="runner") are fixed per process.
STARTUP_REPOSITORY = load_repository(state_file=settings.deployments_state_file, overrides=settings.slots)


STAGING = "~staging"  # suffix of the pool key a deployment's models load under until they are swapped in


class IncompatibleFallback(ValueError):
    """A deployment's fallback cannot stand in for its primary (other family or label set)."""


class Manifested(NamedTuple):
    """A model known by its manifest only (the other half of a pair hosted elsewhere: runner.fallbacks='gateway')."""

    manifest: Manifest


def check_pair(dep: Deployment, primary: LoadedModel | Manifested, fallback: LoadedModel | Manifested | None) -> None:
    """Both models belong to the deployment's family, and the fallback answers with the primary's labels in the same
    order (a user's detector must never answer 'triangle' because its fallback is another model)."""
    for role, model in (("model", primary), ("fallback", fallback)):
        if model is not None and model.manifest.task != dep.family:
            raise IncompatibleFallback(f"deployment {dep.name!r}: {role} {model.manifest.name}:"
                                       f"{model.manifest.version} is a {model.manifest.task} model, not {dep.family}")
    if fallback is not None and fallback.manifest.labels != primary.manifest.labels:
        a, b = primary.manifest.labels, fallback.manifest.labels
        diff = sorted(set(a) ^ set(b))[:10]
        raise IncompatibleFallback(
            f"deployment {dep.name!r}: fallback {fallback.manifest.name} does not answer with the labels of primary "
            f"{primary.manifest.name} ({len(b)} vs {len(a)} labels"
            + (f"; only in one of them: {diff})" if diff else "; the same labels in another order)")
            + ": a fallback must have the same labels in the same order")




def _reserved_batch(m: ModelSlot) -> int:
    """The batch a slot's memory is reserved for: its max batch size, or 1 when it runs item by item (per_item)."""
    return 1 if m.batching.per_item else m.batching.max_batch_size


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
        if settings.runner.startup_delay_s:
            time.sleep(settings.runner.startup_delay_s)
        self.repository: ModelRepository = STARTUP_REPOSITORY
        self._control = threading.Lock()
        self.pool = ModelPool(open_serving_registry(settings, self.repository), settings.runner)
        self.residency = Residency(self._load_on_demand, self._unload_deployment, lambda: self.pool.memory.free_mb,
                                   self._observe_residency)
        self.on_demand_versions: dict[str, str] = {}  # slot of an on-demand deployment -> the version it will load
        self._merger: CallMerger | None = None
        room = self._sync_residency()
        always = [d for d in self.repository.deployments if d.residency == "always"]
        self.pool.load_all({slot: (m.name, m.ref, _reserved_batch(m)) for d in always
                            for slot, m in self._slots(d).items()},
                           budgets={d.name: (list(self._slots(d)), d.memory_mb) for d in always if d.memory_mb},
                           keep_free_mb=room)
        for dep in always:
            self._check_loaded(dep)
        self.rollout: dict[str, dict] = {}  # slot -> {"canary": {"version", "weight"} | None, "shadow": version}
        for dep in self.repository.deployments:
            for slot in self._slots(dep):
                loaded = self.pool.models.get(slot)
                MODEL_RESIDENT.labels(slot).set(loaded is not None)
                if loaded is not None:
                    self._model_info(slot, loaded)
                    MODEL_LOADS.labels(slot, "startup", "ok").inc()
                    LOAD_DURATION.labels(slot).observe(loaded.load_seconds)
                elif dep.residency == "always":
                    MODEL_LOADS.labels(slot, "startup", "refused").inc()
        self._memory_gauges()
        start_device_sampler()  # device memory and utilisation via NVML where a GPU is present (else nothing)
        settle_heap("runner")
        heapdump.install("runner", settings.observability.heap_snapshot_dir)

    def _slots(self, dep: Deployment) -> dict[str, ModelSlot]:
        """The slots of a deployment this process hosts (see `hosts`)."""
        if settings.runner.fallbacks == "runner":
            return dep.slots
        return {slot: m for slot, m in dep.slots.items() if (slot == dep.name) == (self.hosts == "primary")}

    def _pair_check(self, dep: Deployment, loaded: Mapping[str, LoadedModel]) -> None:
        """check_pair on the loaded models, the half hosted elsewhere known by its registry manifest."""
        def model(slot: str, m: ModelSlot) -> LoadedModel | Manifested:
            if slot in loaded:
                return loaded[slot]
            registry = self.pool.registry
            return Manifested(registry.manifest(m.name, registry.resolve(m.name, m.ref)))

        fallback = model(dep.fallback_slot, dep.fallback) if dep.fallback_slot and dep.fallback else None
        check_pair(dep, model(dep.name, dep.model), fallback)

    def _check_loaded(self, dep: Deployment) -> None:
        """A deployment whose models loaded but do not fit together is a configuration error: refused with the
        reason (not ready, /readyz and /v1/models say why), never served."""
        if not all(slot in self.pool.models for slot in self._slots(dep)):
            return  # its load error is already recorded
        try:
            self._pair_check(dep, self.pool.models)
        except IncompatibleFallback as exc:
            log.error("REFUSED: %s", exc)
            for slot in dep.slots:  # never served: its requests get 503 not_ready with this reason in /v1/models
                self.pool.drop(slot)
            self.pool.errors[dep.name] = str(exc)

    @staticmethod
    def _model_info(slot: str, m: LoadedModel) -> None:
        MODEL_INFO.labels(slot, m.manifest.name, m.manifest.version, m.manifest.file(m.manifest.model_file).sha256,
                          m.provider).set(1)
        LOAD_SECONDS.labels(slot, m.manifest.name, m.manifest.version).set(m.load_seconds)
        if m.footprint is not None:
            fp = m.footprint
            for kind, mb in (("resident", fp.resident_mb), ("per_item", fp.per_item_mb),
                             ("reserved", fp.need(m.batch_cap))):
                MODEL_MEMORY.labels(slot, m.manifest.version, kind).set(mb * MB)

    def _memory_gauges(self) -> None:
        budget = self.pool.memory
        for state, mb in (("total", budget.budget_mb), ("reserved", budget.used_mb), ("free", budget.free_mb)):
            MEMORY_BUDGET.labels(state).set(mb * MB)

    def __is_ready__(self) -> bool:
        return self._ready()

    def _ready(self) -> bool:
        """Every 'always' deployment loaded (on-demand ones load on use: the service is ready without them)."""
        return not self.pool.errors and bool(self.pool.models or self.residency.entries)

    # --- on-demand residency (runners/residency.py) ------------------------------------------------------------
    def _sync_residency(self) -> float:
        """Follow the repository's on-demand deployments: their versions resolved (the gateway preprocesses for
        them before they load), forgotten ones dropped. Returns the room kept free for them at startup: the largest
        one's memory_mb, else twice its weights (an estimate: it is measured when it loads)."""
        for dep in self.residency.sync(self.repository):
            for slot in dep.slots:
                if slot not in self.repository.slots:
                    self.pool.drop(slot)
        self.on_demand_versions, room = {}, 0.0
        for dep in self.repository.deployments:
            if dep.residency != "on_demand":
                continue
            weights = 0.0
            for slot, m in self._slots(dep).items():
                try:
                    directory, manifest = self.pool.registry.load_verified(m.name, m.ref)
                except Exception as exc:  # noqa: BLE001 - the deployment is refused with the reason, the rest serves
                    self.residency.refuse(dep.name, f"{type(exc).__name__}: {exc}")
                    continue
                self.on_demand_versions[slot] = manifest.version
                weights += (directory / manifest.model_file).stat().st_size / MB
            room = max(room, dep.memory_mb or 2 * weights)
        return room

    def _load_on_demand(self, dep: Deployment, make_room) -> None:
        """Load, warm and reserve every model of an on-demand deployment (make_room evicts others when needed), check
        the pair, then install them in one step: nothing is routed to a half-loaded deployment."""
        with self._control:
            staged: dict[str, LoadedModel] = {}
            try:
                for slot, m in self._slots(dep).items():
                    staged[slot] = self.pool.load(slot, m.name, m.ref, activate=False,
                                                  max_batch=_reserved_batch(m),
                                                  limit_mb=self._deployment_left(dep, staged), make_room=make_room)
                self._pair_check(dep, staged)
            except Exception:
                for slot in staged:
                    self.pool.drop(slot)
                self._memory_gauges()
                raise
            for slot, model in staged.items():
                self.pool.install(slot, model)
                self._model_info(slot, model)
                MODEL_RESIDENT.labels(slot).set(1)
                LOAD_DURATION.labels(slot).observe(model.load_seconds)
            self._memory_gauges()

    def _deployment_left(self, dep: Deployment, staged: dict[str, LoadedModel]) -> float | None:
        """What the deployment's own memory_mb leaves for its next model (None: no deployment budget)."""
        if not dep.memory_mb:
            return None
        return dep.memory_mb - sum(self.pool.memory.reserved.get(self.pool.memory_key(m.slot, m.manifest.version), 0.0)
                                   for m in staged.values())

    def _unload_deployment(self, dep: Deployment) -> None:
        for slot in self._slots(dep):
            for version in list(self.pool.versions.get(slot, {})):
                MODEL_MEMORY.labels(slot, version, "reserved").set(0)
            self.pool.drop(slot)
            MODEL_RESIDENT.labels(slot).set(0)
        self._memory_gauges()

    def _observe_residency(self, event: str, name: str, **info) -> None:
        dep = self.repository.find(name)
        for slot in self._slots(dep) if dep else ():
            if event == "load":
                MODEL_LOADS.labels(slot, info["trigger"], info["outcome"]).inc()
            elif event == "evict":
                MODEL_EVICTIONS.labels(slot).inc()

    def _not_resident(self, slot: str) -> dict:
        """The answer for items of a slot that is not loaded: an on-demand deployment starts loading ("loading":
        the gateway resends them) or says why it cannot ("model_unavailable"); anything else is a version the
        gateway must re-route ("version_unavailable")."""
        name = slot.removesuffix(FALLBACK_SUFFIX)
        if not self.residency.knows(name) or slot in self.pool.models:
            return {"error": "version_unavailable"}
        entry = self.residency.request(name)
        if entry.state == REFUSED:
            return {"error": "model_unavailable", "reason": entry.error}
        return {"error": "loading", "state": entry.state}

    def _serve(self, items: list[dict]) -> list[dict]:
        """Items are {"slot": a slot key, "x": one tensor (or ragged token ids), "deadline": epoch seconds or None,
        "rid": request id, "version": a loaded version or None for the active one}. Expired items are answered
        {"error": "deadline_exceeded"} without compute; items for a slot or version that is not loaded get
        {"error": "version_unavailable"}; the rest share one ONNX Runtime call per (slot, version)."""
        now = time.time()
        results: list[dict] = [{"error": "deadline_exceeded"} for _ in items]
        groups: dict[tuple[str, str | None], list[int]] = {}
        for i, it in enumerate(items):
            if not it.get("deadline") or it["deadline"] > now:
                groups.setdefault((it["slot"], it.get("version")), []).append(i)
        expired: dict[str, int] = {}
        for it in items:
            if it.get("deadline") and it["deadline"] <= now:
                expired[it["slot"]] = expired.get(it["slot"], 0) + 1
        for slot, n in expired.items():
            EXPIRED.labels(slot).inc(n)
        for (slot, version), idx in groups.items():
            try:
                if slot not in self.pool.models:  # an on-demand deployment is routed only once all of it is loaded
                    raise KeyError(slot)
                model = self.pool.get(slot, version)
            except KeyError:
                answer = self._not_resident(slot)
                for i in idx:
                    results[i] = answer
                continue
            self.residency.touch(slot.removesuffix(FALLBACK_SUFFIX))
            for i, out in zip(idx, self._run(slot, model, [items[i]["x"] for i in idx])):
                results[i] = out
            batch_log.info(json.dumps({"event": "batch", "slot": slot, "version": model.manifest.version,
                                       "size": len(idx), "expired": expired.get(slot, 0),
                                       "infer_ms": round(results[idx[0]]["infer_ms"], 3),
                                       "request_ids": sorted({items[i].get("rid", "") for i in idx})}))
        observe_rss("runner")
        return results

    def _per_item(self, slot: str, model: LoadedModel) -> bool:
        cfg = self.repository.slots.get(slot)
        return fixed_batch(model.manifest) or bool(cfg and cfg.batching.per_item)

    def _run(self, slot: str, model: LoadedModel, xs: list[np.ndarray]) -> list[dict]:
        """One ONNX Runtime call for the batch (or one per item for per_item slots and fixed-batch graphs); each
        item gets its row."""
        n = len(xs)
        started = time.perf_counter()
        inject_faults(slot, settings.runner.faults)
        cap = max(model.batch_cap, 1)  # the memory reservation's batch (runners/memory.py): never run more at once
        out: list[Any] | np.ndarray  # a row per item
        per_item = self._per_item(slot, model)
        largest = 1
        if per_item:
            out = [self.pool.run_model(model, self._feeds(model, [x]))[0][0] for x in xs]
        elif model.ragged:  # the family's items are ragged: one call per length bucket, rows back in order
            out = [None] * n
            lengths = [len(x) for x in xs]
            max_tokens = cap * model.item_len  # the reservation covers cap items of the longest sequence
            split = False
            for bucket in length_buckets(xs, settings.runner.bucket_call_cost_tokens):
                groups = (token_groups(bucket, lengths, max_tokens) if max_tokens else
                          [bucket[k: k + cap] for k in range(0, len(bucket), cap)])
                split = split or len(groups) > 1
                for group in groups:
                    largest = max(largest, len(group))
                    rows = self.pool.run_model(model, self._feeds(model, [xs[i] for i in group]))[0]
                    for i, row in zip(group, rows):
                        out[i] = row
            if split:
                MEMORY_SPLITS.labels(slot).inc()
        else:
            if n > cap:
                MEMORY_SPLITS.labels(slot).inc()
            largest = min(n, cap)
            out = [row for k in range(0, n, cap)
                   for row in self.pool.run_model(model, self._feeds(model, xs[k: k + cap]))[0]]
        if largest > model.peak_batch and model.footprint is not None:  # the memory it has really needed
            model.peak_batch = largest
            MODEL_MEMORY.labels(slot, model.manifest.version, "peak").set(model.footprint.need(largest) * MB)
        if slot in settings.runner.faults.nan_output:
            out = np.full_like(np.asarray(out, dtype=np.float32), np.nan)
        infer_ms = (time.perf_counter() - started) * 1000
        BATCH_SIZE.labels(slot, model.manifest.name).observe(n)
        BATCH_SECONDS.labels(slot, model.manifest.name).observe(infer_ms / 1000)
        meta = {"batch": n, "infer_ms": infer_ms, "model": model.manifest.name, "version": model.manifest.version}
        return [{"y": out[i], **meta} for i in range(n)]

    @staticmethod
    def _feeds(model: LoadedModel, xs: list[np.ndarray]) -> dict[str, np.ndarray]:
        """The model family's feeds (families/<family>/runtime.py): padding, tensorising, stacking."""
        return families.runtime(model.manifest.task).feeds(model.manifest, model.input_names, xs)

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
            if self._merger is None:  # made in the serving event loop
                self._merger = CallMerger(self._serve, max_gather_s=settings.runner.merge_gather_ms / 1000)
            return _answer(await self._merger.submit(items), ctx)

    @bentoml.api
    def status(self) -> dict:
        """Loaded models, their versions and providers, load errors (the reason behind not-ready), and every
        configured slot's residency (state: resident, unloaded, loading, refused)."""
        out = self.pool.describe()
        on_demand = self.residency.describe()
        slots = {}
        for dep in self.repository.deployments:
            entry = on_demand.get(dep.name, {})
            for slot in self._slots(dep):
                state = RESIDENT if slot in self.pool.models else entry.get("state") or (
                    REFUSED if dep.name in self.pool.errors or slot in self.pool.errors else UNLOADED)
                slots[slot] = {"state": state, "residency": dep.residency, "last_used_s": entry.get("last_used_s")}
        refused = {name: e["error"] for name, e in on_demand.items() if e["state"] == REFUSED and e["error"]}
        return {**out, "ready": self._ready(), "errors": {**out["errors"], **refused}, "slots": slots}

    @bentoml.api
    def load_deployment(self, name: str) -> dict:
        """Explicit model control (Triton's load): start loading an on-demand deployment now; returns its state
        (poll `status` for 'resident' or 'refused')."""
        if not self.residency.knows(name):
            return {"error": f"{name!r} is not an on-demand deployment"}
        entry = self.residency.request(name, trigger="admin")
        return {"deployment": name, "state": entry.state, "reason": entry.error}

    @bentoml.api
    def unload_deployment(self, name: str) -> dict:
        """Explicit model control (Triton's unload): evict a resident on-demand deployment; its next request (or
        load_deployment) loads it again."""
        if not self.residency.knows(name):
            return {"error": f"{name!r} is not an on-demand deployment"}
        with self._control:
            evicted = self.residency.evict(name, reason="admin")
        return {"deployment": name, "evicted": evicted, "state": self.residency.state(name)}

    # --- rollout control (called by the gateway's admin API) ---------------------------------------------------
    @bentoml.api
    def routing(self) -> dict:
        """{"slots": per slot the active version, every loaded version, the canary (version, weight) and the shadow;
        "repository": the deployments served now}."""
        return self._routing()

    def _routing(self) -> dict:
        # a plain method: API methods must not call each other (BentoML serialises sync APIs on one thread)
        slots = {slot: self._slot_routing(slot) for slot in list(self.pool.models)}
        for slot, version in self.on_demand_versions.items():  # not loaded yet: routed, loaded on first use
            slots.setdefault(slot, {"active": version, "loaded": [], "resident": False, "batch_cap": None,
                                    "canary": None, "shadow": None})
        return {"slots": slots, "repository": self.repository.model_dump(mode="json")}

    def _slot_routing(self, slot: str) -> dict:
        m = self.pool.models[slot]
        return {"active": m.manifest.version, "loaded": sorted(self.pool.versions.get(slot, {})), "resident": True,
                "batch_cap": None if self._per_item(slot, m) else m.batch_cap,
                **self.rollout.get(slot, {"canary": None, "shadow": None})}

    @bentoml.api
    def stage(self, slot: str, ref: str) -> dict:
        """Resolve, pull/verify, load and warm a version next to the active one (not serving yet). A failure (unknown
        version, tampered file, broken graph) is returned as {"error": ...}; the active version is untouched."""
        try:
            name = self.repository.slots[slot].name
            with self._control:
                model = self.pool.load(slot, name, ref, activate=False,
                                       max_batch=self.repository.max_batch(slot))
        except Exception as exc:  # noqa: BLE001 - reported to the caller, logged here
            log.error("staging %s:%s refused: %s: %s", slot, ref, type(exc).__name__, exc)
            return {"slot": slot, "error": f"{type(exc).__name__}: {exc}"}
        return {"slot": slot, "version": model.manifest.version, "load_seconds": round(model.load_seconds, 3)}

    @bentoml.api
    def activate(self, slot: str, version: str, retire_after_s: float = 10.0) -> dict:
        """Atomically switch the slot to a loaded version; the previous one is unloaded after `retire_after_s` (in
        flight batches finish on it; gateways refresh their routing well within that time)."""
        with self._control:
            previous = self.pool.activate(slot, version)
            self._model_info(slot, self.pool.get(slot))
            self._memory_gauges()
            roles = self.rollout.get(slot, {})
            if roles.get("canary") and roles["canary"]["version"] == version:
                roles["canary"] = None
        if previous and previous != version:
            threading.Timer(retire_after_s, self._retire, args=(slot, previous)).start()
        return {"slot": slot, "active": version, "previous": previous}

    @bentoml.api
    def set_canary(self, slot: str, version: str | None = None, weight: float = 0.0) -> dict:
        """Send `weight` of the slot's traffic (sticky per request key) to a loaded candidate; None clears it."""
        with self._control:
            if version is not None:
                self.pool.get(slot, version)  # KeyError -> 500 -> the gateway reports it
            self.rollout.setdefault(slot, {"canary": None, "shadow": None})["canary"] = (
                {"version": version, "weight": float(weight)} if version else None)
        return self._slot_routing(slot)

    @bentoml.api
    def set_shadow(self, slot: str, version: str | None = None) -> dict:
        """Mirror the slot's traffic to a loaded candidate whose answers are compared, never returned."""
        with self._control:
            if version is not None:
                self.pool.get(slot, version)
            self.rollout.setdefault(slot, {"canary": None, "shadow": None})["shadow"] = version
        return self._slot_routing(slot)

    # --- model repository control (called by the gateway's admin API) ------------------------------------------
    @bentoml.api
    def add_deployment(self, deployment: dict, retire_after_s: float = 10.0) -> dict:
        """Add a deployment or replace one of the same name: stage (pull, verify), load and warm every model next to
        what serves, check the pair (family, labels), then swap the repository in one assignment and persist it.
        Requests keep going to the old models until the swap; a refusal leaves everything as it was."""
        try:
            dep = Deployment.model_validate(deployment)
            repo = self.repository.with_deployment(dep)
        except ValueError as exc:
            return {"error": f"invalid deployment: {exc}"[:2000]}
        old = self.repository.find(dep.name)
        if dep.residency == "on_demand":
            return self._add_on_demand(dep, repo, old)
        staged: dict[str, LoadedModel] = {}
        try:
            with self._control:
                for slot, m in self._slots(dep).items():  # under a key of its own: nothing serving can reach it yet
                    staged[slot] = self.pool.load(slot + STAGING, m.name, m.ref, activate=False,
                                                  max_batch=_reserved_batch(m),
                                                  limit_mb=self._deployment_left(dep, staged))
                self._pair_check(dep, staged)
        except Exception as exc:  # noqa: BLE001 - refused with the reason, nothing changes
            with self._control:
                for slot in dep.slots:
                    self.pool.drop(slot + STAGING)
            log.error("deployment %s refused: %s: %s", dep.name, type(exc).__name__, exc)
            return {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        with self._control:
            previous = {slot: self.pool.models[slot].manifest.version for slot in staged if slot in self.pool.models}
            for slot, model in staged.items():
                self.pool.install(slot, model)
                self.pool.drop(slot + STAGING)
                self._model_info(slot, model)
            self._memory_gauges()
            self.repository = repo
            save_state(repo, settings.deployments_state_file)
            self._sync_residency()
        for slot in staged:
            MODEL_RESIDENT.labels(slot).set(1)
            MODEL_LOADS.labels(slot, "admin", "ok").inc()
        gone = set(old.slots) - set(dep.slots) if old else set()
        for slot, version in previous.items():
            if version != staged[slot].manifest.version:
                threading.Timer(retire_after_s, self._retire, args=(slot, version)).start()
        for slot in gone:
            threading.Timer(retire_after_s, self._drop_slot, args=(slot,)).start()
        log.info("deployment %s %s: %s", dep.name, "updated" if old else "added",
                 {s: m.manifest.version for s, m in staged.items()})
        return {"deployment": dep.name, "action": "updated" if old else "added",
                "versions": {s: m.manifest.version for s, m in staged.items()},
                "load_seconds": round(sum(m.load_seconds for m in staged.values()), 3)}

    def _add_on_demand(self, dep: Deployment, repo: ModelRepository, old: Deployment | None) -> dict:
        """An on-demand deployment is verified (its files, in the registry) but not loaded: its first request (or
        load_deployment) loads it. A previous deployment of the name stops serving at once (in-flight batches finish
        on the models they hold)."""
        try:
            versions = {slot: self.pool.registry.load_verified(m.name, m.ref)[1].version
                        for slot, m in self._slots(dep).items()}
        except Exception as exc:  # noqa: BLE001 - refused with the reason, nothing changes
            log.error("deployment %s refused: %s: %s", dep.name, type(exc).__name__, exc)
            return {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        with self._control:
            if old is not None and old != dep:
                for slot in old.slots:
                    self.pool.drop(slot)
                    MODEL_RESIDENT.labels(slot).set(0)
            self.repository = repo
            save_state(repo, settings.deployments_state_file)
            self._sync_residency()
            self._memory_gauges()
        log.info("deployment %s %s (on demand): %s", dep.name, "updated" if old else "added", versions)
        return {"deployment": dep.name, "action": "updated" if old else "added", "versions": versions,
                "residency": "on_demand", "load_seconds": 0.0}

    @bentoml.api
    def remove_deployment(self, name: str, retire_after_s: float = 10.0) -> dict:
        """Stop routing to a deployment at once (persisted); its models are unloaded after `retire_after_s`, when
        the requests already on their way have finished."""
        try:
            repo = self.repository.without(name)
        except (KeyError, ValueError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        dep = self.repository.find(name)
        assert dep is not None
        with self._control:
            self.repository = repo
            save_state(repo, settings.deployments_state_file)
            self._sync_residency()
        for slot in dep.slots:
            threading.Timer(retire_after_s, self._drop_slot, args=(slot,)).start()
        log.info("deployment %s removed", name)
        return {"deployment": name, "action": "removed", "slots": sorted(dep.slots)}

    def _drop_slot(self, slot: str) -> None:
        with self._control:
            if slot not in self.repository.slots:  # not re-added meanwhile
                self.pool.drop(slot)
                self.rollout.pop(slot, None)
                log.info("unloaded slot %s", slot)

    def _retire(self, slot: str, version: str) -> None:
        with self._control:
            if slot not in self.pool.models:
                return
            roles = self.rollout.get(slot, {})
            in_use = {self.pool.models[slot].manifest.version, roles.get("shadow"),
                      (roles.get("canary") or {}).get("version")}
            if version not in in_use:
                self.pool.unload(slot, version)
                log.info("retired %s:%s", slot, version)


def fallback_host() -> type:
    """ModelRunner's code hosting only the deployments' fallbacks, built in each API worker when
    runner.fallbacks='gateway' (services/gateway.py, through runners/local.LocalRunner): a fallback keeps answering
    when the runner tier's process dies."""
    inner = cast(Any, ModelRunner).inner  # @bentoml.service made ModelRunner a Service; .inner is the class
    return type("FallbackHost", (inner,), {"hosts": "fallback"})
