"""On-demand residency (runners/residency.py): load on first request off the batch thread, LRU eviction for memory,
refusal with the reason and retry; and the same policy over a real ModelPool with measured tiny models."""
from __future__ import annotations

import threading

import pytest

from triserve.configs.deployments import ModelRepository
from triserve.configs.settings import RunnerSettings
from triserve.runners.memory import MemoryRefused
from triserve.runners.pool import ModelPool
from triserve.runners.residency import LOADING, REFUSED, RESIDENT, UNLOADED, Residency


def _repo(*names: str, always: tuple[str, ...] = ()) -> ModelRepository:
    deps = [{"name": n, "family": "text", "model": {"name": f"m-{n}"}, "residency": "on_demand"} for n in names]
    deps += [{"name": n, "family": "text", "model": {"name": f"m-{n}"}} for n in always]
    return ModelRepository.model_validate({"deployments": deps})


class FakeMemory:
    """Each loaded deployment costs `size` MB of a `budget`; the loader asks for room first, like the pool does."""

    def __init__(self, budget: float, size: float, fail: set[str] | None = None):
        self.budget, self.size, self.fail = budget, size, fail or set()
        self.loaded: set[str] = set()
        self.gate = threading.Event()
        self.gate.set()
        self.events: list[tuple] = []

    def free(self) -> float:
        return self.budget - self.size * len(self.loaded)

    def load(self, dep, make_room) -> None:
        self.gate.wait(5)
        make_room(self.size)
        if dep.name in self.fail or self.free() < self.size:
            raise MemoryRefused(f"{dep.name}: needs {self.size} MB, {self.free()} free")
        self.loaded.add(dep.name)

    def unload(self, dep) -> None:
        self.loaded.discard(dep.name)


def _residency(mem: FakeMemory, clock=None) -> Residency:
    kwargs = {"clock": clock} if clock else {}
    return Residency(mem.load, mem.unload, mem.free, lambda *a, **k: mem.events.append((a, k)), retry_s=10.0,
                     min_resident_s=0.0, **kwargs)


def test_first_request_loads_in_the_background_and_answers_loading_meanwhile():
    mem = FakeMemory(budget=100, size=40)
    res = _residency(mem)
    res.sync(_repo("a", "b", always=("c",)))
    assert res.knows("a") and not res.knows("c") and res.state("a") == UNLOADED
    mem.gate.clear()  # the load blocks: the request is answered at once with the state
    assert res.request("a").state == LOADING
    assert res.request("a").state == LOADING  # a second request does not start a second load
    mem.gate.set()
    res.wait_idle(5)
    assert res.state("a") == RESIDENT and mem.loaded == {"a"}
    assert [e[0][:1] + (e[1]["outcome"],) for e in mem.events] == [("load", "ok")]


def test_least_recently_used_is_evicted_when_memory_is_needed():
    t = [0.0]
    mem = FakeMemory(budget=100, size=40)  # two fit, not three
    res = _residency(mem, clock=lambda: t[0])
    res.sync(_repo("a", "b", "c"))
    for name in ("a", "b"):
        t[0] += 1
        res.request(name)
        res.wait_idle(5)
    t[0] += 1
    res.touch("a")  # a used after b: b is the least recently used
    t[0] += 1
    res.request("c")
    res.wait_idle(5)
    assert mem.loaded == {"a", "c"}
    assert (res.state("a"), res.state("b"), res.state("c")) == (RESIDENT, UNLOADED, RESIDENT)
    assert ((("evict", "b"), {"reason": "room for c"}) in mem.events)


def test_refused_with_the_reason_then_retried_after_retry_s_or_at_once_by_admin():
    t = [0.0]
    mem = FakeMemory(budget=100, size=40, fail={"a"})
    res = _residency(mem, clock=lambda: t[0])
    res.sync(_repo("a"))
    res.request("a")
    res.wait_idle(5)
    entry = res.request("a")
    assert entry.state == REFUSED and "MemoryRefused: a: needs 40" in entry.error
    t[0] += 5
    assert res.request("a").state == REFUSED  # not retried before retry_s
    mem.fail.clear()
    assert res.request("a", trigger="admin").state == LOADING  # an operator's load retries at once
    res.wait_idle(5)
    assert res.state("a") == RESIDENT


def test_nothing_evictable_refuses_and_always_deployments_are_never_candidates():
    mem = FakeMemory(budget=50, size=40)
    res = _residency(mem)
    res.sync(_repo("a", "b", always=("c",)))
    res.request("a")
    res.wait_idle(5)
    res.request("b")  # evicts a (the only candidate), then fits
    res.wait_idle(5)
    assert mem.loaded == {"b"} and res.state("a") == UNLOADED
    assert res.victim(exclude="b") == (None, None)  # c is 'always': not managed here at all


def test_sync_forgets_removed_and_resets_changed_deployments():
    mem = FakeMemory(budget=100, size=10)
    res = _residency(mem)
    res.sync(_repo("a", "b"))
    res.request("a")
    res.wait_idle(5)
    gone = res.sync(_repo("a"))
    assert [d.name for d in gone] == ["b"] and not res.knows("b") and res.state("a") == RESIDENT


@pytest.fixture
def pool(tiny_registry):
    return ModelPool(tiny_registry, RunnerSettings(memory={"budget_mb": 100_000}))


def test_real_pool_budget_for_one_on_demand_model_evicts_the_other(pool):
    """Two on-demand deployments of the tiny text model and a budget that holds one: loading the second evicts the
    first; reloads are never measured smaller than the first time (RSS reuse after an eviction)."""
    repo = _repo("t1", "t2")

    def load(dep, make_room):
        pool.load(dep.name, "minilm-intent", "stable", max_batch=8, make_room=make_room)

    def unload(dep):
        pool.drop(dep.name)

    res = Residency(load, unload, lambda: pool.memory.free_mb, min_resident_s=0.0)
    res.sync(repo)
    res.request("t1")
    res.wait_idle(60)
    need = pool.models["t1"].footprint.need(8)
    pool.memory.budget_mb = pool.memory.used_mb + 0.5 * need  # room left for half of another one
    res.request("t2")
    res.wait_idle(60)
    assert res.state("t2") == RESIDENT and res.state("t1") == UNLOADED
    assert set(pool.models) == {"t2"} and pool.memory.used_mb <= pool.memory.budget_mb
    first = pool.measured["minilm-intent:" + pool.models["t2"].manifest.version]
    res.request("t1")
    res.wait_idle(60)
    assert set(pool.models) == {"t1"}
    again = pool.models["t1"].footprint
    assert again.resident_mb >= first.resident_mb and again.per_item_mb >= first.per_item_mb


def test_a_deployment_just_loaded_is_waited_for_not_evicted():
    """Two deployments used at once that the budget cannot hold together: the second load waits until the first has
    been resident min_resident_s (its waiting requests get answered), then evicts it."""
    t = [100.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        t[0] += s

    mem = FakeMemory(budget=50, size=40)
    res = Residency(mem.load, mem.unload, mem.free, retry_s=10.0, min_resident_s=5.0, clock=lambda: t[0], sleep=sleep)
    res.sync(_repo("a", "b"))
    res.request("a")
    res.wait_idle(5)
    t[0] += 1.0
    assert res.victim(exclude="b") == (None, pytest.approx(4.0))
    res.request("b")
    res.wait_idle(5)
    assert slept and sum(slept) == pytest.approx(4.0) and mem.loaded == {"b"}
