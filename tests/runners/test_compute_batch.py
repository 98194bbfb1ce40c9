"""A slot's compute batch (batching.compute_batch): the most items one model call runs. The runner computes what
arrives in chunks of it, warms and reserves memory for one chunk only, and never reports it to the gateway as a
per-request cap (runners/repository_state.py, runners/pool.py)."""
from __future__ import annotations

from triserve.configs.settings import Batching, ModelSlot, RunnerSettings
from triserve.runners.pool import ModelPool, warmup_feeds
from triserve.runners.repository_state import reserved_batch


def slot(max_batch: int, compute: int | None = None, per_item: bool = False) -> ModelSlot:
    return ModelSlot(name="m", batching=Batching(max_batch_size=max_batch, compute_batch=compute, per_item=per_item))


def test_the_reservation_covers_one_chunk():
    assert reserved_batch(slot(16)) == 16
    assert reserved_batch(slot(16, 1)) == 1
    assert reserved_batch(slot(16, 4)) == 4
    assert reserved_batch(slot(2, 8)) == 2  # a chunk above the batch that can arrive is the batch
    assert reserved_batch(slot(16, 4, per_item=True)) == 1


def test_warm_up_stops_at_the_chunk(tiny_registry):
    _, manifest = tiny_registry.load_verified("yolo-shapes", "stable")
    batches = lambda largest: sorted({next(iter(f.values())).shape[0] for f in warmup_feeds(manifest, largest)})  # noqa: E731
    assert batches(8) == [1, 8] and batches(64) == [1, 8]
    assert batches(2) == [1, 2] and batches(1) == [1]


def test_a_chunked_slot_runs_every_item_in_calls_of_its_chunk(tiny_registry):
    """Loaded as load_all loads it (batch 1 first, warmed at the chunk), the model's cap is the chunk; its memory
    need is one chunk's, less than the whole batch's."""
    pool = ModelPool(tiny_registry, RunnerSettings(memory={"budget_mb": 4000}))
    pool.load_all({"detection": ("yolo-shapes", "stable", reserved_batch(slot(16, 2))),
                   "whole": ("yolo-shapes", "stable", reserved_batch(slot(16)))})
    chunked, whole = pool.models["detection"], pool.models["whole"]
    assert chunked.batch_cap == 2 and whole.batch_cap == 16
    assert chunked.footprint is not None and whole.footprint is not None
    assert chunked.footprint.need(chunked.batch_cap) <= whole.footprint.need(whole.batch_cap)
