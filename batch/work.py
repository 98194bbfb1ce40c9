"""The steps of a job that every engine runs the same way: load + prepare a chunk, run the model, finish the rows,
encode and commit a shard. The local engine spreads prepare/finish over worker processes; a Ray actor or a Spark
executor runs `ShardWorker.run_shard` whole."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triserve.batch import model as batch_model
from triserve.batch import sinks
from triserve.batch.job import JobDir, JobSpec, ShardRecord
from triserve.batch.sources import Loader
from triserve.kernel.batch import Adapter, Prepared


@dataclass(frozen=True)
class Plan:
    """Everything a worker needs (picklable): the job, its pinned model, where models are cached, where rows go."""

    spec: JobSpec
    target: batch_model.Target
    cache_dir: str
    output: str
    source_kind: str
    max_batch: int = 256
    threads: int = 0  # ONNX Runtime intra-op threads (0: its default, every core)


@dataclass
class Preparer:
    """The preprocessing side (a worker process, or inline): reads and prepares chunks, finishes rows."""

    plan: Plan
    adapter: Adapter = field(init=False)
    loader: Loader = field(default_factory=Loader)

    def __post_init__(self) -> None:
        self.adapter = batch_model.open_adapter(self.plan.target, Path(self.plan.cache_dir), self.plan.spec.options,
                                                self.plan.spec.command)

    def prepare(self, descriptors: list[dict[str, Any]]) -> Prepared:
        return self.adapter.prepare(self.loader(self.plan.source_kind, descriptors))

    def finish(self, prepared: Prepared, outputs: list) -> list[dict[str, Any]]:
        t = self.plan.target
        rows = self.adapter.finish(prepared, outputs)
        return [{"key": k, "deployment": t.deployment, "model": t.name, "version": t.version, **row}
                for k, row in zip(prepared.keys, rows)]


def commit_shard(plan: Plan, adapter: Adapter, shard: int, rows: list[dict[str, Any]],
                 seconds: float) -> ShardRecord:
    errors = sum(1 for r in rows if r.get("error_code"))
    data = sinks.encode(rows, adapter.COLUMNS, plan.spec.format)
    return JobDir(plan.output).commit(plan.spec, shard, data, len(rows), errors, seconds)


class ShardWorker:
    """A whole shard in one process (a Ray actor, a Spark executor's Python worker, the local engine without worker
    processes): the model session and the adapter live as long as the worker."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.preparer = Preparer(plan)
        self.session = batch_model.Session(plan.target, Path(plan.cache_dir), plan.max_batch, plan.threads)

    def run_chunk(self, descriptors: list[dict[str, Any]]) -> list[dict[str, Any]]:
        prepared = self.preparer.prepare(descriptors)
        outputs = self.session.run(prepared.items)
        return self.preparer.finish(prepared.without_items(), outputs)

    def run_shard(self, shard: int, descriptors: list[dict[str, Any]]) -> ShardRecord:
        """descriptors: the shard's, in order (spec.shard_range)."""
        started = time.perf_counter()
        first = self.plan.spec.shard_range(shard)[0]
        rows: list[dict[str, Any]] = []
        for a, b in self.plan.spec.chunk_ranges(shard):
            rows += self.run_chunk(descriptors[a - first: b - first])
        return commit_shard(self.plan, self.preparer.adapter, shard, rows, time.perf_counter() - started)
