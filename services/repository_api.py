"""Admin API for the model repository (admin key required): add, change and remove deployments at run time.

    GET    /admin/deployments              the repository as served (deployments + family defaults)
    PUT    /admin/deployments/{name}       body: a deployment without its name (family, model, fallback, limits)
    DELETE /admin/deployments/{name}
    POST   /admin/deployments/{name}/load     on-demand deployments: load (and warm) now, wait until resident
    POST   /admin/deployments/{name}/unload   on-demand deployments: evict now (its next request loads it again)

PUT stages every model of the deployment next to what serves (pull, verify sha256, load, warm), checks that the
fallback belongs to the family and answers with the primary's labels, then swaps the runner's repository in one step
and persists it (Settings.deployments_state_file), so requests never see a half-loaded deployment and a restart
serves the same set. A refusal (unknown model, tampered file, other label set) changes nothing. DELETE stops routing
to the deployment at once and unloads its models once the requests already on their way have finished. A deployment
with `residency: on_demand` is verified but not loaded by PUT: its first request or /load loads it
(runners/residency.py; Triton's explicit model control).
"""
from __future__ import annotations

import asyncio
import time
from typing import Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from triserve.configs.deployments import Deployment
from triserve.configs.settings import ModelSlot
from triserve.kernel.context import ServingContext
from triserve.kernel.errors import ApiError
from triserve.kernel.protection.access import Client
from triserve.services.audit import audit
from triserve.services.gateway_deps import admin_guard, loaded_context

router = APIRouter(prefix="/admin/deployments", tags=["operations"], dependencies=[Depends(audit)])


class DeploymentSpec(BaseModel):
    """A deployment as PUT sends it (its name is in the path)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"family": "text", "model": {"name": "minilm-intent", "ref": "stable"}, "residency": "on_demand",
         "description": "Intent classification of support messages"}]})
    family: str
    model: ModelSlot
    fallback: ModelSlot | None = None
    limits: dict = Field(default_factory=dict)
    description: str = ""
    residency: Literal["always", "on_demand"] = "always"
    memory_mb: float | None = None


@router.get("", summary="The model repository as served")
async def repository(_: Client = Depends(admin_guard), ctx: ServingContext = Depends(loaded_context)) -> dict:
    await ctx.routing.refresh(ctx.runner)
    return ctx.repository.model_dump(mode="json")


@router.put("/{name}", summary="Add a deployment, or replace one (staged, verified, warmed, then swapped)")
async def put_deployment(name: str, body: DeploymentSpec, client: Client = Depends(admin_guard),
                         ctx: ServingContext = Depends(loaded_context)) -> dict:
    started = time.perf_counter()
    try:
        dep = Deployment(name=name, **body.model_dump())
    except ValueError as exc:
        raise ApiError(422, "invalid_deployment", str(exc)[:1000], {"deployment": name}) from None
    result = await ctx.runner.to_async.add_deployment(deployment=dep.model_dump(mode="json"),
                                                      retire_after_s=ctx.settings.rollout.retire_after_s)
    if "error" not in result and ctx.fallback_runner is not None:  # its fallback is hosted in this API worker
        local = await ctx.fallback_runner.to_async.add_deployment(deployment=dep.model_dump(mode="json"),
                                                                  retire_after_s=ctx.settings.rollout.retire_after_s)
        result = {**result, "versions": {**result.get("versions", {}), **local.get("versions", {})},
                  **({"error": local["error"]} if "error" in local else {})}
    if "error" in result:
        raise ApiError(409, "deployment_refused", f"{name}: {result['error']}"[:1000], {"deployment": name})
    await ctx.routing.refresh(ctx.runner)
    for slot in dep.slots:  # verified manifests (and tokenizers) in this worker (off its event loop) before its
        await ctx.load_served(slot)  # first request
    return {**result, "by": client.id, "seconds": round(time.perf_counter() - started, 3)}


@router.delete("/{name}", summary="Remove a deployment (its models unload after in-flight requests finish)")
async def delete_deployment(name: str, client: Client = Depends(admin_guard),
                            ctx: ServingContext = Depends(loaded_context)) -> dict:
    result = await ctx.runner.to_async.remove_deployment(name=name,
                                                         retire_after_s=ctx.settings.rollout.retire_after_s)
    if "error" not in result and ctx.fallback_runner is not None:
        await ctx.fallback_runner.to_async.remove_deployment(name=name,
                                                             retire_after_s=ctx.settings.rollout.retire_after_s)
    if "error" in result:
        known = [d.name for d in ctx.repository.deployments]
        status = 404 if result["error"].startswith("KeyError") else 409
        raise ApiError(status, "unknown_deployment" if status == 404 else "deployment_refused",
                       f"{name}: {result['error']}"[:1000], {"deployment": name, "known": known})
    await ctx.routing.refresh(ctx.runner)
    return {**result, "by": client.id}


def _control_error(name: str, result: dict, ctx: ServingContext) -> ApiError:
    known = {d.name: d.residency for d in ctx.repository.deployments}
    if name not in known:
        return ApiError(404, "unknown_deployment", f"no deployment {name!r}", {"deployment": name,
                                                                              "known": sorted(known)})
    return ApiError(409, "not_on_demand", f"{name}: {result['error']}; only on-demand deployments are loaded and "
                    "unloaded explicitly", {"deployment": name, "residency": known[name]})


@router.post("/{name}/load", summary="Load an on-demand deployment now and wait (bounded) until it is resident")
async def load_deployment(name: str, wait_s: float = Query(60.0, ge=0, le=600), _: Client = Depends(admin_guard),
                          ctx: ServingContext = Depends(loaded_context)) -> dict:
    started = time.perf_counter()
    result = await ctx.runner.to_async.load_deployment(name=name)
    if "error" in result:
        raise _control_error(name, result, ctx)
    dep = ctx.repository.find(name)
    slots = list(dep.slots) if dep else [name]
    while True:
        status = await ctx.runner.to_async.status()
        states = status.get("slots", {})
        state = "resident" if all(states.get(s, {}).get("state") == "resident" for s in slots) else \
            states.get(name, {}).get("state")
        if state == "refused":
            reason = status.get("errors", {}).get(name)
            raise ApiError(409, "deployment_refused", f"{name}: {reason}"[:1000], {"deployment": name})
        if state == "resident" or time.perf_counter() - started >= wait_s:
            break
        await asyncio.sleep(0.1)
    await ctx.routing.refresh(ctx.runner)
    return {"deployment": name, "state": state, "seconds": round(time.perf_counter() - started, 3)}


@router.post("/{name}/unload", summary="Evict an on-demand deployment now (its next request loads it again)")
async def unload_deployment(name: str, _: Client = Depends(admin_guard),
                            ctx: ServingContext = Depends(loaded_context)) -> dict:
    result = await ctx.runner.to_async.unload_deployment(name=name)
    if "error" in result:
        raise _control_error(name, result, ctx)
    await ctx.routing.refresh(ctx.runner)
    return result
