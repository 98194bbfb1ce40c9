"""Rollouts seen from the gateway: which version serves a request (stable or sticky canary), mirrored shadow
traffic, per-version metrics, and automatic canary rollback.

The runner is the single source of truth (every API worker may be a separate process): it holds the loaded versions,
the active one, the canary (version, weight) and the shadow. Each gateway worker caches that routing table and
refreshes it every `refresh_s` (and right after its own admin actions); a request pinned to a version the runner has
meanwhile retired gets 'version_unavailable' and is retried once on a fresh table.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import numpy as np

from triserve.configs.deployments import ModelRepository
from triserve.configs.settings import Rollout
from triserve.kernel.errors import ApiError
from triserve.kernel.family import Family
from triserve.kernel.served import ServedModel
from triserve.models.manifest import Manifest
from triserve.models.registry import LocalRegistry
from triserve.observability.metrics import (
    SHADOW_AGREEMENT,
    SHADOW_CALLS,
    SHADOW_SECONDS,
)

log = logging.getLogger("triserve.rollout")



class ModelCatalog:
    """(slot, version) -> ServedModel, in memory. Requests read it on the event loop, so it never reads the registry
    for them (a slow or unreachable registry would stall every request of the worker): what the routing table names
    is loaded (verified, in a thread) before the table is published (`prepare`, RoutingTable.refresh), the admin
    routes `fetch` what they stage, and `load` fills it at startup. `names(slot)` gives the registry model name of a
    slot (from the current model repository)."""

    def __init__(self, registry: LocalRegistry, names: Callable[[str], str]):
        self.registry = registry
        self.names = names
        self._cache: dict[tuple[str, str], ServedModel] = {}
        self._pending: dict[tuple[str, str, str], asyncio.Future] = {}

    def load(self, slot: str, version: str, name: str | None = None) -> ServedModel:
        """Read and verify from the registry: blocking, so only at startup or in a thread (`fetch`)."""
        directory, manifest = self.registry.load_verified(name or self.names(slot), version)
        served = self._cache[(slot, version)] = ServedModel(slot, manifest.version, directory, manifest)
        return served

    def peek(self, slot: str, version: str, name: str | None = None) -> ServedModel | None:
        cached = self._cache.get((slot, version))
        if cached is None:
            return None
        try:
            expected = name or self.names(slot)
        except KeyError:  # a slot no longer in the repository: what was loaded for it still describes it
            return cached
        return cached if cached.manifest.name == expected else None  # a redeployed slot may serve another model

    def get(self, slot: str, version: str) -> ServedModel:
        """The request path: memory only. A version not loaded here yet is a 503 (its load starts in the
        background), never a registry read on the event loop."""
        served = self.peek(slot, version)
        if served is None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                asyncio.ensure_future(self._quiet_fetch(slot, version))
            raise ApiError(503, "not_ready", f"model slot {slot} version {version} is not loaded in this worker yet",
                           {"slot": slot, "version": version}, headers={"Retry-After": "1"})
        return served

    async def resolve(self, slot: str, version: str) -> ServedModel:
        """The inference path: memory, or, for a version this worker has not loaded yet (a table another worker's
        change made current before this worker's own refresh loaded it), a load in a thread that the request waits
        for: the event loop and the other requests never do, and the request is answered, not refused."""
        served = self.peek(slot, version)
        return served if served is not None else await self.fetch(slot, version)

    async def fetch(self, slot: str, version: str, name: str | None = None) -> ServedModel:
        """Loaded (and verified) in a thread, one load per slot, model and version however many callers wait."""
        name = name or self.names(slot)
        served = self.peek(slot, version, name)
        if served is not None:
            return served
        key = (slot, name, version)
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = asyncio.ensure_future(asyncio.to_thread(self.load, slot, version, name))
            pending.add_done_callback(lambda _done: self._pending.pop(key, None))
        return await asyncio.shield(pending)

    async def _quiet_fetch(self, slot: str, version: str) -> None:
        try:
            await self.fetch(slot, version)
        except Exception as exc:  # noqa: BLE001 - the next request or refresh tries again
            log.warning("loading %s:%s failed: %s: %s", slot, version, type(exc).__name__, exc)

    async def prepare(self, repository: ModelRepository, table: dict[str, dict]) -> None:
        """Every version the table routes to (active, canary, shadow) loaded before the table is published; one that
        fails is logged and left to `get` (503 for its requests) so it never holds back the others' table."""
        wanted = []
        for slot, entry in table.items():
            cfg = repository.slots.get(slot)
            if cfg is None:
                continue
            for version in {entry.get("active"), entry.get("shadow"), (entry.get("canary") or {}).get("version")}:
                if version and self.peek(slot, version, cfg.name) is None:
                    wanted.append((slot, version, cfg.name))
        results = await asyncio.gather(*(self.fetch(*w) for w in wanted), return_exceptions=True)
        for (slot, version, name), result in zip(wanted, results):
            if isinstance(result, Exception):
                log.warning("%s:%s (%s) not loaded in this worker: %s: %s", slot, version, name,
                            type(result).__name__, result)


def sticky_fraction(key: str) -> float:
    """A stable number in [0, 1) per request key: the same user always lands on the same side of a canary split."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64


class RoutingTable:
    """The runner's routing (per slot: active, loaded, canary, shadow) and model repository, cached per worker."""

    def __init__(self, cfg: Rollout, repository: ModelRepository, fallback_runner: Any = None):
        """fallback_runner: the API worker's fallback host (runner.fallbacks='gateway'), whose slots join the table
        and stay routable while the runner tier is unreachable."""
        self.cfg = cfg
        self.fallback_runner = fallback_runner
        self.table: dict[str, dict] = {}
        self.repository = repository
        self.fetched_at = 0.0
        self.runner_boot: str | None = None  # the runner process last seen (its routing answer's "boot")
        self._refreshing: asyncio.Task | None = None
        self._asked = self._published = 0  # refreshes asked of the runner / the latest one published
        # loads what a new table routes to before it is published (the gateway sets ModelCatalog.prepare)
        self.prepare: Callable[[ModelRepository, dict[str, dict]], Awaitable[None]] | None = None

    async def refresh(self, runner: Any) -> None:
        """The runner's table and repository, published once `prepare` (ModelCatalog.prepare) has loaded what they
        route to: a request never finds a version in the table that this worker has not loaded."""
        local: dict[str, dict] = {}
        if self.fallback_runner is not None:  # first: it answers even when the runner tier does not
            local = (await self.fallback_runner.to_async.routing())["slots"]
            await self._prepare(self.repository, local)
            self.table = {**self.table, **local}
        self._asked += 1
        asked = self._asked
        answer = await runner.to_async.routing()
        repository = self.repository
        if answer["repository"] != repository.model_dump(mode="json"):
            repository = ModelRepository.model_validate(answer["repository"])
        table = {**answer["slots"], **local}
        await self._prepare(repository, table)
        if asked < self._published:  # a refresh asked later was published while this one loaded: it is newer
            return
        self._published = asked
        self.repository, self.table = repository, table
        self.runner_boot = answer.get("boot", self.runner_boot)
        self.fetched_at = time.monotonic()

    async def _prepare(self, repository: ModelRepository, table: dict[str, dict]) -> None:
        if self.prepare is not None:
            await self.prepare(repository, table)

    async def ensure_fresh(self, runner: Any) -> None:
        """Block only for the very first table; afterwards refresh in the background when stale."""
        if not self.table:
            try:
                await self.refresh(runner)
            except Exception as exc:  # no table yet means no answer: a clean 503, never a 500
                raise ApiError(503, "runner_unavailable", "the model runner is not reachable",
                               {"reason": type(exc).__name__}, headers={"Retry-After": "1"}) from exc
        elif time.monotonic() - self.fetched_at > self.cfg.refresh_s and (
                self._refreshing is None or self._refreshing.done()):
            self._refreshing = asyncio.create_task(self._quiet_refresh(runner))

    async def _quiet_refresh(self, runner: Any) -> None:
        try:
            await self.refresh(runner)
        except Exception as exc:  # noqa: BLE001 - a stale table is better than a failed request
            log.warning("routing refresh failed: %s", exc)

    def pick(self, slot: str, key: str) -> tuple[str, str]:
        """(version, role) for a request: the canary for its sticky share of keys, else the active version. The key
        (gateway_deps.inference_guard, Client.canary_key): X-Canary-Key, else the API key, else the client address a
        trusted proxy forwarded; without any of them a random key per request (a per-request draw), so a canary at
        weight w takes w of the requests even when everybody arrives from one address."""
        entry = self.table.get(slot)
        if entry is None:
            raise ApiError(503, "not_ready", f"model slot {slot} is not loaded", {"slot": slot},
                           headers={"Retry-After": "2"})
        canary = entry.get("canary")
        if canary and sticky_fraction(f"{slot}:{key}") < canary["weight"]:
            return canary["version"], "canary"
        return entry["active"], "stable"

    def shadow(self, slot: str) -> str | None:
        return self.table.get(slot, {}).get("shadow")

    def memory_cap(self, slot: str) -> int | None:
        """The most items the slot's memory reservation covers in one call (runners/memory.py), when it is loaded
        and batches; None: unknown (not loaded yet) or not limited (the model runs item by item)."""
        cap = self.table.get(slot, {}).get("batch_cap")
        return int(cap) if cap else None

    def batch_limit(self, slot: str) -> int:
        """The slot's configured max batch size, lowered to its memory cap when that is smaller."""
        cap = self.memory_cap(slot)
        configured = self.repository.max_batch(slot)
        return min(configured, cap) if cap else configured


def _p50_ok(window: Iterable[tuple[bool, float]]) -> float:
    """Median seconds of the successful calls of a window (0 without any)."""
    return float(np.median([s for ok, s in window if ok] or [0.0]))


class CanaryGuard:
    """Withdraws a canary whose error rate or latency is worse than allowed, compared with the stable version."""

    def __init__(self, cfg: Rollout):
        self.cfg = cfg
        self.calls: dict[tuple[str, str], deque[tuple[bool, float]]] = {}

    def record(self, slot: str, role: str, ok: bool, seconds: float) -> None:
        window = self.calls.setdefault((slot, role), deque(maxlen=self.cfg.canary_window))
        window.append((ok, seconds))

    def verdict(self, slot: str) -> str | None:
        """'error_rate' or 'latency' when the canary must go, else None."""
        canary = self.calls.get((slot, "canary"))
        if not canary or len(canary) < self.cfg.canary_min_calls:
            return None
        errors = sum(1 for ok, _ in canary if not ok) / len(canary)
        if errors > self.cfg.canary_max_error_rate:
            return "error_rate"
        stable = self.calls.get((slot, "stable"))
        if stable and len(stable) >= self.cfg.canary_min_calls:
            if _p50_ok(canary) > self.cfg.canary_max_latency_ratio * max(_p50_ok(stable), 1e-4):
                return "latency"
        return None

    def reset(self, slot: str) -> None:
        self.calls.pop((slot, "canary"), None)


class ShadowMirror:
    """Fire-and-forget mirroring with a hard cap on concurrent shadow calls: when full, the mirror is dropped
    (counted), so the shadow can never slow the primary path or grow memory."""

    def __init__(self, cfg: Rollout):
        self.cfg = cfg
        self.inflight = 0
        self.tasks: set[asyncio.Task] = set()

    def mirror(self, runner: Any, family: Family, manifest: Manifest, slot: str, version: str,
               payload: list[dict], served: list[np.ndarray]) -> None:
        if self.inflight >= self.cfg.shadow_max_inflight:
            SHADOW_CALLS.labels(slot, version, "dropped").inc()
            return
        self.inflight += 1
        t = asyncio.create_task(self._run(runner, family, manifest, slot, version, payload, served))
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)

    async def _run(self, runner: Any, family: Family, manifest: Manifest, slot: str, version: str,
                   payload: list[dict], served: list[np.ndarray]) -> None:
        started = time.perf_counter()
        try:
            items = await runner.to_async.infer([{**it, "version": version, "deadline": None} for it in payload])
            SHADOW_SECONDS.labels(slot, version).observe(time.perf_counter() - started)
            if any("error" in it for it in items):
                SHADOW_CALLS.labels(slot, version, "error").inc()
                return
            for out, ref in zip(items, served):
                SHADOW_AGREEMENT.labels(slot, version).observe(family.agreement(manifest, ref, np.asarray(out["y"])))
            SHADOW_CALLS.labels(slot, version, "ok").inc()
        except Exception as exc:  # noqa: BLE001 - the shadow must never affect anything else
            SHADOW_CALLS.labels(slot, version, "error").inc()
            log.warning("shadow call %s:%s failed: %s", slot, version, exc)
        finally:
            self.inflight -= 1
