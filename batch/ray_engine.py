"""The Ray Data engine: the job's pending shards as a dataset, `map_batches` onto an actor pool whose actors hold
the model session (and the family adapter) for their whole life.

Each actor pulls the pinned model version from the registry exactly as the service does (models/cache.fetch_verified
into its node's cache, every sha256 checked), runs its shard chunk by chunk (batch/work.ShardWorker: the chunks and
model calls of the local engine, so the rows are the same) and commits it to the output directory (atomic part, then
record), so a failed or killed job resumes from its finished shards like a local one. On a real cluster the output
directory and image inputs must be on storage every node sees (NFS, a mounted bucket) or an object store prefix for
the images; texts and series travel inside the shard tasks.

    triserve batch classify ... --engine ray --workers 4                       # a local Ray on 127.0.0.1
    RAY_ADDRESS=auto triserve batch classify ... --engine ray --workers 16     # a running cluster (ray start)
"""
from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from triserve.batch.environment import started_with
from triserve.batch.job import ShardRecord
from triserve.batch.work import Plan, ShardWorker


class ShardActor:
    """map_batches' callable class: built once per actor (the session loads here), called with batches of shards."""

    def __init__(self, plan: Plan):
        self.worker = ShardWorker(plan)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        records = [self.worker.run_shard(int(shard), pickle.loads(payload))
                   for shard, payload in zip(batch["shard"], batch["payload"])]
        return {"shard": np.array([r.shard for r in records], dtype=np.int64),
                "record": np.array([pickle.dumps(r) for r in records], dtype=object)}


def start_local(cpus: int) -> None:
    """A single-node Ray on 127.0.0.1 (no dashboard), its workers able to import this checkout."""
    import ray

    with started_with():
        ray.init(num_cpus=cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
                 object_store_memory=256 * 2**20, log_to_driver=False, configure_logging=False)


def run_ray(plan: Plan, descriptors: Sequence[dict[str, Any]], pending: Sequence[int], actors: int = 1,
            address: str | None = None, on_items: Callable[[int], None] | None = None) -> list[ShardRecord]:
    import ray
    import ray.data

    if not pending:
        return []
    started_here = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            start_local(actors + 1)  # + one CPU for Ray Data's own tasks
            started_here = True
    try:
        spec = plan.spec
        items = []
        for shard in pending:
            a, b = spec.shard_range(shard)
            items.append({"shard": shard, "payload": pickle.dumps(list(descriptors[a:b]))})
        ds = ray.data.from_items(items, override_num_blocks=len(items))
        out = ds.map_batches(ShardActor, fn_constructor_kwargs={"plan": plan}, batch_size=1,
                             compute=ray.data.ActorPoolStrategy(size=actors),
                             num_cpus=1, batch_format="numpy")
        records: list[ShardRecord] = []
        for batch in out.iter_batches(batch_size=1, batch_format="numpy"):
            for raw in batch["record"]:
                rec = pickle.loads(raw)
                records.append(rec)
                if on_items is not None:
                    on_items(rec.rows)
        return records
    finally:
        if started_here:
            ray.shutdown()
