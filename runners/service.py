"""The shared runner tier: one BentoML service with one adaptive-batching API per model slot.

Inputs are plain tensors: image batches [n, 3, S, S], ragged token-id sequences (padded here, per batch, to the
longest item), and forecast windows [n, context]. Batch limits per slot come from the typed config.
"""
from __future__ import annotations

import json
import logging
import sys
import time

import bentoml
import numpy as np
from prometheus_client import Counter, Gauge, Histogram

from configs.settings import get_settings
from models.cache import open_serving_registry
from runners.faults import inject_faults
from runners.pool import ModelPool
from runners.ragged import pad_sequences
from services.common.metrics import observe_rss
from services.common.request_log import json_logger

log = logging.getLogger("triserve.runner")
batch_log = json_logger("triserve.runner.batches", logging.StreamHandler(sys.stdout))  # a JSON line per batch
settings = get_settings()

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


def _batching(slot: str) -> dict:
    b = SLOTS[slot].batching
    return {"batchable": True, "max_batch_size": b.max_batch_size, "max_latency_ms": b.max_latency_ms}


@bentoml.service(
    name="triserve-runner",
    workers=settings.runner.workers,
    resources={"gpu": 1},
    traffic={"timeout": settings.runner.timeout_s},
    # The stock client recycles its HTTP session every 100 requests while calls are in flight and drops them
    # ("Connector is closed"); a session per process lifetime removes that source of 5xx.
    runner_connection={"max_requests": 1_000_000_000, "max_age": 1e9},
)
class ModelRunner:
    def __init__(self) -> None:
        if settings.runner.startup_delay_s:
            time.sleep(settings.runner.startup_delay_s)
        self.pool = ModelPool(open_serving_registry(settings), settings.runner)
        self.pool.load_all({slot: (s.name, s.ref) for slot, s in SLOTS.items()})
        for slot, m in self.pool.models.items():
            MODEL_INFO.labels(slot, m.manifest.name, m.manifest.version, m.manifest.file(m.manifest.model_file).sha256,
                              m.provider).set(1)
            LOAD_SECONDS.labels(slot, m.manifest.name, m.manifest.version).set(m.load_seconds)

    def __is_ready__(self) -> bool:
        return self.pool.ready

    def _serve(self, slot: str, items: list[dict]) -> list[dict]:
        """Items are {"x": one tensor (or ragged token ids), "deadline": epoch seconds or None}. Expired items are
        answered {"error": "deadline_exceeded"} without compute; the rest share one ONNX Runtime call."""
        now = time.time()
        live = [i for i, it in enumerate(items) if not it.get("deadline") or it["deadline"] > now]
        results: list[dict] = [{"error": "deadline_exceeded"} for _ in items]
        if len(live) < len(items):
            EXPIRED.labels(slot).inc(len(items) - len(live))
        if live:
            for i, out in zip(live, self._run(slot, [items[i]["x"] for i in live])):
                results[i] = out
            batch_log.info(json.dumps({"event": "batch", "slot": slot, "size": len(live),
                                       "expired": len(items) - len(live),
                                       "infer_ms": round(results[live[0]]["infer_ms"], 3),
                                       "request_ids": sorted({items[i].get("rid", "") for i in live})}))
        observe_rss("runner")
        return results

    def _run(self, slot: str, xs: list[np.ndarray]) -> list[dict]:
        """One ONNX Runtime call for the batch (or one per item for per_item slots); each item gets its row."""
        model = self.pool.models[slot]
        n = len(xs)
        started = time.perf_counter()
        inject_faults(slot, settings.runner.faults)
        if SLOTS[slot].batching.per_item:
            out = [self.pool.run(slot, self._feeds(model, [x]))[0][0] for x in xs]
        else:
            out = self.pool.run(slot, self._feeds(model, xs))[0]
        if slot in settings.runner.faults.nan_output:
            out = np.full_like(np.asarray(out, dtype=np.float32), np.nan)
        infer_ms = (time.perf_counter() - started) * 1000
        BATCH_SIZE.labels(slot, model.manifest.name).observe(n)
        BATCH_SECONDS.labels(slot, model.manifest.name).observe(infer_ms / 1000)
        meta = {"batch": n, "infer_ms": infer_ms, "model": model.manifest.name, "version": model.manifest.version}
        return [{"y": out[i], **meta} for i in range(n)]

    @staticmethod
    def _feeds(model, xs: list[np.ndarray]) -> dict[str, np.ndarray]:
        """Ragged token sequences are padded to the longest in the batch (+ mask); fixed-shape tensors stacked."""
        if "attention_mask" in model.input_names:
            ids, mask = pad_sequences(xs, model.manifest.preprocess.pad_token_id)
            return {"input_ids": ids, "attention_mask": mask}
        return {model.input_names[0]: np.ascontiguousarray(np.stack(xs), dtype=np.float32)}

    @bentoml.api(**_batching("detection"))
    def detection(self, items: list[dict]) -> list[dict]:
        return self._serve("detection", items)

    @bentoml.api(**_batching("detection_fallback"))
    def detection_fallback(self, items: list[dict]) -> list[dict]:
        return self._serve("detection_fallback", items)

    @bentoml.api(**_batching("text"))
    def text(self, items: list[dict]) -> list[dict]:
        return self._serve("text", items)

    @bentoml.api(**_batching("text_fallback"))
    def text_fallback(self, items: list[dict]) -> list[dict]:
        return self._serve("text_fallback", items)

    @bentoml.api(**_batching("forecast"))
    def forecast(self, items: list[dict]) -> list[dict]:
        return self._serve("forecast", items)

    @bentoml.api(**_batching("forecast_fallback"))
    def forecast_fallback(self, items: list[dict]) -> list[dict]:
        return self._serve("forecast_fallback", items)

    @bentoml.api
    def status(self) -> dict:
        """Loaded models, their versions and providers, and load errors (the reason behind not-ready)."""
        return self.pool.describe()
