"""Deployment -> the model a job runs: its family, its pinned version, a verified copy, an open session.

The deployment comes from the model repository file (configs/models.yaml, or TRISERVE_MODELS_FILE, or --models-file),
its limits from serving.yaml `limits.<family>` with the deployment's overrides (what the service applies). The model
is resolved once by the job's driver (alias -> version: every worker and every resume runs that version), pulled with
triserve.models.cache.fetch_verified (the service's startup pull: every file's sha256 checked) and loaded by the
runner's own
ModelPool (runners/pool.py: provider choice, warm-up, the measured memory footprint that caps the batch within the
memory budget). Items become feeds through the family's runtime (runners/compute.feeds), ragged items grouped by
length as the runner groups them (runners/ragged.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import triserve.configs.families
from triserve.configs.deployments import load_repository
from triserve.configs.settings import get_settings
from triserve.kernel.batch import Adapter
from triserve.models.cache import fetch_verified
from triserve.models.manifest import Manifest
from triserve.models.registry import LocalRegistry
from triserve.models.stores import open_store
from triserve.runners.compute import feeds
from triserve.runners.pool import LoadedModel, ModelPool, fixed_batch
from triserve.runners.ragged import length_buckets, token_groups

ROLES = ("primary", "fallback")


@dataclass(frozen=True)
class Target:
    """What a job runs: picklable, so it travels to workers, Ray actors and Spark executors."""

    deployment: str
    family: str
    role: str  # primary | fallback
    name: str  # registry model
    version: str  # pinned: the ref resolved once, by the driver
    registry: str  # store URI or local path the model is pulled from
    limits: dict[str, Any]  # the family's limits as the deployment applies them
    per_item: bool = False  # the slot runs item by item (batching.per_item)


def resolve(deployment: str, registry: str, role: str = "primary", models_file: Path | None = None,
            version: str | None = None) -> Target:
    """The deployment's model for `role`, its ref resolved in the registry (or `version` when a resumed job pinned
    one)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}")
    repo = load_repository(models_file)
    dep = repo.find(deployment)
    if dep is None:
        raise KeyError(f"no deployment {deployment!r} in the model repository; known: "
                       f"{', '.join(d.name for d in repo.deployments)}")
    slot = dep.model if role == "primary" else dep.fallback
    if slot is None:
        raise ValueError(f"deployment {deployment!r} has no fallback")
    limits = get_settings().family_limits(dep.family, dep.limits).model_dump(mode="json")
    if version is None:
        store = open_store(registry)
        try:
            version = store.resolve(slot.name, slot.ref)
        finally:
            store.close()
    return Target(deployment=dep.name, family=dep.family, role=role, name=slot.name, version=version,
                  registry=str(registry), limits=limits, per_item=slot.batching.per_item)


def adapter_class(family: str, command: str = "") -> Any:
    """The family's offline adapter for `command` (default: its main one), found through the family registry (a
    third-party family's too)."""
    adapter = triserve.configs.families.batch_adapter(family)
    if adapter is None:
        raise ValueError(f"the {family} family has no batch adapter (<package>.batch.Adapter)")
    if not command:
        return adapter
    for candidate in triserve.configs.families.batch_adapters(family):
        if candidate.COMMAND == command:
            return candidate
    raise ValueError(f"the {family} family has no batch command {command!r}")


def limits_of(target: Target):
    return triserve.configs.families.limits_model(target.family).model_validate(target.limits)


def pull(target: Target, cache_dir: Path) -> tuple[Path, Manifest]:
    """A verified copy of the pinned version in `cache_dir` (models/cache.fetch_verified)."""
    return fetch_verified(target.registry, target.name, target.version, cache_dir, retries=2)


def open_adapter(target: Target, cache_dir: Path, options: dict[str, Any], command: str = "") -> Adapter:
    directory, manifest = pull(target, cache_dir)
    return adapter_class(target.family, command)(directory, manifest, limits_of(target), options)


class Session:
    """The pinned model loaded by the runner's pool; `run(items)` -> one output row per item, in order."""

    def __init__(self, target: Target, cache_dir: Path, max_batch: int, threads: int = 0):
        pull(target, cache_dir)
        settings = get_settings().runner.model_copy(update={"intra_op_threads": threads} if threads else {})
        self.pool = ModelPool(LocalRegistry(cache_dir), settings)
        self.model: LoadedModel = self.pool.load("batch", target.name, target.version, max_batch=max_batch)
        self.per_item = target.per_item or fixed_batch(self.model.manifest)
        self.bucket_cost = settings.bucket_call_cost_tokens

    @property
    def batch_cap(self) -> int:
        return max(self.model.batch_cap, 1)

    def _call(self, xs: list[np.ndarray]) -> list[np.ndarray]:
        return list(self.pool.run_model(self.model, feeds(self.model, xs))[0])

    def run(self, xs: list[np.ndarray]) -> list[np.ndarray]:
        if not xs:
            return []
        if self.per_item:
            return [self._call([x])[0] for x in xs]
        cap = self.batch_cap
        if not self.model.ragged:
            return [row for k in range(0, len(xs), cap) for row in self._call(xs[k: k + cap])]
        out: list[np.ndarray | None] = [None] * len(xs)  # ragged: one call per length group, rows back in order
        lengths = [len(x) for x in xs]
        max_tokens = cap * self.model.item_len
        for bucket in length_buckets(xs, self.bucket_cost):
            groups = (token_groups(bucket, lengths, max_tokens) if max_tokens
                      else [bucket[k: k + cap] for k in range(0, len(bucket), cap)])
            for group in groups:
                for i, row in zip(group, self._call([xs[i] for i in group])):
                    out[i] = row
        return [row for row in out if row is not None]
