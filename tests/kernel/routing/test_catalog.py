"""The gateway's model catalog never reads the registry on the event loop (issue 42): a routing table that names a
version this worker has not loaded is published only once that version is loaded in a thread, and requests meanwhile
are served from the old table; a version not in memory is a 503 for the request, never a registry read."""
from __future__ import annotations

import asyncio
import threading

import pytest

from tests.models.test_manifest import make_manifest
from triserve.configs.deployments import ModelRepository
from triserve.configs.settings import Rollout, Settings
from triserve.kernel.context import ServingContext
from triserve.kernel.errors import ApiError
from triserve.kernel.routing.rollout import ModelCatalog, RoutingTable
from triserve.models.registry import LocalRegistry
from triserve.services.protocols import oip

V1 = "1.0.0-abcdef12"


class HeldRegistry(LocalRegistry):
    """A registry whose reads of `held` models wait until `release` is set (a registry that does not answer), setting
    `entered` when one arrives; every read is recorded with the thread it ran on."""

    def __init__(self, root, held: str):
        super().__init__(root)
        self.held, self.entered, self.release = held, threading.Event(), threading.Event()
        self.reads: list[tuple[str, str]] = []

    def load_verified(self, name, ref):
        self.reads.append((name, threading.current_thread().name))
        if name == self.held:
            self.entered.set()
            assert self.release.wait(30), "the test never released the registry"
        return super().load_verified(name, ref)


class Runner:
    """The runner's `routing` API, answering what the test sets."""

    def __init__(self, answer: dict):
        self.answer = answer
        self.to_async = self

    async def routing(self) -> dict:
        return self.answer


def _repository(*names: str) -> ModelRepository:
    return ModelRepository.model_validate({"deployments": [
        {"name": name, "family": "detection", "model": {"name": f"toy-{name}"}} for name in names]})


@pytest.fixture()
def registry(tmp_path) -> HeldRegistry:
    reg = HeldRegistry(tmp_path / "registry", held="toy-b")
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "model.onnx").write_bytes(b"graph")
    for name in ("toy-a", "toy-b"):
        reg.publish(staging, make_manifest(name=name, version=V1))
        reg.set_alias(name, "stable", V1, by="test")
    return reg


def test_a_new_table_waits_for_its_models_off_the_loop_while_requests_use_the_old_one(registry):
    async def scenario() -> None:
        routing = RoutingTable(Rollout(), _repository("a"))
        catalog = ModelCatalog(registry, lambda slot: routing.repository.slots[slot].name)
        routing.prepare = catalog.prepare
        catalog.load("a", V1)  # startup
        ctx = ServingContext(settings=Settings(), runner=None, registry=registry, routing=routing, catalog=catalog,
                             protection=None, canary=None, shadow=None)  # type: ignore[arg-type]
        runner = Runner({"slots": {"a": {"active": V1}}, "repository": _repository("a").model_dump(mode="json")})
        await routing.refresh(runner)
        # a hot add: the runner now routes to b, whose model this worker has never read
        runner.answer = {"slots": {"a": {"active": V1}, "b": {"active": V1}},
                         "repository": _repository("a", "b").model_dump(mode="json")}
        refresh = asyncio.ensure_future(routing.refresh(runner))
        assert await asyncio.to_thread(registry.entered.wait, 30), "nobody loaded b's model"
        # b's read is held in a thread: the loop answers from the old table meanwhile
        assert not refresh.done() and set(routing.table) == {"a"}
        assert catalog.get("a", V1).manifest.name == "toy-a"
        assert set(oip.catalog(ctx)) == {"a", "toy-a", "detect"}
        registry.release.set()
        await refresh
        assert set(routing.table) == {"a", "b"} and catalog.get("b", V1).manifest.name == "toy-b"
        assert {"b", "toy-b"} <= set(oip.catalog(ctx))

    asyncio.run(scenario())
    loop_thread = threading.current_thread().name
    reads_of_b = [thread for name, thread in registry.reads if name == "toy-b"]
    assert len(reads_of_b) == 1 and reads_of_b[0] != loop_thread  # read once, in a thread


def test_a_version_not_in_memory_is_a_503_and_loads_in_the_background(registry):
    async def scenario() -> None:
        routing = RoutingTable(Rollout(), _repository("a", "b"))
        catalog = ModelCatalog(registry, lambda slot: routing.repository.slots[slot].name)
        registry.release.set()
        with pytest.raises(ApiError) as info:
            catalog.get("b", V1)
        assert info.value.status == 503 and info.value.code == "not_ready"
        assert (await catalog.fetch("b", V1)).manifest.name == "toy-b"  # the background load, joined
        assert catalog.get("b", V1).manifest.name == "toy-b"

    asyncio.run(scenario())
    assert [name for name, _ in registry.reads] == ["toy-b"]  # one read, however many asked
