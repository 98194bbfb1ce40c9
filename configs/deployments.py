"""The model repository: which deployments this service serves (configs/models.yaml).

A deployment is a named instance of a model family: a registry model (name + alias or version), an optional cheaper
fallback of the same family and label set, batching limits, and optional per-deployment request limits. Requests name
a deployment (`"deployment": "coco"`); without one they go to their family's default. Everything the runner and the
gateway keep per model (sessions, batchers, queues, breakers, routes, metrics) derives from this list, so nothing
outside families/ spells out a task or a slot.

    TRISERVE_MODELS_FILE=/etc/triserve/models.yaml  # another repository file (default configs/models.yaml)

Deployments added, changed or removed at run time (POST/DELETE /admin/deployments) are written to the state file
(`Settings.deployments_state_file`) and read back at the next start on top of the configured file, so a restart comes
back the same. The checks below run at startup and for every runtime change; a fallback whose labels differ from the
primary's is refused later, when both manifests are at hand (the family's `compatible` check).
"""
from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

import triserve.configs.families
from triserve.configs.settings import PACKAGE_ROOT, Batching, ModelSlot, SlotOverride

DEFAULT_MODELS_FILE = PACKAGE_ROOT / "configs" / "models.yaml"
DEPLOYMENT_NAME = r"^[a-z0-9][a-z0-9-]{0,62}$"  # no '_' or '.': slot keys append "_fallback"
FALLBACK_SUFFIX = "_fallback"


class Deployment(BaseModel):
    """One served model of one family."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=DEPLOYMENT_NAME, description="What requests name (`deployment`), URL-safe.")
    family: str = Field(description="Model family: " + ", ".join(triserve.configs.families.names()) + ".")
    model: ModelSlot = Field(description="The primary model: registry name, alias or version, batching.")
    fallback: ModelSlot | None = Field(None, description="Degraded, cheaper model of the same family and label set "
                                                         "('auto' requests fall back to it). None: no fallback.")
    limits: dict[str, Any] = Field(default_factory=dict, description="Overrides of the family's request limits "
                                                                     "(serving.yaml `limits.<family>`).")
    description: str = Field("", max_length=500)
    residency: Literal["always", "on_demand"] = Field(
        "always", description="'always': loaded at startup, the service is not ready without it. 'on_demand': "
                              "loaded (and warmed) on its first request, evicted least-recently-used when the "
                              "runner's memory budget is needed for another on-demand deployment (runners/"
                              "residency.py); the service is ready without it.")
    memory_mb: float | None = Field(None, gt=0, description="This deployment's own memory budget (MB, primary and "
                                                             "fallback together) inside the runner's: its batch caps "
                                                             "are derived from it; it is refused at load when even "
                                                             "batch 1 does not fit. None: only the runner's budget.")

    @model_validator(mode="after")
    def _check(self) -> Deployment:
        if self.family not in triserve.configs.families.names():
            raise ValueError(f"deployment {self.name!r}: unknown family {self.family!r}; known: "
                             f"{', '.join(triserve.configs.families.names())}")
        if self.fallback is not None and (self.fallback.name, self.fallback.ref) == (self.model.name, self.model.ref):
            raise ValueError(f"deployment {self.name!r}: the fallback is the primary model itself")
        # unknown keys and bad values fail here
        triserve.configs.families.limits_model(self.family).model_validate(self.limits)
        return self

    @property
    def fallback_slot(self) -> str | None:
        return self.name + FALLBACK_SUFFIX if self.fallback is not None else None

    @property
    def slots(self) -> dict[str, ModelSlot]:
        """Runner slot key -> model: '<name>' for the primary, '<name>_fallback' for the fallback."""
        out = {self.name: self.model}
        if self.fallback is not None:
            out[self.name + FALLBACK_SUFFIX] = self.fallback
        return out


class ModelRepository(BaseModel):
    """Every deployment, and which one answers a family's requests that name none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    deployments: list[Deployment] = Field(min_length=1)
    defaults: dict[str, str] = Field(default_factory=dict, description="family -> deployment name; a family "
                                                                       "without an entry defaults to its first "
                                                                       "deployment.")

    @model_validator(mode="after")
    def _check(self) -> ModelRepository:
        seen: set[str] = set()
        for d in self.deployments:
            if d.name in seen:
                raise ValueError(f"deployment {d.name!r} is listed twice")
            seen.add(d.name)
        for fam, name in self.defaults.items():
            if fam not in triserve.configs.families.names():
                raise ValueError(f"defaults: unknown family {fam!r}")
            dep = self.find(name)
            if dep is None or dep.family != fam:
                raise ValueError(f"defaults: {fam} -> {name!r} is not a {fam} deployment")
        return self

    def find(self, name: str) -> Deployment | None:
        return next((d for d in self.deployments if d.name == name), None)

    def default_for(self, family: str) -> Deployment | None:
        name = self.defaults.get(family)
        if name:
            return self.find(name)
        return next((d for d in self.deployments if d.family == family), None)

    def of_family(self, family: str) -> list[Deployment]:
        return [d for d in self.deployments if d.family == family]

    @cached_property
    def slots(self) -> dict[str, ModelSlot]:
        """Every slot of every deployment (computed once: the repository is immutable and asked per request)."""
        return {slot: m for d in self.deployments for slot, m in d.slots.items()}

    def max_batch(self, slot: str) -> int:
        """The slot's batch limit (1 for a slot no longer configured: its last requests go one by one)."""
        cfg = self.slots.get(slot)
        return cfg.batching.max_batch_size if cfg else 1

    def owner(self, slot: str) -> tuple[Deployment, str]:
        """(deployment, 'primary' | 'fallback') of a slot key; KeyError when no deployment has it."""
        base = slot.removesuffix(FALLBACK_SUFFIX)
        dep = self.find(base)
        if dep is None or slot not in dep.slots:
            raise KeyError(slot)
        return dep, "fallback" if slot != base else "primary"

    def with_deployment(self, dep: Deployment) -> ModelRepository:
        """A copy with `dep` added, or replacing the deployment of the same name."""
        rest = [d for d in self.deployments if d.name != dep.name]
        index = next((i for i, d in enumerate(self.deployments) if d.name == dep.name), len(rest))
        return ModelRepository(deployments=rest[:index] + [dep] + rest[index:], defaults=self.defaults)

    def without(self, name: str) -> ModelRepository:
        """A copy without deployment `name` (refused when it is a family's last or explicit default)."""
        dep = self.find(name)
        if dep is None:
            raise KeyError(name)
        if self.defaults.get(dep.family) == name:
            raise ValueError(f"{name!r} is the configured default of {dep.family}; name another default first")
        return ModelRepository(deployments=[d for d in self.deployments if d.name != name], defaults=self.defaults)

    def describe(self) -> list[dict]:
        defaults = {f: d.name for f in triserve.configs.families.names() if (d := self.default_for(f)) is not None}
        return [{**d.model_dump(mode="json"), "default": defaults.get(d.family) == d.name} for d in self.deployments]


def models_file() -> Path:
    return Path(os.environ.get("TRISERVE_MODELS_FILE", DEFAULT_MODELS_FILE))


def load_repository(path: Path | None = None, state_file: Path | None = None,
                    overrides: dict[str, SlotOverride] | None = None) -> ModelRepository:
    """The configured repository, or the state file written by runtime changes when it exists (the whole repository
    as last changed by the admin API), with the environment's slot overrides (Settings.slots) applied."""
    if state_file is not None and Path(state_file).is_file():
        repo = ModelRepository.model_validate(json.loads(Path(state_file).read_text()))
    else:
        path = Path(path or models_file())
        if not path.is_file():
            raise FileNotFoundError(f"model repository file {path} not found (TRISERVE_MODELS_FILE)")
        repo = ModelRepository.model_validate(yaml.safe_load(path.read_text()) or {})
    return with_overrides(repo, overrides or {})


def with_overrides(repo: ModelRepository, overrides: dict[str, SlotOverride]) -> ModelRepository:
    """The repository with some slots' ref or batching replaced; an unknown slot is a configuration error."""
    unknown = sorted(set(overrides) - set(repo.slots))
    if unknown:
        raise ValueError(f"slot overrides name unknown slots {unknown}; slots: {sorted(repo.slots)}")
    for slot, change in overrides.items():
        dep, role = repo.owner(slot)
        field = "fallback" if role == "fallback" else "model"
        model: ModelSlot = getattr(dep, field)
        batching = Batching.model_validate({**model.batching.model_dump(), **change.batching})
        model = model.model_copy(update={"ref": change.ref or model.ref, "batching": batching})
        repo = repo.with_deployment(dep.model_copy(update={field: model}))
    return repo


def save_state(repo: ModelRepository, state_file: Path) -> None:
    """Atomically persist the repository as changed at run time."""
    state_file = Path(state_file)
    state_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(repo.model_dump(mode="json"), indent=2))
    os.replace(tmp, state_file)
