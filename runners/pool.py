"""ONNX Runtime sessions for every served model: load (verified), pick a provider, warm up, run.

Why here and not in the services: one process owns the accelerator and every model on it, so batching can merge
requests from all API workers. This module knows tensors, never tasks: what it needs to warm a model up comes from
the manifest's input specs and a few representative sizes.
"""
from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

from triserve import families
from triserve.configs.settings import RunnerSettings
from triserve.models.manifest import Manifest, TensorSpec
from triserve.models.registry import LocalRegistry
from triserve.runners.memory import MB, Footprint, MemoryBudget, derived_budget_mb, rss_mb, share_caps

log = logging.getLogger("triserve.runner")

# Representative sizes for dynamic axes during warm-up; the model's family adds its own (image side, sequence
# lengths); other dynamic axes get 1.
WARMUP_BATCHES = (1, 8)


@dataclass
class LoadedModel:
    """A ready session plus what it was built from."""

    slot: str
    manifest: Manifest
    directory: Path
    session: ort.InferenceSession  # or the family's numpy session (same run(output_names, feeds))
    provider: str
    load_seconds: float
    provider_fallback: str | None = None  # why this model left its preferred provider, if it did
    warm: bool = False
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    footprint: Footprint | None = None  # measured at load (runners/memory.py)
    batch_cap: int = 1  # the largest batch its memory reservation covers (<= the slot's max_batch_size)
    ragged: bool = False  # its family's items are sequences of their own length (runtime.RAGGED): length groups
    item_len: int = 0  # ragged models: the longest warm-up sequence, the length per_item was measured at
    peak_batch: int = 0  # the largest batch it has run (its peak memory: resident + per item x this)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session.run(self.output_names, feeds)


def choose_providers(preferred: list[str]) -> list[str]:
    """The preferred providers that this onnxruntime build has, CPU always last as the safety net."""
    available = set(ort.get_available_providers())
    chosen = [p for p in preferred if p in available and p != "CPUExecutionProvider"]
    skipped = [p for p in preferred if p not in available]
    if skipped:
        log.info("providers not available in this onnxruntime build, skipped: %s", skipped)
    return chosen + ["CPUExecutionProvider"]


CPU = "CPUExecutionProvider"
NUMPY = "numpy"  # engine-numpy models (families/<family>/runtime.numpy_session): no provider to fall back from


class ProviderFault(RuntimeError):
    """The accelerator provider failed (or a drill said so)."""


def _session(model_path: Path, settings: RunnerSettings, providers: list[str]) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = settings.intra_op_threads
    opts.inter_op_num_threads = settings.inter_op_threads
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if settings.spin_wait else "0")
    return ort.InferenceSession(str(model_path), opts, providers=providers)


def physical_cores(cpuinfo: Path = Path("/proc/cpuinfo")) -> int | None:
    """Distinct (physical id, core id) pairs of /proc/cpuinfo: the cores ONNX Runtime's default counts."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    cores = set()
    for block in text.split("\n\n"):
        fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if "processor" in fields:
            cores.add((fields.get("physical id", "0"), fields.get("core id", fields["processor"])))
    return len(cores) or None


def thread_layout(settings: RunnerSettings) -> dict:
    """The threads one session computes with, as configured and in effect (shown in /v1/models): intra-op 0 is ONNX
    Runtime's default, one thread per physical core, which it pins itself (docs/performance.md: faster unpinned on
    the 2-core dev box, 358 vs 274 texts/s; the peer comparisons run intra-op 1)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    physical = physical_cores() or usable
    return {"intra_op_threads": settings.intra_op_threads,
            "intra_op_in_effect": settings.intra_op_threads or physical,
            "inter_op_threads": settings.inter_op_threads, "spin_wait": settings.spin_wait,
            "runner_workers": settings.workers, "cpus_usable": usable, "physical_cores": physical}


def make_session(model_path: Path, settings: RunnerSettings) -> tuple[ort.InferenceSession, str, str | None]:
    """(session, provider in use, why we are not on the preferred provider). A failing accelerator never stops a
    model from loading: it continues on CPU, and the reason is reported."""
    providers = choose_providers(settings.providers)
    try:
        if settings.faults.provider_fault == "load":
            raise ProviderFault("injected: accelerator provider failed to initialise")
        session = _session(model_path, settings, providers)
    except Exception as exc:  # any provider failure -> CPU
        if providers == [CPU] and settings.faults.provider_fault != "load":
            raise
        log.error("provider %s failed at load (%s); continuing on CPU", providers[0], exc)
        return _session(model_path, settings, [CPU]), CPU, f"load: {type(exc).__name__}: {exc}"
    used = session.get_providers()[0]
    degraded = None if used == providers[0] else f"load: {providers[0]} unavailable, using {used}"
    return session, used, degraded


def _dtype(spec: TensorSpec) -> np.dtype:
    return np.dtype(spec.dtype)


def warmup_feeds(manifest: Manifest, largest: int = WARMUP_BATCHES[-1]) -> list[dict[str, np.ndarray]]:
    """Inputs of representative shapes: small and larger batches, none above `largest` (the most items one call of
    the slot runs: a larger warm-up batch would grow the arenas to a working set never used) and 1 only for a
    fixed-batch graph, times the sizes the model's family serves on its other dynamic axes
    (families/<family>/runtime.warmup_sizes)."""
    axes = families.runtime(manifest.task).warmup_sizes(manifest)
    batches = (1,) if fixed_batch(manifest) else tuple(sorted({min(b, max(largest, 1)) for b in WARMUP_BATCHES}))
    variants = [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())] or [{}]
    feeds = []
    for b in batches:
        for sizes in variants:
            feed = {}
            for spec in manifest.inputs:
                shape = [dim if isinstance(dim, int) else b if i == 0 else sizes.get(dim, 1)
                         for i, dim in enumerate(spec.shape)]
                dt = _dtype(spec)
                feed[spec.name] = np.ones(shape, dtype=dt) if dt.kind in "iu" else np.zeros(shape, dtype=dt)
            feeds.append(feed)
    return feeds


def _batch_of(feed: dict[str, np.ndarray]) -> int:
    first = next(iter(feed.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else 1


def _footprint(rss_before: float, after_batch: dict[int, float]) -> Footprint:
    """Resident: RSS after the batch-1 warm-up minus before loading; per item: the growth from batch 1 to the
    largest warm-up batch, per extra item (runners/memory.py)."""
    if not after_batch:
        return Footprint(resident_mb=max(rss_mb() - rss_before, 0.0), per_item_mb=0.0, measured_batch=1)
    small, large = min(after_batch), max(after_batch)
    resident = max(after_batch[small] - rss_before, 0.0)
    per_item = max(after_batch[large] - after_batch[small], 0.0) / (large - small) if large > small else 0.0
    return Footprint(resident_mb=resident, per_item_mb=per_item, measured_batch=large)


def _at_least(measured: Footprint, weights_mb: float, before: Footprint | None) -> Footprint:
    """RSS deltas undercount when the allocator reuses memory a model evicted a moment ago left behind (an on-demand
    reload can measure ~0): a model holds at least its weights, and at least what it measured the first time."""
    resident = max(measured.resident_mb, weights_mb, before.resident_mb if before else 0.0)
    per_item = max(measured.per_item_mb, before.per_item_mb if before else 0.0)
    return Footprint(resident_mb=resident, per_item_mb=per_item, measured_batch=measured.measured_batch)


def _ragged_len(manifest: Manifest) -> int:
    """The longest warm-up size of the first input's second axis when it is dynamic (token ids: the sequence length
    per_item was measured at, so a batch cap in items is one in padded tokens too); 0 otherwise."""
    shape = manifest.inputs[0].shape if manifest.inputs else []
    if len(shape) < 2 or isinstance(shape[1], int):
        return 0
    sizes = families.runtime(manifest.task).warmup_sizes(manifest).get(shape[1], ())
    return max(sizes, default=0)


def fixed_batch(manifest: Manifest) -> bool:
    """A graph whose batch dimension is pinned to 1 (many users' ONNX exports): the runner feeds it item by item."""
    first = manifest.inputs[0].shape if manifest.inputs else []
    return bool(first) and first[0] == 1


class ModelPool:
    """Slots ('coco', 'coco_fallback', ...: configs/deployments.py) -> loaded, warmed models.

    A slot can hold several versions at once: the active one (`models[slot]`), a canary or shadow candidate, and a
    retiring one still finishing its in-flight batches. Loading happens off to the side; activation is a single
    dict assignment, so a swap never exposes a half-loaded model.
    """

    def __init__(self, registry: LocalRegistry, settings: RunnerSettings):
        self.registry = registry
        self.settings = settings
        self.models: dict[str, LoadedModel] = {}  # slot -> active version
        self.versions: dict[str, dict[str, LoadedModel]] = {}  # slot -> version -> loaded
        self.errors: dict[str, str] = {}
        self.measured: dict[str, Footprint] = {}  # "name:version" -> its last measurement (estimates for reloads)
        self.memory = MemoryBudget(settings.memory.budget_mb or derived_budget_mb(settings.memory.fraction))
        log.info("memory budget %.0f MB (%s)", self.memory.budget_mb,
                 "configured" if settings.memory.budget_mb else f"{settings.memory.fraction:.0%} of the machine")

    @staticmethod
    def memory_key(slot: str, version: str) -> str:
        return f"{slot}@{version}"

    def load(self, slot: str, name: str, ref: str, activate: bool = True, max_batch: int = 1,
             limit_mb: float | None = None, make_room: Callable[[float], None] | None = None,
             warm_batch: int | None = None) -> LoadedModel:
        """Verify, load, warm and measure; reserve its memory for the largest batch <= max_batch that fits the
        budget (MemoryRefused when not even one item fits: nothing stays loaded). limit_mb: what its deployment's
        own budget leaves for it; make_room(mb): asked to free that much of the budget (evicting on-demand
        deployments) before loading, with an estimate (its last measurement, else its weights), and again with the
        measured need at its max batch before reserving. warm_batch: the largest batch to warm at (default: max_batch;
        load_all reserves at batch 1 first and warms at the slot's own batch)."""
        started = time.monotonic()
        directory, manifest = self.registry.load_verified(name, ref)
        key = self.memory_key(slot, manifest.version)
        weights_mb = (directory / manifest.model_file).stat().st_size / MB
        if make_room is not None:
            known = self.measured.get(f"{name}:{manifest.version}")
            make_room(known.need(max_batch) if known else weights_mb)
        self.memory.precheck(key, weights_mb)
        rss_before = rss_mb()
        if manifest.engine == "numpy":
            session = families.runtime(manifest.task).numpy_session(manifest, directory / manifest.model_file)
            provider, fallback = NUMPY, None
            input_names, output_names = [i.name for i in manifest.inputs], [o.name for o in manifest.outputs]
        else:
            session, provider, fallback = make_session(directory / manifest.model_file, self.settings)
            input_names = [i.name for i in session.get_inputs()]
            output_names = [o.name for o in session.get_outputs()]
        model = LoadedModel(slot=slot, manifest=manifest, directory=directory, session=session, provider=provider,
                            load_seconds=0.0, provider_fallback=fallback, input_names=input_names,
                            output_names=output_names)
        after_batch: dict[int, float] = {}
        for feed in warmup_feeds(manifest, warm_batch or max_batch):
            for _ in range(self.settings.warmup_runs):
                self.run_model(model, feed)
            after_batch[_batch_of(feed)] = rss_mb()
        model.footprint = _at_least(_footprint(rss_before, after_batch), weights_mb,
                                    self.measured.get(f"{name}:{manifest.version}"))
        model.ragged = bool(getattr(families.runtime(manifest.task), "RAGGED", False))
        model.item_len = _ragged_len(manifest) if model.ragged else 0
        self.measured[f"{name}:{manifest.version}"] = model.footprint
        if make_room is not None:
            make_room(model.footprint.need(max(max_batch, 1)))
        model.batch_cap = self.memory.reserve(key, model.footprint, max(max_batch, 1), limit_mb)
        if model.batch_cap < max_batch:
            log.warning("%s: memory budget caps its batch at %d (configured %d): %s", key, model.batch_cap,
                        max_batch, model.footprint)
        model.warm = True
        model.load_seconds = time.monotonic() - started
        log.info("loaded %s = %s:%s on %s in %.2fs", slot, name, manifest.version, provider, model.load_seconds)
        self.versions.setdefault(slot, {})[manifest.version] = model
        if activate:
            self.models[slot] = model
        return model

    def get(self, slot: str, version: str | None = None) -> LoadedModel:
        """The active model of a slot, or a specific loaded version (KeyError if it is not loaded)."""
        return self.models[slot] if not version else self.versions[slot][version]

    def activate(self, slot: str, version: str) -> str | None:
        """Make a loaded version the active one; returns the previous active version."""
        previous = self.models[slot].manifest.version if slot in self.models else None
        self.models[slot] = self.versions[slot][version]
        self.errors.pop(slot, None)
        return previous

    def unload(self, slot: str, version: str) -> None:
        """Forget a non-active version; batches still running on it keep their reference until they finish."""
        if self.models.get(slot) is not None and self.models[slot].manifest.version == version:
            raise ValueError(f"{slot}:{version} is active")
        self.versions.get(slot, {}).pop(version, None)
        self.memory.release(self.memory_key(slot, version))

    def install(self, slot: str, model: LoadedModel) -> None:
        """Make a model loaded elsewhere (a staging key) the slot's active version, replacing any entry of the same
        version string (another model may carry it)."""
        staged_key, key = self.memory_key(model.slot, model.manifest.version), self.memory_key(slot,
                                                                                                model.manifest.version)
        if model.footprint is not None and staged_key != key:
            self.memory.release(staged_key)
            self.memory.release(key)  # the same version string from another model is replaced below
            self.memory.reserve(key, model.footprint, model.batch_cap)
        model.slot = slot
        self.versions.setdefault(slot, {})[model.manifest.version] = model
        self.models[slot] = model
        self.errors.pop(slot, None)

    def drop(self, slot: str) -> None:
        """Forget every version of a slot whose deployment was removed."""
        self.models.pop(slot, None)
        for version in self.versions.pop(slot, {}):
            self.memory.release(self.memory_key(slot, version))
        self.errors.pop(slot, None)

    def load_all(self, slots: dict[str, tuple[str, str, int]],
                 budgets: dict[str, tuple[list[str], float]] | None = None, keep_free_mb: float = 0.0) -> None:
        """Load every slot (name, ref, max batch); a failure (a memory refusal too) is recorded and keeps the pool
        not ready, with the reason, instead of crashing the process. Every model is reserved at batch 1 first, then
        the rest of the budget is shared (runners/memory.share_caps), so load order decides nothing. budgets:
        deployment -> (its slots, its memory_mb): its slots share that budget the same way (refused when their
        batch-1 needs exceed it). keep_free_mb: left out of the sharing (room for on-demand deployments)."""
        for slot, (name, ref, max_batch) in slots.items():
            try:
                self.load(slot, name, ref, max_batch=1, warm_batch=max_batch)
            except Exception as exc:  # any load failure must surface as not-ready with a reason
                log.exception("failed to load %s (%s:%s)", slot, name, ref)
                self.errors[slot] = f"{type(exc).__name__}: {exc}"
        for dep, (members, budget_mb) in (budgets or {}).items():
            needs = {s: self.models[s].footprint or Footprint(0.0, 0.0, 1) for s in members if s in self.models}
            if sum(fp.need(1) for fp in needs.values()) > budget_mb:
                for s in members:
                    self.drop(s)
                self.errors[dep] = (f"MemoryRefused: {dep}: its models need "
                                    f"{sum(fp.need(1) for fp in needs.values()):.1f} MB at batch 1 ("
                                    + ", ".join(f"{s} {fp.need(1):.1f}" for s, fp in needs.items())
                                    + f"), more than its memory_mb {budget_mb:.1f}")
                log.error("REFUSED: %s", self.errors[dep])
        loaded = {slot: (self.models[slot], slots[slot][2]) for slot in slots if slot in self.models}
        keys = {slot: self.memory_key(slot, m.manifest.version) for slot, (m, _) in loaded.items()}
        caps = share_caps({keys[s]: (m.footprint or Footprint(0.0, 0.0, 1), mb) for s, (m, mb) in loaded.items()},
                          self.memory.free_mb - keep_free_mb)
        for members, budget_mb in (budgets or {}).values():
            group = {keys[s]: (loaded[s][0].footprint or Footprint(0.0, 0.0, 1), loaded[s][1])
                     for s in members if s in loaded}
            own = share_caps(group, budget_mb - sum(fp.need(1) for fp, _ in group.values()))
            caps.update({k: min(caps[k], cap) for k, cap in own.items()})
        for slot, (model, max_batch) in loaded.items():
            model.batch_cap = caps[keys[slot]]
            self.memory.set_cap(keys[slot], model.footprint or Footprint(0.0, 0.0, 1), model.batch_cap)
            if model.batch_cap < max_batch:
                log.warning("%s: memory budget caps its batch at %d (configured %d)", keys[slot], model.batch_cap,
                            max_batch)

    @property
    def ready(self) -> bool:
        return not self.errors and bool(self.models)

    def run(self, slot: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.run_model(self.models[slot], feeds)

    def run_model(self, model: LoadedModel, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run; if the accelerator provider fails at run time, rebuild the session on CPU and run again."""
        try:
            if self.settings.faults.provider_fault == "run" and model.warm and model.provider_fallback is None \
                    and model.provider != NUMPY:
                raise ProviderFault("injected: accelerator provider failed at run time")
            return model.run(feeds)
        except Exception as exc:  # classified below
            if model.provider in (CPU, NUMPY) and not isinstance(exc, ProviderFault):
                raise
            log.error("provider %s failed at run time for %s (%s); moving to CPU", model.provider, model.slot, exc)
            model.session = _session(model.directory / model.manifest.model_file, self.settings, [CPU])
            model.provider, model.provider_fallback = CPU, f"run: {type(exc).__name__}: {exc}"
            return model.run(feeds)

    def describe(self) -> dict:
        return {
            "ready": self.ready,
            "errors": self.errors,
            "memory": self.memory.describe(),
            "threads": thread_layout(self.settings),
            "models": {
                slot: {"name": m.manifest.name, "version": m.manifest.version, "provider": m.provider,
                       "load_seconds": round(m.load_seconds, 3), "provider_fallback": m.provider_fallback,
                       "memory": None if m.footprint is None else {
                           "resident_mb": round(m.footprint.resident_mb, 2),
                           "per_item_mb": round(m.footprint.per_item_mb, 3), "batch_cap": m.batch_cap},
                       "sha256": m.manifest.file(m.manifest.model_file).sha256,
                       "license": m.manifest.source.license,
                       "source": {"kind": m.manifest.source.kind, "url": m.manifest.source.url,
                                  "description": m.manifest.source.description},
                       "loaded_versions": sorted(self.versions.get(slot, {}))}
                for slot, m in list(self.models.items())  # a copy: loads on other threads install models
            },
        }
