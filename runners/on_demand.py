"""On-demand residency in the runner: what loading and unloading a deployment does to the pool, the served repository
and the metrics.

Why next to runners/residency.py and not in it: Residency is the policy (states, least-recently-used eviction, one
loader thread) and knows no pool; this is the runner's side of it: the loader and unloader Residency calls (under the
runner's control lock, like every other change of what is loaded), the versions the gateway routes to before they
load, each slot's residency in `status`, and Triton-style explicit load/unload.
"""
from __future__ import annotations

import threading

from triserve.configs.deployments import Deployment
from triserve.runners.memory import MB
from triserve.runners.metrics import (
    LOAD_DURATION,
    MODEL_EVICTIONS,
    MODEL_LOADS,
    MODEL_MEMORY,
    MODEL_RESIDENT,
    memory_gauges,
    model_info,
)
from triserve.runners.pool import LoadedModel
from triserve.runners.repository_state import RepositoryState, reserved_batch
from triserve.runners.residency import REFUSED, RESIDENT, UNLOADED, Residency


class OnDemand:
    """The on-demand deployments of the served repository (`state`): their Residency, and the slot -> version each
    will load (`versions`). `sync` follows the repository (RepositoryState.on_change)."""

    def __init__(self, state: RepositoryState, control: threading.Lock) -> None:
        self.state = state
        self.pool = state.pool
        self._control = control
        self.residency = Residency(self.load, self.unload, lambda: self.pool.memory.free_mb, self.observe)
        self.versions: dict[str, str] = {}  # slot of an on-demand deployment -> the version it will load

    def sync(self) -> float:
        """Follow the repository's on-demand deployments: their versions resolved (the gateway preprocesses for
        them before they load), forgotten ones dropped. Returns the room kept free for them at startup: the largest
        one's memory_mb, else twice its weights (an estimate: it is measured when it loads)."""
        for dep in self.residency.sync(self.state.repository):
            for slot in dep.slots:
                if slot not in self.state.repository.slots:
                    self.pool.drop(slot)
        self.versions, room = {}, 0.0
        for dep in self.state.repository.deployments:
            if dep.residency != "on_demand":
                continue
            weights = 0.0
            for slot, m in self.state.slots(dep).items():
                try:
                    directory, manifest = self.pool.registry.load_verified(m.name, m.ref)
                except Exception as exc:  # noqa: BLE001 - the deployment is refused with the reason, the rest serves
                    self.residency.refuse(dep.name, f"{type(exc).__name__}: {exc}")
                    continue
                self.versions[slot] = manifest.version
                weights += (directory / manifest.model_file).stat().st_size / MB
            room = max(room, dep.memory_mb or 2 * weights)
        return room

    def load(self, dep: Deployment, make_room) -> None:
        """Load, warm and reserve every model of an on-demand deployment (make_room evicts others when needed), check
        the pair, then install them in one step: nothing is routed to a half-loaded deployment."""
        with self._control:
            staged: dict[str, LoadedModel] = {}
            try:
                for slot, m in self.state.slots(dep).items():
                    staged[slot] = self.pool.load(slot, m.name, m.ref, activate=False,
                                                  max_batch=reserved_batch(m),
                                                  limit_mb=self.state.deployment_left(dep, staged),
                                                  make_room=make_room)
                self.state.pair_check(dep, staged)
            except Exception:
                for slot in staged:
                    self.pool.drop(slot)
                memory_gauges(self.pool.memory)
                raise
            for slot, model in staged.items():
                self.pool.install(slot, model)
                model_info(slot, model)
                MODEL_RESIDENT.labels(slot).set(1)
                LOAD_DURATION.labels(slot).observe(model.load_seconds)
            memory_gauges(self.pool.memory)

    def unload(self, dep: Deployment) -> None:
        for slot in self.state.slots(dep):
            for version in list(self.pool.versions.get(slot, {})):
                MODEL_MEMORY.labels(slot, version, "reserved").set(0)
            self.pool.drop(slot)
            MODEL_RESIDENT.labels(slot).set(0)
        memory_gauges(self.pool.memory)

    def observe(self, event: str, name: str, **info) -> None:
        dep = self.state.repository.find(name)
        for slot in self.state.slots(dep) if dep else ():
            if event == "load":
                MODEL_LOADS.labels(slot, info["trigger"], info["outcome"]).inc()
            elif event == "evict":
                MODEL_EVICTIONS.labels(slot).inc()

    def slot_states(self) -> tuple[dict[str, dict], dict[str, str]]:
        """Every configured slot's residency (state: resident, unloaded, loading, refused), and why each refused
        on-demand deployment is refused."""
        on_demand = self.residency.describe()
        slots = {}
        for dep in self.state.repository.deployments:
            entry = on_demand.get(dep.name, {})
            for slot in self.state.slots(dep):
                state = RESIDENT if slot in self.pool.models else entry.get("state") or (
                    REFUSED if dep.name in self.pool.errors or slot in self.pool.errors else UNLOADED)
                slots[slot] = {"state": state, "residency": dep.residency, "last_used_s": entry.get("last_used_s")}
        refused = {name: e["error"] for name, e in on_demand.items() if e["state"] == REFUSED and e["error"]}
        return slots, refused

    def load_deployment(self, name: str) -> dict:
        """Explicit model control (Triton's load): start loading an on-demand deployment now; returns its state."""
        if not self.residency.knows(name):
            return {"error": f"{name!r} is not an on-demand deployment"}
        entry = self.residency.request(name, trigger="admin")
        return {"deployment": name, "state": entry.state, "reason": entry.error}

    def unload_deployment(self, name: str) -> dict:
        """Explicit model control (Triton's unload): evict a resident on-demand deployment."""
        if not self.residency.knows(name):
            return {"error": f"{name!r} is not an on-demand deployment"}
        with self._control:
            evicted = self.residency.evict(name, reason="admin")
        return {"deployment": name, "evicted": evicted, "state": self.residency.state(name)}
