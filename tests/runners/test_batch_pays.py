"""Warm-up times a model's batches on this device; the runner computes every batch in chunks of the size with the
cheapest time per item (runners/pool.compute_batch), item by item when one alone is cheapest."""
from __future__ import annotations

import time

import numpy as np
import pytest

from configs.settings import RunnerSettings
from runners.pool import ModelPool, compute_batch, warmup_feeds


@pytest.mark.parametrize(("item_ms", "chunk"), [
    ({1: 81.0, 8: 88.0}, 1),  # YOLOv8n 640 pinned to one core: alone is cheaper, item by item
    ({1: 54.0, 8: 49.0, 16: 97.0}, 8),  # two threads: 8 pays, 16 costs twice per image: chunks of 8
    ({1: 40.0, 8: 35.0, 16: 30.0}, None),  # a transformer: the largest timed batch is cheapest, no limit
    ({1: 0.36, 8: 0.08}, None),  # batch 8 cheapest and 16 not timed (max batch 8): no limit
    ({1: 10.0, 8: 10.0}, None),  # a tie keeps the larger batch (fewer calls at the same cost)
    ({1: 80.0}, None),  # a fixed-batch graph warms batch 1 only: nothing to compare
    ({}, None),  # no timing (warmup_runs 0)
])
def test_compute_batch_is_the_cheapest_per_item_unless_the_largest(item_ms, chunk):
    assert compute_batch(item_ms) == chunk


def _batch_costs(pool: ModelPool, ms_per_item: dict[int, float]) -> None:
    """A device on which a batch of b costs ms_per_item[b] per item (slept, on top of the tiny model)."""
    real = pool.run_model

    def run_model(model, feeds):
        batch = int(next(iter(feeds.values())).shape[0])
        time.sleep(ms_per_item[batch] * batch / 1000)
        return real(model, feeds)

    pool.run_model = run_model  # type: ignore[method-assign]


def test_a_model_cheaper_alone_runs_item_by_item_and_16_is_not_timed(tiny_registry):
    pool = ModelPool(tiny_registry, RunnerSettings(memory={"budget_mb": 4000}))
    _batch_costs(pool, {1: 2.0, 8: 10.0, 16: 10.0})
    model = pool.load("detection", "yolo-shapes", "stable", max_batch=16)
    assert sorted(model.item_ms) == [1, 8] and model.item_ms[8] > 1.5 * model.item_ms[1]
    assert model.compute_batch == 1
    shown = pool.describe()["models"]["detection"]["batching"]
    assert shown["compute_batch"] == 1 and set(shown["warmup_ms_per_item"]) == {"1", "8"}


def test_a_batch_that_stops_paying_past_8_is_computed_in_chunks_of_8(tiny_registry):
    pool = ModelPool(tiny_registry, RunnerSettings(memory={"budget_mb": 4000}))
    _batch_costs(pool, {1: 4.0, 8: 2.0, 16: 5.0})
    model = pool.load("detection", "yolo-shapes", "stable", max_batch=1, configured_batch=16)  # as load_all does
    assert sorted(model.item_ms) == [1, 8, 16] and model.compute_batch == 8
    assert model.footprint is not None and model.footprint.measured_batch == 16


def test_batches_that_pay_are_not_limited(tiny_registry):
    pool = ModelPool(tiny_registry, RunnerSettings(memory={"budget_mb": 4000}))
    _batch_costs(pool, {1: 4.0, 8: 1.0, 16: 0.5})
    model = pool.load("detection", "yolo-shapes", "stable", max_batch=16)
    assert sorted(model.item_ms) == [1, 8, 16] and model.compute_batch is None


def test_configured_turns_the_measurement_off(tiny_registry):
    pool = ModelPool(tiny_registry, RunnerSettings(memory={"budget_mb": 4000}, compute_batch="configured"))
    _batch_costs(pool, {1: 2.0, 8: 10.0, 16: 10.0})
    model = pool.load("detection", "yolo-shapes", "stable", max_batch=16)
    assert model.item_ms[8] > 1.5 * model.item_ms[1] and model.compute_batch is None


def test_chunked_and_item_by_item_rows_equal_the_batched_ones(tiny_registry):
    """What the runner's chunked paths rely on: a row does not depend on which items shared its call."""
    pool = ModelPool(tiny_registry, RunnerSettings(memory={"budget_mb": 4000}))
    model = pool.load("detection", "yolo-shapes", "stable", max_batch=16)
    name = model.input_names[0]
    shape = next(iter(warmup_feeds(model.manifest, (16,))[0].values())).shape
    batch = np.random.default_rng(0).random(shape, dtype=np.float32)
    together = pool.run_model(model, {name: batch})[0]
    alone = np.stack([pool.run_model(model, {name: batch[i: i + 1]})[0][0] for i in range(len(batch))])
    chunks = np.concatenate([pool.run_model(model, {name: batch[k: k + 8]})[0] for k in (0, 8)])
    np.testing.assert_allclose(alone, together, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(chunks, together, rtol=1e-4, atol=1e-4)
