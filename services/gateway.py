"""The API tier: one BentoML service exposing the three task APIs over the shared runner tier.

    bentoml serve services.gateway:Gateway        # REST on :3000, OpenAPI at /docs, /readyz, /livez, /metrics

Each task lives in its own package (schemas, preprocess, postprocess, service); this module wires them to the runner,
installs the error model and request-id/body-cap middleware, and reports readiness.
"""
from __future__ import annotations

import asyncio
import logging

import bentoml
from fastapi import Depends, FastAPI

from configs.settings import get_settings
from models.cache import open_serving_registry
from runners.local import LocalRunner
from runners.service import SLOTS, ModelRunner
from services.common.drift import QualityMonitor
from services.common.errors import install_error_handlers
from services.common.inference import Protection
from services.common import heapdump, memory
from services.common.metrics import settle_heap
from services.common.request_context import ContentTypeMiddleware, RequestContextMiddleware
from services.common.request_log import RequestLog
from services.common.runner_client import RunnerClient
from services.common.tracing import service_tracing
from services.common.rollout import CanaryGuard, ModelCatalog, RoutingTable, ShadowMirror
from services.gateway_deps import admin_guard
from services.rollout_api import router as rollout_router
from services.detection.service import DetectionPipeline
from services.detection.service import router as detection_router
from services.forecast.service import ForecastPipeline
from services.forecast.service import router as forecast_router
from services.text.service import TextPipeline
from services.text.service import router as text_router
from services.protocols.grpc_server import start_grpc
from services.protocols.oip_rest import router as oip_router

log = logging.getLogger("triserve.gateway")
settings = get_settings()
memory.install(settings.memory)  # before any request thread allocates

app = FastAPI(title="triserve", version="0.1.0",
              description="Detection, text classification and forecasting over one adaptive-batching runner tier. "
                          "Errors share one model: {error: {code, message, details, request_id}}.")
install_error_handlers(app)
# Starlette runs the last added middleware first: request id and body cap wrap the content-type check.
app.add_middleware(ContentTypeMiddleware, rules={"/v1/detect": "application/json", "/v1/classify": "application/json",
                                                 "/v1/forecast": "application/json",
                                                 "/v1/detect/upload": "multipart/form-data"})
app.add_middleware(RequestContextMiddleware, max_body_bytes=settings.gateway.max_body_bytes,
                   request_log=RequestLog(settings.observability),
                   max_inflight_requests=settings.admission.max_inflight_requests)
for r in (detection_router, text_router, forecast_router, rollout_router):
    app.include_router(r)
app.include_router(oip_router)  # Open Inference Protocol v2 over REST (/v2/...)


@app.get("/v1/models", tags=["operations"], summary="Models loaded by the runner tier (versions, providers)")
async def list_models() -> dict:
    gateway = bentoml.get_current_service()
    return await gateway.runner.to_async.status()


@app.get("/admin/protection", tags=["operations"], summary="Breaker states and queue loads (admin key required)")
async def protection_state(client=Depends(admin_guard)) -> dict:
    prot = bentoml.get_current_service().protection
    return {"breakers": {task: b.describe() for task, b in prot.breakers.items()},
            "queues": {slot: {"inflight_items": load.inflight_items, "ms_per_batch": round(load.per_batch * 1000, 3),
                              "ms_per_item": round(load.per_item * 1000, 3)}
                       for slot, load in prot.admission.slots.items()},
            "caller": client.id}


@bentoml.service(name="triserve", workers=settings.gateway.workers, traffic={"timeout": settings.gateway.timeout_s},
                 logging={"access": {"enabled": settings.observability.bentoml_access_log}},
                 **service_tracing(settings.observability.trace_sample_rate,
                                   settings.observability.otlp_endpoint))
@bentoml.asgi_app(app, path="/")
class Gateway:
    if settings.runner.placement == "remote":  # "local": no runner service at all, see runners/local.py
        runner = bentoml.depends(ModelRunner)

    def __init__(self) -> None:
        self.settings = settings
        if settings.runner.placement == "local":
            self.runner = LocalRunner(ModelRunner.inner, SLOTS)
        self.protection = Protection(settings)
        self.routing = RoutingTable(settings.rollout)
        self.canary = CanaryGuard(settings.rollout)
        self.shadow = ShadowMirror(settings.rollout)
        self.loaded = False
        self.load_error: str | None = None
        self._pipelines: dict = {}
        self.quality: QualityMonitor | None = None
        try:
            self._pipelines = self._load_pipelines()
            self.loaded = True
        except Exception as exc:  # noqa: BLE001 - stay up and not-ready with the reason instead of crash-looping
            log.exception("gateway failed to load model metadata")
            self.load_error = f"{type(exc).__name__}: {exc}"
        settle_heap("gateway")
        heapdump.install("gateway", settings.observability.heap_snapshot_dir)

    def _load_pipelines(self) -> dict:
        registry = open_serving_registry(settings)
        self.registry = registry
        self.catalog = ModelCatalog(registry, {slot: cfg.name for slot, cfg in SLOTS.items()})
        self.startup = {}
        for slot, cfg in SLOTS.items():
            directory, manifest = registry.load_verified(cfg.name, cfg.ref)
            self.startup[slot] = self.catalog.get(slot, manifest.version)
        obs = settings.observability
        self.quality = QualityMonitor([m.manifest for m in self.startup.values()], obs.drift_window,
                                      obs.drift_every, obs.drift_min_values)
        return {
            "detection": DetectionPipeline(settings.detection_limits),
            "text": TextPipeline(settings.text_limits),
            "forecast": ForecastPipeline(settings.forecast_limits, self.startup["forecast"].manifest),
        }

    @property
    def runner_client(self) -> RunnerClient:
        """Created on first use, inside the worker's event loop (batchers hold per-loop state)."""
        client = self.__dict__.get("_runner_client")
        if client is None:
            # the per-slot batch limits admission already holds
            client = self.__dict__["_runner_client"] = RunnerClient(self.runner, settings,
                                                                     self.protection.admission.max_batch)
        return client

    def active_manifests(self, task: str) -> dict:
        """slot -> manifest of the version each slot of `task` serves now (startup versions until routing is known)."""
        out = {}
        for slot in (task, f"{task}_fallback"):
            active = self.routing.table.get(slot, {}).get("active")
            out[slot] = (self.catalog.get(slot, active) if active else self.startup[slot]).manifest
        return out

    async def withdraw_canary(self, slot: str) -> None:
        """Automatic canary rollback: stop routing to the candidate everywhere (the runner is the source of truth)."""
        try:
            await self.runner.to_async.set_canary(slot=slot, version=None)
            await self.routing.refresh(self.runner)
        except Exception:  # noqa: BLE001 - logged; the next judgement retries
            log.exception("could not withdraw the canary of %s", slot)

    @bentoml.on_startup
    async def _start_grpc(self) -> None:
        """gRPC on this worker's event loop: typed APIs, OIP v2, health, reflection (services/protocols)."""
        self._grpc = await start_grpc(self, settings.grpc)

    @bentoml.on_shutdown
    async def _stop_grpc(self) -> None:
        if getattr(self, "_grpc", None) is not None:
            await self._grpc.stop()

    def pipeline(self, task: str):
        return self._pipelines[task]

    async def __is_ready__(self) -> bool:
        """Ready = our metadata loaded and the runner answered its readiness probe quickly (it turns ready only after
        every model is loaded and warmed). A bounded wait keeps /readyz a fast 503 instead of a hanging probe."""
        if not self.loaded:
            return False
        try:
            return bool(await asyncio.wait_for(self.runner.is_ready(1), timeout=1.5))
        except Exception:  # noqa: BLE001 - timeout or connection refused both mean not ready
            return False
