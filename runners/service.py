"""The shared runner tier: one BentoML service with one adaptive-batching API per model slot.

Inputs are plain tensors: image batches [n, 3, S, S], ragged token-id sequences (padded here, per batch, to the
longest item), and forecast windows [n, context]. Batch limits per slot come from the typed config.
"""
from __future__ import annotations

import logging
import time

import bentoml
import numpy as np
from prometheus_client import Histogram

from configs.settings import get_settings
from models.registry import LocalRegistry
from runners.pool import ModelPool
from runners.ragged import pad_sequences

log = logging.getLogger("triserve.runner")
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
        self.pool = ModelPool(LocalRegistry(settings.registry_dir), settings.runner)
        self.pool.load_all({slot: (s.name, s.ref) for slot, s in SLOTS.items()})

    def __is_ready__(self) -> bool:
        return self.pool.ready

    def _run(self, slot: str, feeds: dict[str, np.ndarray]) -> list[dict]:
        """One ONNX Runtime call for the whole batch; each item gets its output row plus batch facts."""
        model = self.pool.models[slot]
        n = len(next(iter(feeds.values())))
        started = time.perf_counter()
        if SLOTS[slot].batching.per_item:
            out = [model.run(self._item_feeds(slot, feeds, i))[0][0] for i in range(n)]
        else:
            out = model.run(feeds)[0]
        infer_ms = (time.perf_counter() - started) * 1000
        BATCH_SIZE.labels(slot, model.manifest.name).observe(n)
        BATCH_SECONDS.labels(slot, model.manifest.name).observe(infer_ms / 1000)
        meta = {"batch": n, "infer_ms": infer_ms, "model": model.manifest.name, "version": model.manifest.version}
        return [{"y": out[i], **meta} for i in range(n)]

    def _item_feeds(self, slot: str, feeds: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
        """Item i alone; padded sequences are cut back to that item's own length."""
        item = {k: v[i: i + 1] for k, v in feeds.items()}
        if "attention_mask" in item:
            length = int(item["attention_mask"].sum())
            item = {k: v[:, :length] for k, v in item.items()}
        return item

    def _image_feeds(self, slot: str, images: np.ndarray) -> dict[str, np.ndarray]:
        return {self.pool.models[slot].input_names[0]: np.ascontiguousarray(images, dtype=np.float32)}

    def _text_feeds(self, slot: str, token_ids: list[np.ndarray]) -> dict[str, np.ndarray]:
        pad_id = self.pool.models[slot].manifest.preprocess.pad_token_id
        ids, mask = pad_sequences(token_ids, pad_id)
        return {"input_ids": ids, "attention_mask": mask}

    def _window_feeds(self, slot: str, windows: np.ndarray) -> dict[str, np.ndarray]:
        return {self.pool.models[slot].input_names[0]: np.ascontiguousarray(windows, dtype=np.float32)}

    @bentoml.api(**_batching("detection"))
    def detection(self, images: np.ndarray) -> list[dict]:
        return self._run("detection", self._image_feeds("detection", images))

    @bentoml.api(**_batching("detection_fallback"))
    def detection_fallback(self, images: np.ndarray) -> list[dict]:
        return self._run("detection_fallback", self._image_feeds("detection_fallback", images))

    @bentoml.api(**_batching("text"))
    def text(self, token_ids: list[np.ndarray]) -> list[dict]:
        return self._run("text", self._text_feeds("text", token_ids))

    @bentoml.api(**_batching("text_fallback"))
    def text_fallback(self, token_ids: list[np.ndarray]) -> list[dict]:
        return self._run("text_fallback", self._text_feeds("text_fallback", token_ids))

    @bentoml.api(**_batching("forecast"))
    def forecast(self, windows: np.ndarray) -> list[dict]:
        return self._run("forecast", self._window_feeds("forecast", windows))

    @bentoml.api(**_batching("forecast_fallback"))
    def forecast_fallback(self, windows: np.ndarray) -> list[dict]:
        return self._run("forecast_fallback", self._window_feeds("forecast_fallback", windows))

    @bentoml.api
    def status(self) -> dict:
        """Loaded models, their versions and providers, and load errors (the reason behind not-ready)."""
        return self.pool.describe()
