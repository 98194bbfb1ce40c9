"""The shared runner tier: one BentoML service with one adaptive-batching API per model slot.

Inputs are plain tensors: letterboxed images (S x S x 3 uint8 from the gateway, [3, S, S] float32 from OIP clients),
ragged token-id sequences (padded here, per batch, to the longest item), and forecast windows [n, context]. Batch
limits per slot come from the typed config.
"""
from __future__ import annotations

import json
import logging
import threading
import time

import bentoml
import numpy as np
from prometheus_client import Counter, Gauge, Histogram

from configs.settings import get_settings
from models.cache import open_serving_registry
from runners.faults import inject_faults
from runners.pool import ModelPool
from runners.ragged import length_buckets, pad_sequences
from runners.wire import pickled_response, sent_pickle
from services.detection.preprocess import network_input
from services.common import heapdump, memory
from services.common.metrics import observe_rss, settle_heap
from services.common.request_log import stdout_json_logger
from services.common.tracing import service_tracing

log = logging.getLogger("triserve.runner")
batch_log = stdout_json_logger("triserve.runner.batches")  # a JSON line per batch
settings = get_settings()
memory.install(settings.memory)  # before any request thread allocates

SLOTS = {
    "detection": settings.detection.primary,
    "detection_fallback": settings.detection.fallback,
    "text": settings.text.primary,
    "text_fallback": settings.text.fallback,
    "forecast": settings.forecast.primary,
    "forecast_fallback": settings.forecast.fallback,
}

BATCH_SIZE = Histogram("triserve_runner_batch_size", "Items per ONNX Runtime call, per model slot.",
                       ["slot", "model"], buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
EXPIRED = Counter("triserve_runner_expired_total", "Items dropped before compute because their deadline passed.",
                  ["slot"])
MODEL_INFO = Gauge("triserve_model_info", "Loaded model per slot (value 1).", ["slot", "name", "version", "sha256",
                   "provider"], multiprocess_mode="max")
LOAD_SECONDS = Gauge("triserve_model_load_seconds", "Load + verify + warm-up time per model.",
                     ["slot", "model", "version"], multiprocess_mode="max")
BATCH_SECONDS = Histogram("triserve_runner_batch_seconds", "ONNX Runtime time per batch, per model slot.",
                          ["slot", "model"],
                          buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))


def _answer(results: list[dict], ctx: bentoml.Context):
    """Gateway-batched pickle calls get one pickled body (runners/wire.py); BentoML's dispatcher (runner batching)
    needs the list to split it between the requests it merged, and other callers get BentoML's normal answer."""
    if settings.runner.batching == "gateway" and sent_pickle(ctx):
        return pickled_response(results)
    return results


def _batching(slot: str) -> dict:
    """BentoML's dispatcher merges calls only when batching happens here; gateway-batched calls arrive whole."""
    b = SLOTS[slot].batching
    if settings.runner.batching == "gateway":
        return {}
    return {"batchable": True, "max_batch_size": b.max_batch_size, "max_latency_ms": b.max_latency_ms}


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
    def __init__(self) -> None:
        if settings.runner.startup_delay_s:
            time.sleep(settings.runner.startup_delay_s)
        self.pool = ModelPool(open_serving_registry(settings), settings.runner)
        self.pool.load_all({slot: (s.name, s.ref) for slot, s in SLOTS.items()})
        self.rollout: dict[str, dict] = {}  # slot -> {"canary": {"version", "weight"} | None, "shadow": version}
        self._control = threading.Lock()
        for slot, m in self.pool.models.items():
            MODEL_INFO.labels(slot, m.manifest.name, m.manifest.version, m.manifest.file(m.manifest.model_file).sha256,
                              m.provider).set(1)
            LOAD_SECONDS.labels(slot, m.manifest.name, m.manifest.version).set(m.load_seconds)
        settle_heap("runner")
        heapdump.install("runner", settings.observability.heap_snapshot_dir)

    def __is_ready__(self) -> bool:
        return self.pool.ready

    def _serve(self, slot: str, items: list[dict]) -> list[dict]:
        """Items are {"x": one tensor (or ragged token ids), "deadline": epoch seconds or None, "rid": request id,
        "version": a loaded version or None for the active one}. Expired items are answered
        {"error": "deadline_exceeded"} without compute; items asking for a version that is not loaded get
        {"error": "version_unavailable"}; the rest share one ONNX Runtime call per version."""
        now = time.time()
        results: list[dict] = [{"error": "deadline_exceeded"} for _ in items]
        groups: dict[str | None, list[int]] = {}
        for i, it in enumerate(items):
            if not it.get("deadline") or it["deadline"] > now:
                groups.setdefault(it.get("version"), []).append(i)
        live = sum(len(g) for g in groups.values())
        if live < len(items):
            EXPIRED.labels(slot).inc(len(items) - live)
        for version, idx in groups.items():
            try:
                model = self.pool.get(slot, version)
            except KeyError:
                for i in idx:
                    results[i] = {"error": "version_unavailable"}
                continue
            for i, out in zip(idx, self._run(slot, model, [items[i]["x"] for i in idx])):
                results[i] = out
            batch_log.info(json.dumps({"event": "batch", "slot": slot, "version": model.manifest.version,
                                       "size": len(idx), "expired": len(items) - live,
                                       "infer_ms": round(results[idx[0]]["infer_ms"], 3),
                                       "request_ids": sorted({items[i].get("rid", "") for i in idx})}))
        observe_rss("runner")
        return results

    def _run(self, slot: str, model, xs: list[np.ndarray]) -> list[dict]:
        """One ONNX Runtime call for the batch (or one per item for per_item slots); each item gets its row."""
        n = len(xs)
        started = time.perf_counter()
        inject_faults(slot, settings.runner.faults)
        if SLOTS[slot].batching.per_item:
            out = [self.pool.run_model(model, self._feeds(model, [x]))[0][0] for x in xs]
        elif "attention_mask" in model.input_names:  # ragged: one call per length bucket, rows back in order
            out = [None] * n
            for group in length_buckets(xs, settings.runner.bucket_call_cost_tokens):
                rows = self.pool.run_model(model, self._feeds(model, [xs[i] for i in group]))[0]
                for i, row in zip(group, rows):
                    out[i] = row
        else:
            out = self.pool.run_model(model, self._feeds(model, xs))[0]
        if slot in settings.runner.faults.nan_output:
            out = np.full_like(np.asarray(out, dtype=np.float32), np.nan)
        infer_ms = (time.perf_counter() - started) * 1000
        BATCH_SIZE.labels(slot, model.manifest.name).observe(n)
        BATCH_SECONDS.labels(slot, model.manifest.name).observe(infer_ms / 1000)
        meta = {"batch": n, "infer_ms": infer_ms, "model": model.manifest.name, "version": model.manifest.version}
        return [{"y": out[i], **meta} for i in range(n)]

    @staticmethod
    def _feeds(model, xs: list[np.ndarray]) -> dict[str, np.ndarray]:
        """Ragged token sequences are padded to the longest in the batch (+ mask); fixed-shape tensors stacked; uint8
        letterboxed images tensorised with the manifest's preprocessing first."""
        if "attention_mask" in model.input_names:
            ids, mask = pad_sequences(xs, model.manifest.preprocess.pad_token_id)
            return {"input_ids": ids, "attention_mask": mask}
        if any(x.dtype == np.uint8 for x in xs):  # letterboxed images from the gateway (OIP items are float)
            pre = model.manifest.preprocess
            xs = [network_input(x, pre.scale, pre.color_order) for x in xs]
        return {model.input_names[0]: np.ascontiguousarray(np.stack(xs), dtype=np.float32)}

    @bentoml.api(**_batching("detection"))
    def detection(self, items: list[dict], ctx: bentoml.Context) -> list[dict]:
        return _answer(self._serve("detection", items), ctx)

    @bentoml.api(**_batching("detection_fallback"))
    def detection_fallback(self, items: list[dict], ctx: bentoml.Context) -> list[dict]:
        return _answer(self._serve("detection_fallback", items), ctx)

    @bentoml.api(**_batching("text"))
    def text(self, items: list[dict], ctx: bentoml.Context) -> list[dict]:
        return _answer(self._serve("text", items), ctx)

    @bentoml.api(**_batching("text_fallback"))
    def text_fallback(self, items: list[dict], ctx: bentoml.Context) -> list[dict]:
        return _answer(self._serve("text_fallback", items), ctx)

    @bentoml.api(**_batching("forecast"))
    def forecast(self, items: list[dict], ctx: bentoml.Context) -> list[dict]:
        return _answer(self._serve("forecast", items), ctx)

    @bentoml.api(**_batching("forecast_fallback"))
    def forecast_fallback(self, items: list[dict], ctx: bentoml.Context) -> list[dict]:
        return _answer(self._serve("forecast_fallback", items), ctx)

    @bentoml.api
    def status(self) -> dict:
        """Loaded models, their versions and providers, and load errors (the reason behind not-ready)."""
        return self.pool.describe()

    # --- rollout control (called by the gateway's admin API) ---------------------------------------------------
    @bentoml.api
    def routing(self) -> dict:
        """Per slot: the active version, every loaded version, the canary (version, weight) and the shadow."""
        return self._routing()

    def _routing(self) -> dict:
        # a plain method: API methods must not call each other (BentoML serialises sync APIs on one thread)
        return {slot: {"active": m.manifest.version, "loaded": sorted(self.pool.versions.get(slot, {})),
                       **self.rollout.get(slot, {"canary": None, "shadow": None})}
                for slot, m in self.pool.models.items()}

    @bentoml.api
    def stage(self, slot: str, ref: str) -> dict:
        """Resolve, pull/verify, load and warm a version next to the active one (not serving yet). A failure (unknown
        version, tampered file, broken graph) is returned as {"error": ...}; the active version is untouched."""
        try:
            with self._control:
                model = self.pool.load(slot, SLOTS[slot].name, ref, activate=False)
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
            model = self.pool.get(slot)
            MODEL_INFO.labels(slot, model.manifest.name, version, model.manifest.file(model.manifest.model_file).sha256,
                              model.provider).set(1)
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
        return self._routing()[slot]

    @bentoml.api
    def set_shadow(self, slot: str, version: str | None = None) -> dict:
        """Mirror the slot's traffic to a loaded candidate whose answers are compared, never returned."""
        with self._control:
            if version is not None:
                self.pool.get(slot, version)
            self.rollout.setdefault(slot, {"canary": None, "shadow": None})["shadow"] = version
        return self._routing()[slot]

    def _retire(self, slot: str, version: str) -> None:
        with self._control:
            roles = self.rollout.get(slot, {})
            in_use = {self.pool.models[slot].manifest.version, roles.get("shadow"),
                      (roles.get("canary") or {}).get("version")}
            if version not in in_use:
                self.pool.unload(slot, version)
                log.info("retired %s:%s", slot, version)
