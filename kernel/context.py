"""What a protocol adapter or an admin route may use of the running gateway: one typed object.

It names what serving needs (routing, the model catalogue, protection, the runner client, drift monitoring),
resolves deployments and runs the kernel's request lifecycle (kernel/lifecycle.serve). Families never see it: their
hooks get a DeploymentView (kernel/family.py), so family code is tested without a context and never imports the
gateway.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import triserve.configs.families
from triserve.configs.deployments import FALLBACK_SUFFIX, Deployment
from triserve.configs.settings import Settings
from triserve.kernel.call import CallContext
from triserve.kernel.errors import ApiError
from triserve.kernel.family import DeploymentView, Family
from triserve.kernel.lifecycle import serve
from triserve.kernel.routing.drift import QualityMonitor
from triserve.kernel.routing.inference import Protection
from triserve.kernel.routing.rollout import CanaryGuard, ModelCatalog, RoutingTable, ShadowMirror
from triserve.kernel.runner_call.runner_client import RunnerClient
from triserve.kernel.served import ServedModel
from triserve.models.manifest import Manifest
from triserve.models.registry import LocalRegistry
from triserve.observability.metrics import deployment_failed

log = logging.getLogger("triserve.context")


@dataclass
class ServingContext:
    settings: Settings
    runner: Any  # BentoML's RemoteProxy to the runner tier, or triserve.runners.local.LocalRunner
    registry: LocalRegistry
    routing: RoutingTable
    catalog: ModelCatalog
    protection: Protection
    canary: CanaryGuard
    shadow: ShadowMirror
    quality: QualityMonitor | None = None
    fallback_runner: Any = None  # runner.fallbacks='gateway': the fallbacks' in-process host (triserve.runners.local)
    _views: dict[str, tuple[Deployment, DeploymentView]] = field(default_factory=dict)
    _runner_client: RunnerClient | None = None
    _fallback_client: RunnerClient | None = None

    @property
    def repository(self):
        """The model repository as the runner serves it now (refreshed with the routing table)."""
        return self.routing.repository

    @property
    def runner_client(self) -> RunnerClient:
        """Created on first use, inside the worker's event loop (batchers hold per-loop state)."""
        if self._runner_client is None:
            self._runner_client = RunnerClient(self.runner, self.settings, self.slot_batch, self.slot_family,
                                               fails_over=self.fails_over)
        return self._runner_client

    def client_for(self, slot: str) -> RunnerClient:
        """The runner client of the process that hosts the slot: the runner tier, or this API worker for fallback
        slots when runner.fallbacks='gateway'."""
        if self.fallback_runner is None or slot.removesuffix(FALLBACK_SUFFIX) == slot:
            return self.runner_client
        if self._fallback_client is None:
            self._fallback_client = RunnerClient(self.fallback_runner, self.settings, self.slot_batch,
                                                 self.slot_family)
        return self._fallback_client

    async def close(self) -> None:
        """At the API worker's shutdown: the runner clients' open connections closed (no 'Unclosed client session')."""
        for client in (self._runner_client, self._fallback_client):
            if client is not None:
                await client.close()

    def slot_batch(self, slot: str) -> int:
        return self.routing.batch_limit(slot)

    def fails_over(self, slot: str) -> bool:
        """A primary slot whose deployment's fallback this API worker hosts (runner.fallbacks='gateway'): when the
        runner tier drops its call, the fallback answers at once instead of a retry into a runner that is gone."""
        if self.fallback_runner is None or slot.endswith(FALLBACK_SUFFIX):
            return False
        try:
            dep, _ = self.repository.owner(slot)
        except KeyError:
            return False
        return dep.fallback_slot is not None

    def slot_family(self, slot: str) -> str:
        return self.repository.owner(slot)[0].family

    async def resolve(self, family: str, name: str | None) -> Deployment:
        """`deployment()` on a fresh view of the repository (deployments are added and removed at run time)."""
        await self.routing.ensure_fresh(self.runner)
        return self.deployment(family, name)

    def deployment(self, family: str, name: str | None) -> Deployment:
        """The deployment a request names, or its family's default; 404 with the known names otherwise."""
        repo = self.repository
        dep = repo.find(name) if name else repo.default_for(family)
        if dep is None or dep.family != family:
            known = [d.name for d in repo.of_family(family)]
            if name is None:
                raise ApiError(404, "no_deployment", f"no {family} deployment is configured", {"family": family})
            raise ApiError(404, "unknown_deployment", f"no {family} deployment named {name!r}",
                           {"deployment": name, "family": family, "known": known})
        return dep

    def family(self, dep: Deployment) -> Family:
        """The deployment's family, found by name in the registry (configs/families.py: discovery, not an import)."""
        return triserve.configs.families.family(dep.family)

    def view(self, dep: Deployment) -> DeploymentView:
        """What the family's hooks may know of a deployment, rebuilt when the deployment's configuration changes."""
        entry = self._views.get(dep.name)
        if entry is None or (entry[0] is not dep and entry[0] != dep):
            entry = self._views[dep.name] = (dep, DeploymentView(
                name=dep.name, limits=self.limits(dep), primary=lambda: self.served(dep.name),
                batch_limit=lambda: self.slot_batch(dep.name), observe=self.observe))
            if self.quality is not None:
                for manifest in self.active_manifests(dep).values():
                    self.quality.track(manifest)
        return entry[1]

    def observe(self, model: str, signal: str, values) -> None:
        """A model-quality signal (kernel/routing/drift), dropped when monitoring is off."""
        if self.quality is not None:
            self.quality.observe(model, signal, values)

    async def run(self, family: str, request: Any, call: CallContext, deployment: Deployment | None = None) -> Any:
        """Every transport's one way into a family: the deployment the request names (or the one given, or the
        family default) -> the kernel's lifecycle with that family's hooks (kernel/lifecycle.serve)."""
        dep = deployment or await self.resolve(family, getattr(request, "deployment", None))
        started = time.perf_counter()
        try:
            return await serve(self, dep, self.family(dep), self.view(dep), request, call)
        except (Exception, asyncio.CancelledError):  # Triton's fail statistics of the deployment's OIP model
            deployment_failed(dep.name, time.perf_counter() - started)
            raise

    def limits(self, dep: Deployment):
        return self.settings.family_limits(dep.family, dep.limits)

    def served(self, slot: str) -> ServedModel:
        """The version a slot serves now (from the routing table)."""
        entry = self.routing.table.get(slot)
        if entry is None:
            raise ApiError(503, "not_ready", f"model slot {slot} is not loaded", {"slot": slot},
                           headers={"Retry-After": "2"})
        return self.catalog.get(slot, entry["active"])

    def active_manifests(self, dep: Deployment) -> dict[str, Manifest]:
        """slot -> manifest of the version each slot of the deployment serves now (those loaded in this worker: the
        catalog is memory only on the request path)."""
        out = {}
        for slot in dep.slots:
            entry = self.routing.table.get(slot)
            served = self.catalog.peek(slot, entry["active"]) if entry else None
            if served is not None:
                out[slot] = served.manifest
        return out

    async def load_served(self, slot: str) -> ServedModel:
        """An admin route's `served`: the slot's version loaded in this worker (in a thread) if it is not yet."""
        entry = self.routing.table.get(slot)
        if entry is None:
            raise ApiError(503, "not_ready", f"model slot {slot} is not loaded", {"slot": slot},
                           headers={"Retry-After": "2"})
        return await self.catalog.fetch(slot, entry["active"])

    async def withdraw_canary(self, slot: str) -> None:
        """Automatic canary rollback: stop routing to the candidate everywhere (the runner is the source of truth)."""
        try:
            await self.runner.to_async.set_canary(slot=slot, version=None)
            await self.routing.refresh(self.runner)
        except Exception:  # logged; the next judgement retries
            log.exception("could not withdraw the canary of %s", slot)
