"""The Spark engine: the job's pending shards as a DataFrame, `mapInPandas` over it; each Python worker keeps one
model session (and family adapter) for every shard it runs (Python workers are reused across tasks).

The model is pulled by each worker from the registry as the service pulls it (models/cache.fetch_verified into the
node's cache, every sha256 checked); a shard runs chunk by chunk as on the local engine (batch/work.ShardWorker) and
is committed to the output directory (atomic part, then record), so a failed job resumes from its finished shards.
On a cluster the output directory and the image inputs must be on storage every executor sees; texts and series
travel inside the shard rows.

    triserve batch forecast ... --engine spark --spark-master local[2] --workers 2
    triserve batch forecast ... --engine spark --spark-master spark://host:7077 --workers 16
"""
from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from triserve.batch.environment import started_with
from triserve.batch.job import ShardRecord
from triserve.batch.work import Plan, ShardWorker

_WORKERS: dict[bytes, ShardWorker] = {}  # per Python worker process: the plan's session, built on first use


def _worker(plan_bytes: bytes) -> ShardWorker:
    if plan_bytes not in _WORKERS:
        _WORKERS.clear()
        _WORKERS[plan_bytes] = ShardWorker(pickle.loads(plan_bytes))
    return _WORKERS[plan_bytes]


def shard_function(plan_bytes: bytes) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def run(frames: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        worker = _worker(plan_bytes)
        for frame in frames:
            records = [worker.run_shard(int(shard), pickle.loads(payload))
                       for shard, payload in zip(frame["shard"], frame["payload"])]
            yield pd.DataFrame({"shard": [r.shard for r in records], "rows": [r.rows for r in records],
                                "record": [pickle.dumps(r) for r in records]})
    return run


def session(master: str, slots: int):
    """A SparkSession on `master`; local masters bind 127.0.0.1, no UI; the workers can import this checkout."""
    from pyspark.sql import SparkSession

    local = master.startswith("local")  # this interpreter runs the workers; a cluster's executors bring their own
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    with started_with(**({"PYSPARK_PYTHON": python} if local else {})) as env:
        builder = (SparkSession.builder.master(master).appName("triserve-batch")
                   .config("spark.ui.enabled", "false")
                   .config("spark.python.worker.reuse", "true")
                   .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1")  # one shard per pandas frame
                   .config("spark.executorEnv.PYTHONPATH", env["PYTHONPATH"])
                   .config("spark.default.parallelism", str(max(slots, 1))))
        if local:
            builder = (builder.config("spark.driver.host", "127.0.0.1")
                       .config("spark.driver.bindAddress", "127.0.0.1").config("spark.pyspark.python", python))
        return builder.getOrCreate()


def run_spark(plan: Plan, descriptors: Sequence[dict[str, Any]], pending: Sequence[int], master: str = "local[2]",
              slots: int = 2, on_items: Callable[[int], None] | None = None) -> list[ShardRecord]:
    if not pending:
        return []
    spark = session(master, slots)
    try:
        spec = plan.spec
        rows = []
        for shard in pending:
            a, b = spec.shard_range(shard)
            rows.append((shard, pickle.dumps(list(descriptors[a:b]))))
        df = spark.createDataFrame(rows, "shard int, payload binary").repartition(len(rows), "shard")
        out = df.mapInPandas(shard_function(pickle.dumps(plan)), schema="shard int, rows long, record binary")
        records: list[ShardRecord] = []
        for row in out.collect():  # every partition at once (toLocalIterator would run them one by one)
            rec = pickle.loads(row["record"])
            records.append(rec)
            if on_items is not None:
                on_items(rec.rows)
        return records
    finally:
        spark.stop()
