"""The local engine: one process holds the model session and runs big batches back to back, while worker processes
read, decode and tokenise the next chunks (and, for families whose postprocessing is heavy, finish the previous ones).

Why this shape: the session is the expensive part and is best fed without pause; decoding images, tokenising and the
forecast family's classical fits are CPU work in Python that would otherwise sit between two model calls. A bounded
window of chunks in flight keeps memory flat whatever the input size. No deadlines, no admission, no fallback: a
batch job wants every item through the one model it named, as fast as the machine allows.

Shards are committed (batch/job.py) as soon as their last chunk is finished, so a kill loses at most the shards in
flight, and a rerun does only what is missing.
"""
from __future__ import annotations

import multiprocessing
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from triserve.batch import model as batch_model
from triserve.batch.job import ShardRecord
from triserve.batch.work import Plan, Preparer, ShardWorker, commit_shard
from triserve.kernel.batch import Prepared

_PREPARER: Preparer | None = None


def _init(plan: Plan) -> None:
    global _PREPARER
    _PREPARER = Preparer(plan)


def _prepare(descriptors: list[dict[str, Any]]) -> Prepared:
    assert _PREPARER is not None
    return _PREPARER.prepare(descriptors)


def _finish(prepared: Prepared, outputs: list) -> list[dict[str, Any]]:
    assert _PREPARER is not None
    return _PREPARER.finish(prepared, outputs)


def _done(value: Any) -> Future:
    fut: Future = Future()
    fut.set_result(value)
    return fut


def run_local(plan: Plan, descriptors: Sequence[dict[str, Any]], pending: Sequence[int], workers: int = 1,
              on_items: Callable[[int], None] | None = None) -> list[ShardRecord]:
    """Run the pending shards; returns their records. workers=0: everything in this process."""
    spec = plan.spec
    notify = on_items or (lambda n: None)
    records: list[ShardRecord] = []
    if workers <= 0:
        worker = ShardWorker(plan)
        for shard in pending:
            a, b = spec.shard_range(shard)
            records.append(worker.run_shard(shard, list(descriptors[a:b])))
            notify(b - a)
        return records

    tasks = [(shard, a, b) for shard in pending for a, b in spec.chunk_ranges(shard)]
    context = multiprocessing.get_context("spawn")  # no fork of a process that holds ONNX Runtime's threads
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_init, initargs=(plan,)) as pool:
        window = 2 * workers + 2
        inflight: deque[Future] = deque()
        submitted = 0

        def fill() -> None:
            nonlocal submitted
            while len(inflight) < window and submitted < len(tasks):
                _, a, b = tasks[submitted]
                inflight.append(pool.submit(_prepare, list(descriptors[a:b])))
                submitted += 1

        fill()  # the workers start preparing while the session loads
        session = batch_model.Session(plan.target, Path(plan.cache_dir), plan.max_batch, plan.threads)
        local = Preparer(plan)
        heavy = local.adapter.HEAVY_FINISH
        started: dict[int, float] = {}
        chunks: dict[int, list[Future]] = {}
        ready: deque[int] = deque()  # shards whose every chunk is submitted for finishing, in order

        def commit(block: bool) -> None:
            while ready and (block or all(f.done() for f in chunks[ready[0]])):
                shard = ready.popleft()
                rows = [row for f in chunks.pop(shard) for row in f.result()]
                records.append(commit_shard(plan, local.adapter, shard, rows, time.perf_counter() - started[shard]))

        for index, (shard, a, b) in enumerate(tasks):
            started.setdefault(shard, time.perf_counter())
            prepared = inflight.popleft().result()
            fill()
            outputs = session.run(prepared.items)
            lean = prepared.without_items()
            chunks.setdefault(shard, []).append(pool.submit(_finish, lean, outputs) if heavy
                                                else _done(local.finish(lean, outputs)))
            notify(b - a)
            if index + 1 == len(tasks) or tasks[index + 1][0] != shard:
                ready.append(shard)
            commit(block=False)
        commit(block=True)
    return records


def progress_bar(total: int, desc: str):
    """tqdm on stderr, off without a terminal (CI) or with CI set; the summary is printed either way."""
    import os

    from tqdm import tqdm

    disable = not sys.stderr.isatty() or os.environ.get("CI", "").lower() in ("1", "true", "yes")
    return tqdm(total=total, desc=desc, unit="item", file=sys.stderr, disable=disable, smoothing=0.1)
