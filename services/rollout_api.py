"""Admin API for rollouts (admin key required): hot swap (promote), rollback, canary, shadow.

A slot is one model of a deployment: '<deployment>' (its primary) or '<deployment>_fallback' (configs/deployments.py).

    POST   /admin/models/{slot}/promote   {"ref": "1.0.1-abc" | "canary", "alias": "stable"}
    POST   /admin/models/{slot}/rollback  {"alias": "stable"}         back to what served before the last promote
    POST   /admin/models/{slot}/canary    {"ref": "...", "weight": 0.1}      DELETE to withdraw
    POST   /admin/models/{slot}/shadow    {"ref": "..."}                     DELETE to stop
    GET    /admin/models                  routing per slot (active, loaded, canary, shadow, promotions, split)

Promote stages the version next to the active one (pull, verify sha256, load, warm), swaps atomically, and moves
the registry alias (recorded in the alias log with who did it); the old version stays loaded for
`rollout.retire_after_s` so in-flight requests finish on it. The runner remembers each promote with what served
before it (whatever that was: a version pinned by the deployment, another alias's target) and where the alias
pointed, so rollback returns to exactly that version and puts the alias back where the promote found it. Without such
a promote (the runner restarted since, or the alias was moved outside this service) rollback is a promote of the
alias's previous target in the registry's alias log.

The routing answer (GET) includes per slot the promotions a rollback can undo and the measured split: requests
answered per version since the slot's last promote or canary change, and the canary's share of them.
"""
from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from triserve.kernel.context import ServingContext
from triserve.kernel.errors import ApiError
from triserve.kernel.protection.access import Client
from triserve.models.registry import RegistryError
from triserve.models.stores import open_store
from triserve.services.audit import audit
from triserve.services.gateway_deps import admin_guard, loaded_context

router = APIRouter(prefix="/admin/models", tags=["operations"], dependencies=[Depends(audit)])


class PromoteRequest(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"ref": "3", "alias": "stable"}]})

    ref: str = Field(description="Version or alias to serve.", min_length=1, max_length=128)
    alias: str | None = Field("stable", description="Registry alias to move to it (null: serve without moving).")


class RollbackRequest(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"alias": "stable"}]})

    alias: str = Field("stable", description="Alias whose previous target is restored.")


class CanaryRequest(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"ref": "4", "weight": 0.1}]})

    ref: str = Field(min_length=1, max_length=128)
    weight: float = Field(gt=0, le=1, description="Share of traffic sent to the candidate: of request keys (sticky: "
                                                  "X-Canary-Key, API key, forwarded client address), else of "
                                                  "requests (drawn one by one).")


class ShadowRequest(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"ref": "4"}]})

    ref: str = Field(min_length=1, max_length=128)


def _slot(ctx: ServingContext, slot: str) -> str:
    slots = ctx.repository.slots
    if slot not in slots:
        raise ApiError(404, "unknown_slot", f"no model slot {slot!r}", {"slots": sorted(slots)})
    return slot


def _store(ctx: ServingContext):
    """Where aliases live: the configured registry (remote store or the local directory)."""
    settings = ctx.settings
    return open_store(settings.registry_uri or settings.registry_dir)


async def _call(ctx: ServingContext, method: str, **kwargs):
    try:
        return await getattr(ctx.runner.to_async, method)(**kwargs)
    except Exception as exc:  # runner-side failures (missing version, integrity) become a clear 409
        raise ApiError(409, "rollout_failed", f"{method} failed: {exc}"[:500], {"slot": kwargs.get("slot")}) from exc


async def _route(ctx: ServingContext, method: str, **kwargs) -> dict:
    """A routing change on the runner (canary, shadow), then the gateway's routing table re-read so the next request
    already follows it."""
    result = await _call(ctx, method, **kwargs)
    await ctx.routing.refresh(ctx.runner)
    return result


async def _stage(ctx: ServingContext, slot: str, ref: str) -> dict:
    staged = await _call(ctx, "stage", slot=slot, ref=ref)
    if "error" in staged:
        raise ApiError(409, "rollout_failed", f"{slot}:{ref} refused: {staged['error']}"[:500],
                       {"slot": slot, "ref": ref})
    await ctx.catalog.fetch(slot, staged["version"])  # verified manifest (+ tokenizer) ready before any traffic
    return staged


@router.get("", summary="Routing per slot: active, loaded, canary, shadow")
async def routing(_: Client = Depends(admin_guard), ctx: ServingContext = Depends(loaded_context)) -> dict:
    await ctx.routing.refresh(ctx.runner)
    return ctx.routing.table


@router.post("/{slot}/promote", summary="Hot swap a slot to a version (and move its alias)")
async def promote(slot: str, body: PromoteRequest, client: Client = Depends(admin_guard),
                  ctx: ServingContext = Depends(loaded_context)) -> dict:
    return await _promote(ctx, _slot(ctx, slot), body.ref, body.alias, client, {"kind": "promote"})


async def _promote(ctx: ServingContext, slot: str, ref: str, alias: str | None, client: Client,
                   record: dict, alias_to: str | None = None) -> dict:
    """Stage ref, swap it in (the runner records `record` with what served before), then move `alias` to it (or to
    `alias_to`: a rollback puts the alias back where its promote found it)."""
    started = time.perf_counter()
    staged = await _stage(ctx, slot, ref)
    name = ctx.repository.slots[slot].name
    store = _store(ctx)  # its reads and writes in a thread: a slow registry must not stall this worker's requests
    if alias and record["kind"] == "promote":
        try:
            record = {**record, "alias": alias, "alias_from": (await asyncio.to_thread(store.aliases, name)).get(alias),
                      "by": client.id}
        except RegistryError:  # an unreachable registry: the swap still happens, the alias move reports it below
            record = {**record, "alias": alias, "by": client.id}
    swapped = await _call(ctx, "activate", slot=slot, version=staged["version"],
                          retire_after_s=ctx.settings.rollout.retire_after_s, record=record)
    target = alias_to or staged["version"]
    if alias:
        try:
            if (await asyncio.to_thread(store.aliases, name)).get(alias) != target or record["kind"] == "promote":
                await asyncio.to_thread(store.set_alias, name, alias, target, by=client.id)
        except RegistryError as exc:
            raise ApiError(409, "alias_not_moved", f"serving {staged['version']} but the alias was not moved: {exc}",
                           swapped) from exc
    await ctx.routing.refresh(ctx.runner)
    return {**swapped, "load_seconds": staged["load_seconds"], "seconds": round(time.perf_counter() - started, 3)}


@router.post("/{slot}/rollback", summary="Return a slot to what served before its last promote")
async def rollback(slot: str, body: RollbackRequest = RollbackRequest(), client: Client = Depends(admin_guard),
                   ctx: ServingContext = Depends(loaded_context)) -> dict:
    name = ctx.repository.slots[_slot(ctx, slot)].name
    await ctx.routing.refresh(ctx.runner)
    entry = ctx.routing.table.get(slot, {})
    current = entry.get("active")
    last = (entry.get("promotions") or [None])[-1]
    if last and last.get("to") == current and last.get("from"):
        # the promote this service made, with what served before it (a pinned version too); the alias goes back
        # where that promote found it, and only when that promote moved it
        restore = last.get("alias_from") if last.get("alias") == body.alias else None
        return await _promote(ctx, slot, last["from"], body.alias if restore else None, client,
                              {"kind": "rollback"}, alias_to=restore)
    moves = [e for e in await asyncio.to_thread(_store(ctx).alias_log, name) if e["alias"] == body.alias]
    previous = next((e["from"] for e in reversed(moves) if e["from"] and e["from"] != current), None)
    if previous is None:
        raise ApiError(409, "nothing_to_roll_back", f"no promote of {slot} to undo and the alias log of {name} has "
                       f"no earlier {body.alias!r} target", {"alias": body.alias, "current": current})
    # a step back, not a promotion of its own: a second rollback must not return to what this one left
    return await _promote(ctx, slot, previous, body.alias, client, {"kind": "rollback"})


@router.post("/{slot}/canary", summary="Send a sticky share of traffic to a candidate version")
async def canary(slot: str, body: CanaryRequest, _: Client = Depends(admin_guard),
                 ctx: ServingContext = Depends(loaded_context)) -> dict:
    staged = await _stage(ctx, _slot(ctx, slot), body.ref)
    ctx.canary.reset(slot)
    return await _route(ctx, "set_canary", slot=slot, version=staged["version"], weight=body.weight)


@router.delete("/{slot}/canary", summary="Withdraw the canary")
async def drop_canary(slot: str, _: Client = Depends(admin_guard),
                      ctx: ServingContext = Depends(loaded_context)) -> dict:
    return await _route(ctx, "set_canary", slot=_slot(ctx, slot), version=None)


@router.post("/{slot}/shadow", summary="Mirror traffic to a candidate version (answers compared, never returned)")
async def shadow(slot: str, body: ShadowRequest, _: Client = Depends(admin_guard),
                 ctx: ServingContext = Depends(loaded_context)) -> dict:
    staged = await _stage(ctx, _slot(ctx, slot), body.ref)
    return await _route(ctx, "set_shadow", slot=slot, version=staged["version"])


@router.delete("/{slot}/shadow", summary="Stop mirroring")
async def drop_shadow(slot: str, _: Client = Depends(admin_guard),
                      ctx: ServingContext = Depends(loaded_context)) -> dict:
    return await _route(ctx, "set_shadow", slot=_slot(ctx, slot), version=None)
