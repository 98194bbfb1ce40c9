"""The client's admin calls, sync and async, against a real `bentoml serve` with an admin key (the TRISERVE_ACCESS
keys of tests/services/test_repository.py and test_rollout.py) over a copy of the tiny registry that also holds a
second version of the forecaster: the model repository (put a copy of a deployment under a new name, call it, delete
it; an on-demand deployment loaded and unloaded) and rollouts (status, promote, rollback, canary, shadow). Also the
retry rule of calls that change state, against httpx.MockTransport."""
from __future__ import annotations

import asyncio
import hashlib
import json
import shutil

import httpx
import pytest

from tests.conftest import NO_CAPACITY_LIMITS, Server
from tests.services.test_gateway import png_bytes
from triserve.models.registry import LocalRegistry
from triserve_client import (
    AsyncTriserveClient,
    Deployment,
    DeploymentChange,
    DeploymentSpec,
    ModelRef,
    ModelRepository,
    Promotion,
    RetryPolicy,
    SlotRouting,
    TriserveAPIError,
    TriserveClient,
    TriserveTransportError,
)

ADMIN, USER = "client-admin", "client-user"
SERIES = [340.0 + 0.1 * i + (i % 12) for i in range(48)]
FORECAST = {"start": "2000-01-01T00:00:00", "frequency": "MS", "horizon": 3}
CANDIDATE = "9.9.9-client"


def key(name: str, secret: str, admin: bool) -> dict:
    return {"name": name, "admin": admin, "sha256": hashlib.sha256(secret.encode()).hexdigest()}


@pytest.fixture(scope="module")
def admin_server(tiny_registry, tmp_path_factory):
    """A server of its own (its registry and repository change here): the tiny registry plus CANDIDATE, a copy of
    forecast-global's stable version published under another version."""
    d = tmp_path_factory.mktemp("client-admin")
    reg = LocalRegistry(shutil.copytree(tiny_registry.root, d / "registry"))
    src, manifest = reg.load_verified("forecast-global", "stable")
    staging = shutil.copytree(src, d / "staging")
    reg.publish(staging, manifest.model_copy(update={"version": CANDIDATE}))
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_ACCESS__RATE_PER_S": "100000", "TRISERVE_ROLLOUT__REFRESH_S": "0.2",
           "TRISERVE_ROLLOUT__RETIRE_AFTER_S": "1",
           "TRISERVE_ACCESS__API_KEYS": json.dumps([key("ops", ADMIN, True), key("app", USER, False)])}
    with Server(reg.root, env=env, log_path=d / "serve.log") as srv:
        srv.wait_ready()
        yield srv, reg


@pytest.fixture()
def ops(admin_server):
    srv, _ = admin_server
    with TriserveClient(srv.url, api_key=ADMIN, timeout=120) as client:
        yield client


def test_admin_calls_need_an_admin_key(admin_server):
    srv, _ = admin_server
    with TriserveClient(srv.url, timeout=30) as anonymous, TriserveClient(srv.url, api_key=USER) as user:
        with pytest.raises(TriserveAPIError) as err:
            anonymous.deployments()
        assert (err.value.status, err.value.code) == (401, "unauthorized")
        with pytest.raises(TriserveAPIError) as err:
            user.rollouts()
        assert (err.value.status, err.value.code) == (403, "forbidden")
        assert user.classify("hi").results  # the key itself is a good one


def test_put_call_and_delete_a_copy_of_a_deployment(ops):
    repo = ops.deployments()
    assert isinstance(repo, ModelRepository)
    assert {d.name for d in repo.deployments} == {"detection", "text", "forecast", "segmentation", "classification"}
    text = repo.deployment("text")
    assert isinstance(text, Deployment) and text.model.name == "minilm-intent" and text.fallback is not None
    added = ops.put_deployment("text-copy", text.model_copy(update={"name": "text-copy"}), request_id="put-1")
    assert isinstance(added, DeploymentChange) and (added.deployment, added.action, added.by) == (
        "text-copy", "added", "key:ops")
    assert set(added.versions) == {"text-copy", "text-copy_fallback"} and added.seconds is not None
    answer = ops.classify(["what is my balance"], deployment="text-copy")
    assert (answer.deployment, answer.model.name) == ("text-copy", "minilm-intent")
    assert ops.classify(["what is my balance"]).results == answer.results  # the same model as "text"
    assert "text-copy" in {d.name for d in ops.deployments().deployments}
    assert ops.models().deployment("text-copy").ready
    # a replacement from a dict: no fallback this time
    updated = ops.put_deployment("text-copy", {"family": "text", "model": {"name": "minilm-intent-int8"},
                                               "limits": {"max_texts": 2}})
    assert updated.action == "updated" and set(updated.versions) == {"text-copy"}
    with pytest.raises(TriserveAPIError) as err:
        ops.classify(["a", "b", "c"], deployment="text-copy")
    assert err.value.code == "too_many_texts" and err.value.details["limit"] == 2
    removed = ops.delete_deployment("text-copy")
    assert (removed.action, sorted(removed.slots)) == ("removed", ["text-copy"])
    with pytest.raises(TriserveAPIError) as err:
        ops.classify("hi", deployment="text-copy")
    assert (err.value.status, err.value.code) == (404, "unknown_deployment")


def test_admin_refusals_are_typed_errors(ops):
    with pytest.raises(TriserveAPIError) as err:
        ops.put_deployment("bad", DeploymentSpec(family="text", model=ModelRef(name="no-such-model")))
    assert (err.value.status, err.value.code) == (409, "deployment_refused")
    with pytest.raises(TriserveAPIError) as err:
        ops.put_deployment("bad", {"family": "text", "model": {"name": "minilm-intent"}, "limits": {"nope": 1}})
    assert (err.value.status, err.value.code) == (422, "invalid_deployment")
    with pytest.raises(TriserveAPIError) as err:
        ops.delete_deployment("nope")
    assert (err.value.status, err.value.code) == (404, "unknown_deployment")
    with pytest.raises(TriserveAPIError) as err:
        ops.load_deployment("text")
    assert (err.value.status, err.value.code) == (409, "not_on_demand")
    with pytest.raises(TriserveAPIError) as err:
        ops.promote("nope", "1.0.0")
    assert (err.value.status, err.value.code) == (404, "unknown_slot") and "forecast" in err.value.details["slots"]
    with pytest.raises(TriserveAPIError) as err:
        ops.promote("forecast", "0.0.0-missing")
    assert (err.value.status, err.value.code) == (409, "rollout_failed")
    with pytest.raises(ValueError, match="named 'text'"):
        ops.put_deployment("other", ops.deployments().deployment("text"))
    with pytest.raises(ValueError, match="weight"):
        ops.set_canary("forecast", CANDIDATE, 1.5)


def test_an_on_demand_deployment_is_loaded_and_unloaded(ops):
    spec = DeploymentSpec(family="text", model=ModelRef(name="minilm-intent"), residency="on_demand",
                          description="loaded on its first request")
    added = ops.put_deployment("lazy-text", spec)
    assert (added.action, added.residency, added.load_seconds) == ("added", "on_demand", 0.0)
    assert ops.deployments().deployment("lazy-text").residency == "on_demand"
    loaded = ops.load_deployment("lazy-text", wait_s=60)
    assert (loaded.deployment, loaded.state) == ("lazy-text", "resident") and loaded.seconds is not None
    assert ops.classify("what is my balance", deployment="lazy-text").model.name == "minilm-intent"
    unloaded = ops.unload_deployment("lazy-text")
    assert (unloaded.deployment, unloaded.evicted, unloaded.state) == ("lazy-text", True, "unloaded")
    assert ops.unload_deployment("lazy-text").evicted is False
    ops.delete_deployment("lazy-text")


def test_rollout_status_promote_and_rollback(admin_server, ops):
    _, reg = admin_server
    stable = reg.resolve("forecast-global", "stable")
    table = ops.rollouts()
    assert {"detection", "text", "forecast", "forecast_fallback"} <= set(table)
    assert isinstance(table["forecast"], SlotRouting) and table["forecast"].active == stable
    assert table["forecast"].canary is None and table["forecast"].shadow is None

    promoted = ops.promote("forecast", CANDIDATE, request_id="promote-1")
    assert isinstance(promoted, Promotion) and (promoted.slot, promoted.active, promoted.previous) == (
        "forecast", CANDIDATE, stable)
    assert reg.resolve("forecast-global", "stable") == CANDIDATE and ops.rollouts()["forecast"].active == CANDIDATE
    assert ops.forecast(SERIES, **FORECAST).model.version == CANDIDATE

    back = ops.rollback("forecast")
    assert (back.active, back.previous) == (stable, CANDIDATE) and reg.resolve("forecast-global", "stable") == stable
    assert ops.forecast(SERIES, **FORECAST).model.version == stable
    # a promote that moves no alias
    unaliased = ops.promote("forecast", CANDIDATE, alias=None)
    assert unaliased.active == CANDIDATE and reg.resolve("forecast-global", "stable") == stable
    assert ops.promote("forecast", "stable").active == stable


def test_canary_and_shadow_set_and_withdrawn(ops):
    canary = ops.set_canary("forecast", CANDIDATE, 0.25)
    assert canary.canary is not None and (canary.canary.version, canary.canary.weight) == (CANDIDATE, 0.25)
    assert ops.rollouts()["forecast"].canary == canary.canary
    assert ops.clear_canary("forecast").canary is None
    shadow = ops.set_shadow("forecast", CANDIDATE)
    assert shadow.shadow == CANDIDATE and CANDIDATE in shadow.loaded
    assert ops.forecast(SERIES, **FORECAST).model.version != CANDIDATE  # mirrored, never returned
    assert ops.clear_shadow("forecast").shadow is None
    assert ops.rollouts()["forecast"].shadow is None


def test_async_admin_calls(admin_server):
    srv, _ = admin_server

    async def go():
        async with AsyncTriserveClient(srv.url, api_key=ADMIN, timeout=120) as ops:
            repo, table = await asyncio.gather(ops.deployments(), ops.rollouts())
            copy = repo.deployment("detection").model_dump(exclude={"name"})
            added = await ops.put_deployment("shapes-copy", copy)
            served = await ops.detect(png_bytes(seed=4), deployment="shapes-copy", conf_threshold=0.001)
            canary = await ops.set_canary("text", "stable", 0.5)
            cleared = await ops.clear_canary("text")
            shadow = await ops.set_shadow("text_fallback", "stable")
            stopped = await ops.clear_shadow("text_fallback")
            promoted = await ops.promote("text", "stable")
            with pytest.raises(TriserveAPIError) as err:
                await ops.rollback("text")
            lazy = {"family": "detection", "residency": "on_demand", "model": {"name": "yolo-shapes"}}
            residency = [await ops.put_deployment("lazy-det", lazy), await ops.load_deployment("lazy-det"),
                         await ops.unload_deployment("lazy-det")]
            removed = [await ops.delete_deployment("shapes-copy"), await ops.delete_deployment("lazy-det")]
            return (repo, table, added, served, canary, cleared, shadow, stopped, promoted, err.value, residency,
                    removed)

    (repo, table, added, served, canary, cleared, shadow, stopped, promoted, nothing, residency,
     removed) = asyncio.run(go())
    assert "detection" in {d.name for d in repo.deployments}
    assert table["text"].active and added.action == "added" and set(added.versions) == {"shapes-copy",
                                                                                         "shapes-copy_fallback"}
    assert (served.deployment, served.model.name) == ("shapes-copy", "yolo-shapes") and served.results[0].detections
    assert canary.canary is not None and canary.canary.weight == 0.5 and cleared.canary is None
    assert shadow.shadow == table["text_fallback"].active and stopped.shadow is None
    assert promoted.active == promoted.previous == table["text"].active  # the serving version, swapped in again
    assert (nothing.status, nothing.code) == (409, "nothing_to_roll_back")
    assert residency[0].residency == "on_demand" and [x.state for x in residency[1:]] == ["resident", "unloaded"]
    assert [r.action for r in removed] == ["removed", "removed"]


# --- retries of calls that change state ----------------------------------------------------------------------------
def test_a_call_that_changes_state_is_not_repeated_once_it_may_have_been_sent():
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.method)
        raise httpx.ReadError("connection reset", request=request)

    policy = RetryPolicy(attempts=3, backoff_initial=0.01, backoff_max=0.02)
    with TriserveClient(transport=httpx.MockTransport(handler), retry=policy, api_key=ADMIN) as ts:
        with pytest.raises(TriserveTransportError) as err:
            ts.promote("forecast", CANDIDATE)
        assert err.value.attempts == 1 and sent == ["POST"]
        with pytest.raises(TriserveTransportError) as err:
            ts.rollouts()  # a read: repeated
        assert err.value.attempts == 3 and sent == ["POST"] + ["GET"] * 3


def test_a_call_that_changes_state_is_retried_when_it_was_not_sent_or_refused_for_now():
    answers = [httpx.ConnectError("refused"), httpx.Response(503, headers={"Retry-After": "0"}, json={"error": {
        "code": "not_ready", "message": "loading", "details": None, "request_id": "x"}})]
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if answers:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return httpx.Response(200, json={"slot": "forecast", "active": CANDIDATE, "previous": "1"})

    with TriserveClient(transport=httpx.MockTransport(handler), api_key=ADMIN,
                        retry=RetryPolicy(backoff_initial=0.01)) as ts:
        r = ts.promote("forecast", CANDIDATE, alias=None)
    assert r.active == CANDIDATE and len(sent) == 3
    assert json.loads(sent[-1].content) == {"ref": CANDIDATE, "alias": None}
    assert sent[-1].headers["x-api-key"] == ADMIN and sent[-1].url.path == "/admin/models/forecast/promote"
