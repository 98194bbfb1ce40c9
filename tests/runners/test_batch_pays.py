"""Warm-up measures whether a model's batches pay on this device; one that costs more per item in a batch runs its
items one by one (runners/pool.batch_pays, RepositoryState.per_item)."""
from __future__ import annotations

import time

import numpy as np
import pytest

from configs.settings import RunnerSettings
from runners.pool import ModelPool, batch_pays


@pytest.mark.parametrize(("item_ms", "above", "pays"), [
    ({1: 80.0, 8: 100.0}, 1.1, False),  # YOLO 640 on one core: 1.25x per image in a batch of 8
    ({1: 80.0, 8: 85.0}, 1.1, True),  # within the tolerance: batches kept (fewer calls, same cost)
    ({1: 3.0, 8: 0.9}, 1.1, True),  # a transformer: batching pays
    ({1: 80.0, 8: 100.0}, 1.3, True),  # a looser tolerance keeps the batch
    ({1: 80.0, 8: 100.0}, 0.0, True),  # 0: never decided by measurement
    ({1: 80.0}, 1.1, True),  # a fixed-batch graph warms batch 1 only: nothing to compare
    ({8: 10.0}, 1.1, True),  # no batch-1 timing
])
def test_batch_pays_compares_the_largest_batch_with_batch_one_per_item(item_ms, above, pays):
    assert batch_pays(item_ms, above) is pays


def _slow_batches(pool: ModelPool, per_item_s: float) -> None:
    """Make every run cost per_item_s x batch**2: a device on which a batch of 8 costs 8x per item."""
    real = pool.run_model

    def run_model(model, feeds):
        batch = int(next(iter(feeds.values())).shape[0])
        time.sleep(per_item_s * batch * batch)
        return real(model, feeds)

    pool.run_model = run_model  # type: ignore[method-assign]


def test_a_model_whose_batches_cost_more_per_item_runs_item_by_item(tiny_registry):
    pool = ModelPool(tiny_registry, RunnerSettings(memory={"budget_mb": 4000}))
    _slow_batches(pool, 0.002)
    model = pool.load("detection", "yolo-shapes", "stable", max_batch=16)
    assert sorted(model.item_ms) == [1, 8]
    assert model.item_ms[8] > 4 * model.item_ms[1]  # 16 ms vs 2 ms per item, plus the (tiny) model itself
    assert model.item_by_item
    shown = pool.describe()["models"]["detection"]["batching"]
    assert shown["item_by_item"] is True and set(shown["warmup_ms_per_item"]) == {"1", "8"}


def test_the_measurement_can_be_turned_off(tiny_registry):
    pool = ModelPool(tiny_registry, RunnerSettings(memory={"budget_mb": 4000}, item_by_item_above=0))
    _slow_batches(pool, 0.002)
    model = pool.load("detection", "yolo-shapes", "stable", max_batch=16)
    assert model.item_ms[8] > 4 * model.item_ms[1] and not model.item_by_item


def test_item_by_item_answers_equal_the_batched_ones(tiny_registry):
    """The runner's per-item path gives every item the row a batched call gives it."""
    from runners.pool import warmup_feeds

    pool = ModelPool(tiny_registry, RunnerSettings(memory={"budget_mb": 4000}))
    model = pool.load("detection", "yolo-shapes", "stable", max_batch=16)
    rng = np.random.default_rng(0)
    feed = next(f for f in warmup_feeds(model.manifest) if next(iter(f.values())).shape[0] == 8)
    name = next(iter(feed))
    batch = rng.random(feed[name].shape, dtype=np.float32)
    together = pool.run_model(model, {name: batch})[0]
    alone = np.stack([pool.run_model(model, {name: batch[i: i + 1]})[0][0] for i in range(len(batch))])
    np.testing.assert_allclose(alone, together, rtol=1e-4, atol=1e-4)
