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
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from configs.deployments import ModelRepository
from configs.settings import Rollout
from kernel.errors import ApiError
from kernel.family import Family
from kernel.served import ServedModel
from models.manifest import Manifest
from models.registry import LocalRegistry
from observability.metrics import (
    SHADOW_AGREEMENT,
    SHADOW_CALLS,
    SHADOW_SECONDS,
)

log = logging.getLogger("triserve.rollout")



class ModelCatalog:
    """(slot, version) -> ServedModel, read (and verified) from the registry once and cached. `names(slot)` gives the
    registry model name of a slot (from the current model repository)."""

    def __init__(self, registry: LocalRegistry, names: Callable[[str], str]):
        self.registry = registry
        self.names = names
        self._cache: dict[tuple[str, str], ServedModel] = {}

    def get(self, slot: str, version: str) -> ServedModel:
        key = (slot, version)
        cached = self._cache.get(key)
        name = self.names(slot)
        if cached is None or cached.manifest.name != name:  # a redeployed slot may serve another model
            directory, manifest = self.registry.load_verified(name, version)
            cached = self._cache[key] = ServedModel(slot, manifest.version, directory, manifest)
        return cached


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

    async def refresh(self, runner: Any) -> None:
        local: dict[str, dict] = {}
        if self.fallback_runner is not None:  # first: it answers even when the runner tier does not
            local = (await self.fallback_runner.to_async.routing())["slots"]
            self.table = {**self.table, **local}
        answer = await runner.to_async.routing()
        if answer["repository"] != self.repository.model_dump(mode="json"):
            self.repository = ModelRepository.model_validate(answer["repository"])
        self.table = {**answer["slots"], **local}
        self.runner_boot = answer.get("boot", self.runner_boot)
        self.fetched_at = time.monotonic()

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
