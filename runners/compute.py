"""The compute host: runs batches of items on the models the pool holds (every `infer` call of the runner).

Why a module of its own: this is the runner's hot path, and it only reads what is served: which slots and versions are
loaded (runners/pool.py) and how each slot runs, batched or item by item (runners/repository_state.py); it never
changes them. An item for an on-demand deployment that is not loaded asks its residency to load it
(runners/residency.py). How items become ONNX feeds is the model family's runner hook (families/<family>/runtime.py);
this module knows slots and tensors, never tasks.
"""
from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from triserve import families
from triserve.configs.deployments import FALLBACK_SUFFIX
from triserve.configs.settings import get_settings
from triserve.observability.metrics import observe_rss
from triserve.observability.request_log import stdout_json_logger
from triserve.runners.faults import inject_faults
from triserve.runners.memory import MB
from triserve.runners.metrics import BATCH_SECONDS, BATCH_SIZE, EXECUTIONS, EXPIRED, MEMORY_SPLITS, MODEL_MEMORY
from triserve.runners.pool import LoadedModel, ModelPool
from triserve.runners.ragged import length_buckets, token_groups
from triserve.runners.repository_state import RepositoryState
from triserve.runners.residency import REFUSED, Residency

batch_log = stdout_json_logger("triserve.runner.batches")  # a JSON line per batch
settings = get_settings()


def feeds(model: LoadedModel, xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The model family's feeds (families/<family>/runtime.py): padding, tensorising, stacking."""
    return families.runtime(model.manifest.task).feeds(model.manifest, model.input_names, xs)


def compacted(model: LoadedModel, out: dict, keep: dict | None) -> dict:
    """An item's answer cut to what its caller will read, when the caller said how (`keep`) and the family's runtime
    can (a `compact(manifest, y, keep) -> (y, facts)` hook: anchor heads send back only the columns NMS can keep
    instead of every anchor); anything else goes back whole."""
    compact = getattr(families.runtime(model.manifest.task), "compact", None) if keep else None
    if compact is None:
        return out
    y, facts = compact(model.manifest, out["y"], keep)
    return {**out, "y": y, "facts": facts} if facts else out


class ComputeHost:
    """Executes items on the loaded models: one ONNX Runtime call per (slot, version) present in a batch."""

    def __init__(self, pool: ModelPool, state: RepositoryState, residency: Residency) -> None:
        self.pool = pool
        self.state = state
        self.residency = residency

    def not_resident(self, slot: str) -> dict:
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

    def serve(self, items: list[dict]) -> list[dict]:
        """Items are {"slot": a slot key, "x": one tensor (or ragged token ids), "deadline": epoch seconds or None,
        "rid": request id, "version": a loaded version or None for the active one, optionally "keep": what of the
        output the caller will read (see compacted)}. Expired items are answered
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
                answer = self.not_resident(slot)
                for i in idx:
                    results[i] = answer
                continue
            self.residency.touch(slot.removesuffix(FALLBACK_SUFFIX))
            for i, out in zip(idx, self.run(slot, model, [items[i]["x"] for i in idx])):
                results[i] = compacted(model, out, items[i].get("keep"))
            # the measured split (rollout status): requests, not items (a request's items share its id)
            self.state.count(slot, model.manifest.version,
                             len({items[i].get("rid") for i in idx if "error" not in results[i]}))
            batch_log.info(json.dumps({"event": "batch", "slot": slot, "version": model.manifest.version,
                                       "size": len(idx), "calls": results[idx[0]].get("calls"),
                                       "expired": expired.get(slot, 0),
                                       "infer_ms": round(results[idx[0]]["infer_ms"], 3),
                                       "request_ids": sorted({items[i].get("rid", "") for i in idx})}))
        observe_rss("runner")
        return results

    def run(self, slot: str, model: LoadedModel, xs: list[np.ndarray]) -> list[dict]:
        """One ONNX Runtime call for the batch (or one per item for per_item slots and fixed-batch graphs); each
        item gets its row."""
        n = len(xs)
        started = time.perf_counter()
        inject_faults(slot, settings.runner.faults)
        # the memory reservation's batch (runners/memory.py; its compute batch when configured): never more at once
        cap = max(model.batch_cap, 1)
        out: list[Any] | np.ndarray  # a row per item
        per_item = self.state.per_item(slot, model)
        largest = 1
        calls = 0
        if per_item:
            out = [self.pool.run_model(model, feeds(model, [x]))[0][0] for x in xs]
            calls = n
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
                    calls += 1
                    rows = self.pool.run_model(model, feeds(model, [xs[i] for i in group]))[0]
                    for i, row in zip(group, rows):
                        out[i] = row
            if split:
                MEMORY_SPLITS.labels(slot).inc()
        else:
            chunk = self.state.compute_batch(slot)
            if n > cap and (chunk is None or cap < chunk):  # the memory budget split it, not the configured chunk
                MEMORY_SPLITS.labels(slot).inc()
            largest = min(n, cap)
            out = [row for k in range(0, n, cap)
                   for row in self.pool.run_model(model, feeds(model, xs[k: k + cap]))[0]]
            calls = -(-n // cap)
        if largest > model.peak_batch and model.footprint is not None:  # the memory it has really needed
            model.peak_batch = largest
            MODEL_MEMORY.labels(slot, model.manifest.version, "peak").set(model.footprint.need(largest) * MB)
        if slot in settings.runner.faults.nan_output:
            out = np.full_like(np.asarray(out, dtype=np.float32), np.nan)
        infer_ms = (time.perf_counter() - started) * 1000
        BATCH_SIZE.labels(slot, model.manifest.name).observe(n)
        BATCH_SECONDS.labels(slot, model.manifest.name).observe(infer_ms / 1000)
        EXECUTIONS.labels(slot, model.manifest.name, model.manifest.version, str(n)).observe(infer_ms / 1000)
        meta = {"batch": n, "calls": calls, "infer_ms": infer_ms, "model": model.manifest.name,
                "version": model.manifest.version}
        return [{"y": out[i], **meta} for i in range(n)]
