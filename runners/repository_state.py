"""The model repository as the runner serves it: which deployments, slots and versions are loaded and routed, and
every change to that set (add, replace, remove; stage, activate, canary, shadow, retire).

Why a module of its own: the runner is the source of truth for the model repository (configs/deployments.py). A change
is staged, verified, loaded, warmed and pair-checked next to what serves, then swapped in under the runner's control
lock and persisted, so a restart serves the same set. The compute host (runners/compute.py) only reads what this holds;
on-demand residency (runners/on_demand.py) follows every swap through `on_change`.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from triserve.configs.deployments import Deployment, ModelRepository, save_state
from triserve.configs.settings import ModelSlot, get_settings
from triserve.models.manifest import Manifest
from triserve.runners.metrics import LOAD_DURATION, MODEL_LOADS, MODEL_RESIDENT, memory_gauges, model_info
from triserve.runners.pool import LoadedModel, ModelPool, fixed_batch

log = logging.getLogger("triserve.runner")
settings = get_settings()

MAX_PROMOTIONS = 20  # promotions remembered per slot (rollback steps back through them)
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
    if fallback is not None and answer_schema(fallback.manifest) != answer_schema(primary.manifest):
        raise IncompatibleFallback(
            f"deployment {dep.name!r}: fallback {fallback.manifest.name} answers with another schema than primary "
            f"{primary.manifest.name} ({answer_schema(fallback.manifest)} vs {answer_schema(primary.manifest)}): a "
            f"fallback must answer in the primary's terms")


def answer_schema(manifest: Manifest) -> object:
    """What a model's answers mean beyond its labels, when its family's preprocess record says (an `answer_schema()`
    method: the pose family's keypoint names, order and skeleton); None otherwise."""
    method = getattr(manifest.preprocess, "answer_schema", None)
    return method() if callable(method) else None


def reserved_batch(m: ModelSlot) -> int:
    """The batch a slot's memory is reserved (and its model warmed) for: the most items one model call runs, its
    compute batch when set, else its max batch size; 1 when it runs item by item (per_item)."""
    if m.batching.per_item:
        return 1
    return min(m.batching.max_batch_size, m.batching.compute_batch or m.batching.max_batch_size)


class RepositoryState:
    """The deployments one runner process serves (`repository`), the models the pool holds for them and each slot's
    rollout roles. Every change runs under `control`, the runner's one control lock (shared with on-demand loads)."""

    def __init__(self, repository: ModelRepository, pool: ModelPool, control: threading.Lock, hosts: str) -> None:
        self.repository = repository
        self.pool = pool
        self.control = control
        self.hosts = hosts  # 'primary' or 'fallback' (ModelRunner.hosts)
        self.rollout: dict[str, dict] = {}  # slot -> {"canary": {"version", "weight"} | None, "shadow": version}
        # slot -> the promotions not rolled back yet, oldest first: what served before each one ("from"), what it
        # made active ("to"), the alias it moved and where that alias pointed before ("alias", "alias_from")
        self.promotions: dict[str, list[dict]] = {}
        # slot -> requests answered per version since its routing last changed (promote, canary): the measured split
        self.split: dict[str, dict] = {}
        self._split_lock = threading.Lock()
        # adds run one at a time, outside the runner's API thread (ModelRunner.add_deployment): two adds of one name
        # would stage under the same key
        self._adding = threading.Lock()
        # called under `control` after every swap of the repository (the runner sets it: on-demand residency follows)
        self.on_change: Callable[[], object] = lambda: None

    def load_startup(self, keep_free_mb: float) -> None:
        """Load, warm and pair-check every 'always' deployment (keep_free_mb: the room kept for on-demand ones), then
        report every slot's residency and load in the metrics."""
        always = [d for d in self.repository.deployments if d.residency == "always"]
        self.pool.load_all({slot: (m.name, m.ref, reserved_batch(m)) for d in always
                            for slot, m in self.slots(d).items()},
                           budgets={d.name: (list(self.slots(d)), d.memory_mb) for d in always if d.memory_mb},
                           keep_free_mb=keep_free_mb)
        for dep in always:
            self.check_loaded(dep)
        for dep in self.repository.deployments:
            for slot in self.slots(dep):
                loaded = self.pool.models.get(slot)
                MODEL_RESIDENT.labels(slot).set(loaded is not None)
                if loaded is not None:
                    model_info(slot, loaded)
                    MODEL_LOADS.labels(slot, "startup", "ok").inc()
                    LOAD_DURATION.labels(slot).observe(loaded.load_seconds)
                elif dep.residency == "always":
                    MODEL_LOADS.labels(slot, "startup", "refused").inc()
        memory_gauges(self.pool.memory)

    def slots(self, dep: Deployment) -> dict[str, ModelSlot]:
        """The slots of a deployment this process hosts (see ModelRunner.hosts)."""
        if settings.runner.fallbacks == "runner":
            return dep.slots
        return {slot: m for slot, m in dep.slots.items() if (slot == dep.name) == (self.hosts == "primary")}

    def pair_check(self, dep: Deployment, loaded: Mapping[str, LoadedModel]) -> None:
        """check_pair on the loaded models, the half hosted elsewhere known by its registry manifest."""
        def model(slot: str, m: ModelSlot) -> LoadedModel | Manifested:
            if slot in loaded:
                return loaded[slot]
            registry = self.pool.registry
            return Manifested(registry.manifest(m.name, registry.resolve(m.name, m.ref)))

        fallback = model(dep.fallback_slot, dep.fallback) if dep.fallback_slot and dep.fallback else None
        check_pair(dep, model(dep.name, dep.model), fallback)

    def check_loaded(self, dep: Deployment) -> None:
        """A deployment whose models loaded but do not fit together is a configuration error: refused with the
        reason (not ready, /readyz and /v1/models say why), never served."""
        if not all(slot in self.pool.models for slot in self.slots(dep)):
            return  # its load error is already recorded
        try:
            self.pair_check(dep, self.pool.models)
        except IncompatibleFallback as exc:
            log.error("REFUSED: %s", exc)
            for slot in dep.slots:  # never served: its requests get 503 not_ready with this reason in /v1/models
                self.pool.drop(slot)
            self.pool.errors[dep.name] = str(exc)

    def deployment_left(self, dep: Deployment, staged: dict[str, LoadedModel]) -> float | None:
        """What the deployment's own memory_mb leaves for its next model (None: no deployment budget)."""
        if not dep.memory_mb:
            return None
        return dep.memory_mb - sum(self.pool.memory.reserved.get(self.pool.memory_key(m.slot, m.manifest.version), 0.0)
                                   for m in staged.values())

    def per_item(self, slot: str, model: LoadedModel) -> bool:
        """The slot runs item by item: a fixed-batch graph, or configured so (batching.per_item)."""
        cfg = self.repository.slots.get(slot)
        return fixed_batch(model.manifest) or bool(cfg and cfg.batching.per_item)

    def compute_batch(self, slot: str) -> int | None:
        """The configured chunk one model call runs (batching.compute_batch), None when unset."""
        cfg = self.repository.slots.get(slot)
        return cfg.batching.compute_batch if cfg else None

    def memory_batch_cap(self, slot: str, model: LoadedModel) -> int | None:
        """The most items one request may bring (the gateway refuses more, never splitting silently): the memory
        reservation's batch, unless the model runs item by item or in configured chunks its reservation covers
        (a request of any size is then computed chunk by chunk, as configured)."""
        chunk = self.compute_batch(slot)
        if self.per_item(slot, model) or (chunk is not None and model.batch_cap >= chunk):
            return None
        return model.batch_cap

    def _swap(self, repo: ModelRepository) -> None:
        """Serve `repo` from now on and persist it (the caller holds `control`)."""
        self.repository = repo
        save_state(repo, settings.deployments_state_file)
        self.on_change()

    # --- rollout: versions of a slot ---------------------------------------------------------------------------
    def slot_routing(self, slot: str) -> dict:
        m = self.pool.models[slot]
        roles = self.rollout.get(slot, {"canary": None, "shadow": None})
        return {"active": m.manifest.version, "loaded": sorted(self.pool.versions.get(slot, {})), "resident": True,
                "batch_cap": self.memory_batch_cap(slot, m), "compute_batch": 1 if self.per_item(slot, m) else
                min(m.batch_cap, self.compute_batch(slot) or m.batch_cap), **roles,
                "promotions": list(self.promotions.get(slot, ())), "split": self.measured_split(slot, roles)}

    # --- the measured split: requests per version, since the slot's routing last changed ------------------------
    def count(self, slot: str, version: str, requests: int) -> None:
        """`requests` requests of `slot` answered by `version` (runners/compute.py, per model call)."""
        with self._split_lock:
            entry = self.split.get(slot)
            if entry is None:
                entry = self.split[slot] = {"since": time.time(), "requests": {}}
            entry["requests"][version] = entry["requests"].get(version, 0) + requests

    def reset_split(self, slot: str) -> None:
        with self._split_lock:
            self.split[slot] = {"since": time.time(), "requests": {}}

    def measured_split(self, slot: str, roles: dict) -> dict:
        """{"since", "requests": {version: n}, "total", "canary_share"}: what the slot's versions actually answered
        since its last promote or canary change (canary_share: None without a canary or any request)."""
        with self._split_lock:
            entry = self.split.get(slot) or {"since": None, "requests": {}}
            requests = dict(entry["requests"])
        total = sum(requests.values())
        canary = (roles.get("canary") or {}).get("version")
        share = round(requests.get(canary, 0) / total, 4) if canary and total else None
        return {"since": entry["since"], "requests": requests, "total": total, "canary_share": share}

    def fetch(self, name: str, ref: str) -> None:
        """Pull and verify name:ref into the serving cache before the control lock is taken: a slow registry then
        holds back this change only, not the other changes of what is loaded (a plain local registry has nothing to
        pull)."""
        ensure = getattr(self.pool.registry, "ensure", None)
        if ensure is not None:
            ensure(name, ref)

    def stage(self, slot: str, ref: str) -> dict:
        """Resolve, pull/verify, load and warm a version next to the active one (not serving yet). A failure (unknown
        version, tampered file, broken graph) is returned as {"error": ...}; the active version is untouched."""
        try:
            name = self.repository.slots[slot].name
            self.fetch(name, ref)
            with self.control:
                model = self.pool.load(slot, name, ref, activate=False,
                                       max_batch=reserved_batch(self.repository.slots[slot]))
        except Exception as exc:  # noqa: BLE001 - reported to the caller, logged here
            log.error("staging %s:%s refused: %s: %s", slot, ref, type(exc).__name__, exc)
            return {"slot": slot, "error": f"{type(exc).__name__}: {exc}"}
        return {"slot": slot, "version": model.manifest.version, "load_seconds": round(model.load_seconds, 3)}

    def activate(self, slot: str, version: str, retire_after_s: float, record: dict | None = None) -> dict:
        """Atomically switch the slot to a loaded version; the previous one is unloaded after `retire_after_s` (in
        flight batches finish on it; gateways refresh their routing well within that time). `record`: an admin
        promote ({"kind": "promote", "alias", "alias_from", "by"}) is remembered with what served before it, so that
        a rollback returns there; {"kind": "rollback"} takes the promotion it undoes off that list."""
        with self.control:
            previous = self.pool.activate(slot, version)
            model_info(slot, self.pool.get(slot))
            memory_gauges(self.pool.memory)
            roles = self.rollout.get(slot, {})
            if roles.get("canary") and roles["canary"]["version"] == version:
                roles["canary"] = None
            if record is not None and previous != version:
                self._record(slot, previous, version, record)
        if previous != version:
            self.reset_split(slot)
        if previous and previous != version:
            threading.Timer(retire_after_s, self.retire, args=(slot, previous)).start()
        return {"slot": slot, "active": version, "previous": previous}

    def _record(self, slot: str, previous: str | None, version: str, record: dict) -> None:
        """Keep (or, for a rollback, drop) a promotion of the slot; the caller holds `control`."""
        stack = self.promotions.setdefault(slot, [])
        if record.get("kind") == "rollback":
            if stack and stack[-1]["to"] == previous and stack[-1]["from"] == version:
                stack.pop()
            return
        stack.append({"from": previous, "to": version, "alias": record.get("alias"),
                      "alias_from": record.get("alias_from"), "by": record.get("by"),
                      "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        del stack[:-MAX_PROMOTIONS]

    def set_canary(self, slot: str, version: str | None, weight: float) -> dict:
        """Send `weight` of the slot's traffic (sticky per request key) to a loaded candidate; None clears it."""
        with self.control:
            if version is not None:
                self.pool.get(slot, version)  # KeyError -> 500 -> the gateway reports it
            self.rollout.setdefault(slot, {"canary": None, "shadow": None})["canary"] = (
                {"version": version, "weight": float(weight)} if version else None)
        self.reset_split(slot)
        return self.slot_routing(slot)

    def set_shadow(self, slot: str, version: str | None) -> dict:
        """Mirror the slot's traffic to a loaded candidate whose answers are compared, never returned."""
        with self.control:
            if version is not None:
                self.pool.get(slot, version)
            self.rollout.setdefault(slot, {"canary": None, "shadow": None})["shadow"] = version
        return self.slot_routing(slot)

    def retire(self, slot: str, version: str) -> None:
        with self.control:
            if slot not in self.pool.models:
                return
            roles = self.rollout.get(slot, {})
            in_use = {self.pool.models[slot].manifest.version, roles.get("shadow"),
                      (roles.get("canary") or {}).get("version")}
            if version not in in_use:
                self.pool.unload(slot, version)
                log.info("retired %s:%s", slot, version)

    # --- deployments: add, replace, remove ---------------------------------------------------------------------
    def add(self, deployment: dict, retire_after_s: float) -> dict:
        """Add a deployment or replace one of the same name: stage (pull, verify), load and warm every model next to
        what serves, check the pair (family, labels), then swap the repository in one assignment and persist it.
        Requests keep going to the old models until the swap; a refusal leaves everything as it was."""
        with self._adding:
            return self._add(deployment, retire_after_s)

    def _add(self, deployment: dict, retire_after_s: float) -> dict:
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
            for m in self.slots(dep).values():
                self.fetch(m.name, m.ref)
            with self.control:
                for slot, m in self.slots(dep).items():  # under a key of its own: nothing serving can reach it yet
                    staged[slot] = self.pool.load(slot + STAGING, m.name, m.ref, activate=False,
                                                  max_batch=reserved_batch(m),
                                                  limit_mb=self.deployment_left(dep, staged))
                self.pair_check(dep, staged)
        except Exception as exc:  # noqa: BLE001 - refused with the reason, nothing changes
            with self.control:
                for slot in dep.slots:
                    self.pool.drop(slot + STAGING)
            log.error("deployment %s refused: %s: %s", dep.name, type(exc).__name__, exc)
            return {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        with self.control:
            # the repository as it is now (a remove may have run while this one loaded), with the deployment in it
            old = self.repository.find(dep.name)
            repo = self.repository.with_deployment(dep)
            previous = {slot: self.pool.models[slot].manifest.version for slot in staged if slot in self.pool.models}
            for slot, model in staged.items():
                self.pool.install(slot, model)
                self.pool.drop(slot + STAGING)
                model_info(slot, model)
            memory_gauges(self.pool.memory)
            self._swap(repo)
            for slot in staged:  # a replaced deployment starts a new history: rollback never crosses a replacement
                self.promotions.pop(slot, None)
        for slot in staged:
            self.reset_split(slot)
            MODEL_RESIDENT.labels(slot).set(1)
            MODEL_LOADS.labels(slot, "admin", "ok").inc()
            LOAD_DURATION.labels(slot).observe(staged[slot].load_seconds)
        gone = set(old.slots) - set(dep.slots) if old else set()
        for slot, version in previous.items():
            if version != staged[slot].manifest.version:
                threading.Timer(retire_after_s, self.retire, args=(slot, version)).start()
        for slot in gone:
            threading.Timer(retire_after_s, self.drop_slot, args=(slot,)).start()
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
            for m in self.slots(dep).values():
                self.fetch(m.name, m.ref)  # asked again even if it failed before: the registry may be back
            versions = {slot: self.pool.registry.load_verified(m.name, m.ref)[1].version
                        for slot, m in self.slots(dep).items()}
        except Exception as exc:  # noqa: BLE001 - refused with the reason, nothing changes
            log.error("deployment %s refused: %s: %s", dep.name, type(exc).__name__, exc)
            return {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        with self.control:
            old = self.repository.find(dep.name)  # as it is now (see _add)
            repo = self.repository.with_deployment(dep)
            if old is not None and old != dep:
                for slot in old.slots:
                    self.pool.drop(slot)
                    self.promotions.pop(slot, None)
                    MODEL_RESIDENT.labels(slot).set(0)
            self._swap(repo)
            memory_gauges(self.pool.memory)
        log.info("deployment %s %s (on demand): %s", dep.name, "updated" if old else "added", versions)
        return {"deployment": dep.name, "action": "updated" if old else "added", "versions": versions,
                "residency": "on_demand", "load_seconds": 0.0}

    def remove(self, name: str, retire_after_s: float) -> dict:
        """Stop routing to a deployment at once (persisted); its models are unloaded after `retire_after_s`, when
        the requests already on their way have finished."""
        try:
            repo = self.repository.without(name)
        except (KeyError, ValueError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        dep = self.repository.find(name)
        assert dep is not None
        with self.control:
            self._swap(repo)
        for slot in dep.slots:
            threading.Timer(retire_after_s, self.drop_slot, args=(slot,)).start()
        log.info("deployment %s removed", name)
        return {"deployment": name, "action": "removed", "slots": sorted(dep.slots)}

    def drop_slot(self, slot: str) -> None:
        with self.control:
            if slot not in self.repository.slots:  # not re-added meanwhile
                self.pool.drop(slot)
                self.rollout.pop(slot, None)
                self.promotions.pop(slot, None)
                self.split.pop(slot, None)
                log.info("unloaded slot %s", slot)
