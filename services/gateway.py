"""The API tier: one BentoML service exposing every model family's API over the shared runner tier.

    bentoml serve triserve.services.gateway:Gateway        # REST on :3000, OpenAPI at /docs, /readyz, /livez, /metrics

Each model family lives in its own package (families/: schemas, limits, preprocess, postprocess, REST router, OIP and
gRPC adapters); this module mounts their routers, builds the serving context the pipelines use (routing, catalogue,
protection, runner client), installs the error model and request-id/body-cap middleware, and reports readiness.
"""
from __future__ import annotations

import asyncio
import atexit
import logging
from typing import cast

import bentoml
from bentoml.exceptions import BentoMLException
from fastapi import Depends, FastAPI

from triserve import families
from triserve.configs.deployments import load_repository
from triserve.configs.settings import get_settings
from triserve.kernel.context import ServingContext
from triserve.kernel.protection.buckets import remove_own_table
from triserve.kernel.routing.drift import QualityMonitor
from triserve.kernel.routing.inference import Protection
from triserve.kernel.routing.rollout import CanaryGuard, ModelCatalog, RoutingTable, ShadowMirror
from triserve.models.cache import open_serving_registry
from triserve.observability import heapdump, memory
from triserve.observability.metrics import settle_heap
from triserve.observability.request_log import RequestLog
from triserve.observability.tracing import service_tracing
from triserve.runners.local import LocalRunner
from triserve.runners.service import ModelRunner, fallback_host
from triserve.services.arbiter import respawn_promptly
from triserve.services.bentoml_metrics import install as bentoml_metrics
from triserve.services.bentoml_timeout import install as bentoml_timeout
from triserve.services.client_schema import SchemaRoutes, client_routes
from triserve.services.console import mount as mount_console
from triserve.services.gateway_deps import admin_guard, loaded_context, worker_access
from triserve.services.http_edge import ContentTypeMiddleware, RequestContextMiddleware
from triserve.services.http_errors import install_error_handlers
from triserve.services.openapi import distribution_version, operation_id
from triserve.services.openapi import install as install_openapi
from triserve.services.ports import PortInUse, ensure_grpc_free
from triserve.services.protocols.oip_rest import router as oip_router
from triserve.services.protocols.rest import family_router
from triserve.services.repository_api import router as repository_router
from triserve.services.restricted import RestrictedApis, RestrictedRpcs
from triserve.services.rollout_api import router as rollout_router
from triserve.services.tls import bentoml_ssl, grpc_credentials

log = logging.getLogger("triserve.gateway")
settings = get_settings()
memory.install(settings.memory)  # before any request thread allocates
bentoml_metrics()  # route templates as BentoML's endpoint label, process and Python metrics; before the app is built
bentoml_timeout()  # traffic.timeout without a 60 s timer left behind per request (gateway and runner workers alike)

app = FastAPI(title="triserve", version=distribution_version(), generate_unique_id_function=operation_id,
              description=f"Model serving over one adaptive-batching ONNX runner tier, for every installed model "
                          f"family ({', '.join(families.names())}). Errors share one model: "
                          "{error: {code, message, details, request_id}}. Admin operations need an admin API key "
                          "(X-API-Key or Authorization: Bearer).")
install_error_handlers(app)
ROUTES = [route for name in families.names() for route in families.family(name).api.routes]
# Starlette runs the last added middleware first: request id and body cap wrap the content-type check.
app.add_middleware(ContentTypeMiddleware, rules={r.path: r.content_type for r in ROUTES})
app.add_middleware(RequestContextMiddleware, max_body_bytes=settings.gateway.max_body_bytes,
                   request_log=RequestLog(settings.observability),
                   max_inflight_requests=settings.admission.max_inflight_requests,
                   front_door=settings.admission.queue_control and settings.admission.queue_front_door,
                   access=worker_access,
                   family_by_path={r.path: name for name in families.names() for r in families.family(name).api.routes})
FAMILY_ROUTERS = [family_router(name) for name in families.names()]
for router in FAMILY_ROUTERS:
    app.include_router(router)
app.include_router(rollout_router)
app.include_router(repository_router)
app.include_router(oip_router)  # Open Inference Protocol v2 over REST (/v2/...)
mount_console(app, settings.gateway.console)  # the web console, /console (services/console)
install_openapi(app, settings.access.require_key_for_inference)  # operation ids, the API key, examples, health paths


@app.get("/v1/models", tags=["operations"], summary="Every deployment (family, default, models, versions, state) and "
                                                    "every loaded model by slot")
async def list_models(ctx: ServingContext = Depends(loaded_context)) -> dict:
    try:
        await ctx.routing.refresh(ctx.runner)
        status = await ctx.runner.to_async.status()
    except Exception as exc:  # noqa: BLE001 - the runner tier is away: say so, and show what this worker hosts
        status = {"ready": False, "models": {}, "slots": {}, "errors": {"runner": f"unreachable: {type(exc).__name__}"}}
    if ctx.fallback_runner is not None:  # fallbacks hosted in this API worker (runner.fallbacks='gateway')
        local = await ctx.fallback_runner.to_async.status()
        for key in ("models", "slots", "errors"):
            status[key] = {**status.get(key, {}), **local.get(key, {})}
    loaded = status.get("models", {})
    out = []
    defaults = {e["name"]: e["default"] for e in ctx.repository.describe()}
    for dep in ctx.repository.deployments:
        slots = {}
        for role, slot in (("model", dep.name), ("fallback", dep.fallback_slot)):
            if slot is None:
                continue
            routing = ctx.routing.table.get(slot, {})
            residency = status.get("slots", {}).get(slot, {})
            slots[role] = {"slot": slot, **{k: loaded.get(slot, {}).get(k)
                                            for k in ("name", "version", "provider", "sha256", "memory",
                                                      "license", "source")},
                           "state": residency.get("state"), "last_used_s": residency.get("last_used_s"),
                           "batching": {"max_batch_size": ctx.repository.max_batch(slot),
                                        "compute_batch": routing.get("compute_batch"),
                                        "memory_batch_cap": routing.get("batch_cap")},
                           "loaded_versions": routing.get("loaded", []), "canary": routing.get("canary"),
                           "shadow": routing.get("shadow"), "error": status.get("errors", {}).get(slot)}
        error = status.get("errors", {}).get(dep.name)
        # ready: requests are served now (resident) or on their first use (an on-demand deployment not loaded yet)
        ready = error is None and all(s["state"] in ("resident", "unloaded", "loading") and not s["error"]
                                      for s in slots.values())
        out.append({"name": dep.name, "family": dep.family, "default": defaults[dep.name],
                    "description": dep.description, "residency": dep.residency, "ready": ready, **slots,
                    "error": error})
    return {"deployments": out, "ready": status.get("ready"), "errors": status.get("errors", {}), "models": loaded,
            "runner_threads": status.get("threads"), "runner_startup": status.get("startup")}


@app.get("/admin/protection", tags=["operations"], summary="Breaker states and queue loads (admin key required)")
async def protection_state(client=Depends(admin_guard), ctx: ServingContext = Depends(loaded_context)) -> dict:
    prot = ctx.protection
    return {"breakers": {name: b.describe() for name, b in prot.breakers.items()},
            "queues": {slot: {"inflight_items": load.inflight_items, "ms_per_batch": round(load.per_batch * 1000, 3),
                              "ms_per_item": round(load.per_item * 1000, 3)}
                       for slot, load in prot.admission.slots.items()},
            "caller": client.id}


# `bentoml serve` imports this module in the arbiter too: at its exit the rate-limit table its API workers shared goes
atexit.register(remove_own_table, settings.access.shared_dir)


@bentoml.service(name="triserve", workers=settings.gateway.workers, traffic={"timeout": settings.gateway.timeout_s},
                 logging={"access": {"enabled": settings.observability.bentoml_access_log}},
                 # readiness is __is_ready__'s (the runner probed within 1.5 s); BentoML's own runner probe waits up
                 # to 5 s on a runner that is gone and would override the fallbacks='gateway' rule
                 runner_probe={"enabled": False},
                 **bentoml_ssl(settings.tls),
                 **service_tracing(settings.observability.trace_sample_rate,
                                   settings.observability.otlp_endpoint))
@bentoml.asgi_app(app, path="/")
class Gateway:
    if settings.runner.placement == "remote":  # "local": no runner service at all, see runners/local.py
        runner = bentoml.depends(ModelRunner)

    def __init__(self) -> None:
        self.settings = settings
        if settings.runner.placement == "local":
            # mypy keeps a class decorator's class as it was: @bentoml.service made ModelRunner a Service
            runner_service = cast("bentoml.Service[ModelRunner]", ModelRunner)
            self.runner = LocalRunner(runner_service.inner, ("infer",))
        # runner.fallbacks='gateway': the fallbacks run in this process, so they answer while the runner tier is away
        self.fallback_runner = LocalRunner(fallback_host(), ("infer",)) if settings.runner.fallbacks == "gateway" \
            else None
        self._runner_seen_ready = False
        self.loaded = False
        self.load_error: str | None = None
        self.ctx: ServingContext | None = None
        try:
            self.ctx = self._context()
            self.loaded = True
        except Exception as exc:  # stay up and not-ready with the reason instead of crash-looping
            log.exception("gateway failed to load model metadata")
            self.load_error = f"{type(exc).__name__}: {exc}"
        settle_heap("gateway")
        heapdump.install("gateway", settings.observability.heap_snapshot_dir)

    def _context(self) -> ServingContext:
        repository = load_repository(state_file=settings.deployments_state_file, overrides=settings.slots)
        registry = open_serving_registry(settings, repository)
        routing = RoutingTable(settings.rollout, repository, self.fallback_runner)
        catalog = ModelCatalog(registry, lambda slot: routing.repository.slots[slot].name)
        routing.prepare = catalog.prepare  # a new routing table is published once this worker has loaded its models
        manifests = []
        for slot, cfg in repository.slots.items():  # verified manifests (and tokenizers) before any traffic
            directory, manifest = registry.load_verified(cfg.name, cfg.ref)
            manifests.append(catalog.load(slot, manifest.version, cfg.name).manifest)
        obs = settings.observability
        quality = QualityMonitor(manifests, obs.drift_window, obs.drift_every, obs.drift_min_values)
        protection = Protection(settings, routing.batch_limit)
        return ServingContext(settings=settings, runner=self.runner, registry=registry, routing=routing,
                              catalog=catalog, protection=protection, canary=CanaryGuard(settings.rollout),
                              shadow=ShadowMirror(settings.rollout), quality=quality,
                              fallback_runner=self.fallback_runner)

    @bentoml.on_deployment
    def _own_grpc_port() -> None:
        """In the arbiter, before any worker starts: a taken gRPC port ends `bentoml serve` at once with its number
        (BentoML prints a BentoMLException as one line), instead of in the worker that binds it."""
        try:
            ensure_grpc_free(settings.grpc)
        except PortInUse as exc:
            raise BentoMLException(str(exc)) from exc

    @bentoml.on_deployment
    def _respawn_promptly() -> None:
        """In the arbiter, before it is made: a dead worker (a SIGKILLed runner) is started again within
        runner.respawn_check_s instead of BentoML's 0-10 s (services/arbiter.py)."""
        respawn_promptly(settings.runner.respawn_check_s)

    @bentoml.on_startup
    async def _start_grpc(self) -> None:
        """gRPC on one worker's event loop, the others standing by to take it over: typed APIs, OIP v2, health,
        reflection (services/protocols; grpc_server.py says why one worker). Imported here: the arbiter and the
        runner's workers import this module too and never serve gRPC (~0.2 s of their start)."""
        from triserve.services.protocols.grpc_server import start_grpc

        self._grpc = await start_grpc(self, settings.grpc, bentoml.server_context.worker_index,
                                      grpc_credentials(settings.tls), (RestrictedRpcs(settings.access),))

    @bentoml.on_shutdown
    async def _stop_grpc(self) -> None:
        grpc_server = getattr(self, "_grpc", None)  # absent or None: no gRPC role was started
        if grpc_server is not None:
            await grpc_server.stop()

    @bentoml.on_shutdown
    async def _close_runner_clients(self) -> None:
        if self.ctx is not None:
            await self.ctx.close()

    async def __is_ready__(self) -> bool:
        """Ready = our metadata loaded and the runner answered its readiness probe quickly (it turns ready only after
        every model is loaded and warmed). A bounded wait keeps /readyz a fast 503 instead of a hanging probe. With
        the fallbacks in this process (runner.fallbacks='gateway'): they must be loaded too, and once the runner tier
        has been ready, its outage degrades this instance (fallbacks answer) instead of taking it out of rotation."""
        if not self.loaded:
            return False
        if self.fallback_runner is not None and not await self.fallback_runner.is_ready():
            return False
        try:
            ready = bool(await asyncio.wait_for(self.runner.is_ready(1), timeout=1.5))
        except Exception:  # noqa: BLE001 - timeout or connection refused both mean not ready
            ready = False
        self._runner_seen_ready = self._runner_seen_ready or ready
        return ready or (self.fallback_runner is not None and self._runner_seen_ready)


# BentoML's SyncHTTPClient / AsyncHTTPClient read their methods from /schema.json: list the JSON inference routes there
# (services/client_schema.py), so `bentoml.SyncHTTPClient(url).classify(texts=[...])` calls /v1/classify itself.
cast("bentoml.Service[Gateway]", Gateway).add_asgi_middleware(
    SchemaRoutes, routes=client_routes(r for router in FAMILY_ROUTERS for r in router.routes))
# access.restricted_apis around BentoML's whole app: its /metrics, /livez and /schema.json too (services/restricted.py)
cast("bentoml.Service[Gateway]", Gateway).add_asgi_middleware(RestrictedApis, access=settings.access)
