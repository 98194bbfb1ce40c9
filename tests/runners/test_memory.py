"""Memory accounting (runners/memory.py) and the pool's use of it: measured footprints, reservations, batch caps,
refusal with the numbers, release on unload."""
from __future__ import annotations

import pytest

from triserve.configs.settings import RunnerSettings
from triserve.runners.memory import (
    Footprint,
    MemoryBudget,
    MemoryRefused,
    available_mb,
    derived_budget_mb,
    rss_mb,
    share_caps,
)
from triserve.runners.pool import ModelPool


def test_machine_readings_are_plausible():
    assert 10 < rss_mb() < 100_000 and available_mb() > 0
    assert 0 < derived_budget_mb(0.5) < derived_budget_mb(1.0)


def test_reservation_caps_the_batch_to_what_fits_and_refuses_what_cannot():
    budget = MemoryBudget(100)
    fp = Footprint(resident_mb=30, per_item_mb=5, measured_batch=8)
    assert budget.reserve("a@1", fp, max_batch=8) == 8 and budget.used_mb == 70  # 30 + 8 x 5
    with pytest.raises(MemoryRefused, match=r"needs 35.0 MB at batch 1 .* 30.0 of 100.0 MB free .*a@1 70.0"):
        budget.reserve("b@1", fp, max_batch=64)
    assert "b@1" not in budget.reserved
    budget.release("a@1")
    assert budget.free_mb == 100
    assert budget.reserve("d@1", fp, max_batch=64) == 14 and budget.used_mb == 100  # (100 - 30) // 5


def test_share_caps_gives_everyone_its_max_when_all_fit_else_the_same_share_of_its_wish():
    a, b = Footprint(10, 2, 8), Footprint(5, 1, 8)
    models = {"a@1": (a, 16), "b@1": (b, 64), "c@1": (Footprint(1, 0, 1), 256)}  # c: no per-item growth
    assert share_caps(models, free_mb=1000) == {"a@1": 16, "b@1": 64, "c@1": 256}
    # wishes: a 2 x 15 = 30 MB, b 1 x 63 = 63 MB; 46.5 MB free = half of each wish
    assert share_caps(models, free_mb=46.5) == {"a@1": 8, "b@1": 32, "c@1": 256}
    assert share_caps(models, free_mb=0) == {"a@1": 1, "b@1": 1, "c@1": 256}
    odd = {"x@1": (Footprint(3, 0.1, 8), 256)}  # 0.1 x 255 = 25.499999999999996 in floats: still 256 when it fits
    assert share_caps(odd, free_mb=25.5) == {"x@1": 256}
    assert share_caps(odd, free_mb=12.75) == {"x@1": 128}


def test_pool_startup_shares_the_budget_instead_of_first_come(tiny_registry):
    """Three slots at batch 1 first, then the rest shared: with room for all, everyone gets its configured batch."""
    pool = ModelPool(tiny_registry, RunnerSettings(memory={"budget_mb": 4000}))
    pool.load_all({"text": ("minilm-intent", "stable", 64), "forecast": ("forecast-global", "stable", 256),
                   "forecast_fallback": ("forecast-theta", "stable", 64)})
    assert not pool.errors
    assert {s: m.batch_cap for s, m in pool.models.items()} == {"text": 64, "forecast": 256, "forecast_fallback": 64}
    assert pool.memory.used_mb == pytest.approx(sum(m.footprint.need(m.batch_cap) for m in pool.models.values()))


def test_precheck_refuses_weights_larger_than_what_is_free():
    budget = MemoryBudget(50)
    budget.reserve("a@1", Footprint(40, 0, 1), 1)
    with pytest.raises(MemoryRefused, match="weights"):
        budget.precheck("b@1", file_mb=20)
    budget.precheck("a@1", file_mb=45)  # its own reservation does not count against itself


def test_pool_measures_reserves_and_releases(tiny_registry):
    pool = ModelPool(tiny_registry, RunnerSettings(memory={"budget_mb": 4000}))
    model = pool.load("text", "minilm-intent", "stable", max_batch=64)
    fp = model.footprint
    assert fp is not None and fp.resident_mb >= 0 and fp.per_item_mb >= 0 and fp.measured_batch == 8
    assert model.batch_cap == 64 and pool.memory.reserved == {f"text@{model.manifest.version}": fp.need(64)}
    assert pool.describe()["models"]["text"]["memory"]["batch_cap"] == 64
    pool.drop("text")
    assert pool.memory.reserved == {}


def test_pool_refuses_a_model_that_cannot_fit(tiny_registry):
    pool = ModelPool(tiny_registry, RunnerSettings(memory={"budget_mb": 0.5}))
    with pytest.raises(MemoryRefused):
        pool.load("detection", "yolo-shapes", "stable", max_batch=16)
    assert pool.versions == {} and pool.memory.reserved == {}


def test_physical_cores_counts_distinct_cores_not_hyperthreads(tmp_path):
    from triserve.runners.pool import physical_cores

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("\n\n".join(f"processor\t: {i}\nphysical id\t: 0\ncore id\t\t: {i % 2}" for i in range(4)))
    assert physical_cores(cpuinfo) == 2  # four logical CPUs on two cores
    assert physical_cores(tmp_path / "missing") is None
