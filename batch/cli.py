"""`triserve batch <command>`: offline inference over files and tables, resumable (docs/batch.md). One command per
family with a batch adapter (the family registry, configs/families.py: a third-party family's too), named by its
adapter's COMMAND, with the adapter's options and its source's (batch/sources.OPTIONS).

    triserve batch classify --deployment intent --input texts.jsonl --output out/intent
    triserve batch detect   --deployment coco   --input photos/ --output out/coco          # or s3://bucket/prefix
    triserve batch forecast --deployment series --input sales.parquet --output out/fc --frequency D --horizon 14
    triserve batch forecast-panel    ... --static-columns store_type   the table as panels (static categoricals pooled)
    triserve batch forecast-backtest ... --horizon 7 --origins 3       each series' rolling-origin backtest
    ... --engine ray [--ray-address auto]      Ray Data: shards through map_batches on an actor pool
    ... --engine spark [--spark-master local[2]]   Spark: shards through mapInPandas

Rerun the same command after a failure or a kill: finished shards are kept (verified by sha256), the rest run again,
and the output is the one an uninterrupted run writes. The summary (items, errors, items/s) is printed at the end and
saved as <output>/_SUCCESS.json.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from triserve.batch import model as batch_model
from triserve.batch.engine import progress_bar, run_local
from triserve.batch.job import JobDir, JobMismatch, JobSpec
from triserve.batch.sources import OPTIONS as SOURCE_OPTIONS
from triserve.batch.sources import open_source
from triserve.batch.work import Plan
from triserve.configs import families


def commands() -> dict[str, Any]:
    """command -> the adapter class of the family that answers it, for every registered family with one."""
    found: dict[str, Any] = {}
    for name in families.names():
        for adapter in families.batch_adapters(name):
            if adapter.COMMAND in found:
                raise ValueError(f"batch command {adapter.COMMAND!r} is claimed by {found[adapter.COMMAND].FAMILY} "
                                 f"and {name}")
            found[adapter.COMMAND] = adapter
    return found


def options_of(adapter: Any) -> tuple:
    return SOURCE_OPTIONS[adapter.SOURCE] + tuple(adapter.OPTIONS)


def _parser() -> argparse.ArgumentParser:
    from triserve.configs.settings import get_settings

    settings = get_settings()
    ap = argparse.ArgumentParser(prog="triserve batch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    for command, adapter in commands().items():
        what = "a folder or prefix of images" if adapter.SOURCE == "images" else "a table"
        p = sub.add_parser(command, help=f"{adapter.FAMILY} over {what}")
        p.add_argument("--deployment", required=True, help="a deployment of configs/models.yaml (or --models-file)")
        p.add_argument("--input", required=True, help="folder or s3://bucket/prefix (detect); .jsonl/.csv/.parquet")
        p.add_argument("--output", required=True, type=Path, help="output directory (parts, records, summary)")
        p.add_argument("--registry", default=str(settings.registry_uri or settings.registry_dir),
                       help="registry store the model is pulled from: a local registry directory (default "
                            "models/store) or oci:// s3:// http(s):// (models/stores)")
        p.add_argument("--models-file", type=Path, default=None, help="model repository file (default "
                                                                     "TRISERVE_MODELS_FILE or configs/models.yaml)")
        p.add_argument("--cache-dir", type=Path, default=settings.model_cache_dir,
                       help="verified model cache (default: the service's model_cache_dir)")
        p.add_argument("--model", choices=batch_model.ROLES, default="primary",
                       help="the deployment's primary (default) or its fallback: a job never falls back by itself")
        p.add_argument("--format", choices=("parquet", "jsonl"), default="parquet")
        chunk, shard = adapter.CHUNK_SIZE, adapter.SHARD_SIZE
        p.add_argument("--chunk-size", type=int, default=chunk, help=f"records per chunk (default {chunk})")
        p.add_argument("--shard-size", type=int, default=shard, help=f"records per shard (default {shard})")
        p.add_argument("--max-batch", type=int, default=256,
                       help="largest model call; the memory budget may cap it lower (runners/memory.py)")
        p.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0: its default)")
        p.add_argument("--engine", choices=("local", "ray", "spark"), default="local")
        p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                       help="local: preprocessing processes beside the session (0: all in one process); ray/spark: "
                            "model actors / executor slots")
        p.add_argument("--ray-address", default=None, help="ray: an existing cluster ('auto', ray://...); default: "
                                                           "a local one on 127.0.0.1")
        p.add_argument("--spark-master", default="local[2]", help="spark: the master URL (default local[2])")
        p.add_argument("--quiet", action="store_true", help="no progress bar")
        for option in options_of(adapter):
            p.add_argument("--" + option.name.replace("_", "-"), type=option.type, default=option.default,
                           help=option.help + ("" if option.default is None else f" (default {option.default})"))
    return ap


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return {option.name: getattr(args, option.name) for option in options_of(commands()[args.command])}


def prepare_job(args: argparse.Namespace) -> tuple[Plan, list[dict[str, Any]], list[int], JobDir]:
    """The plan (a new job, or the one in --output resumed with its pinned version), the input's descriptors and the
    shards still to run."""
    adapter = commands()[args.command]
    family = adapter.FAMILY
    jobdir = JobDir(args.output)
    old = jobdir.existing_spec()
    target = batch_model.resolve(args.deployment, args.registry, args.model, args.models_file,
                                 version=old.version if old is not None else None)
    if target.family != family:
        raise SystemExit(f"deployment {args.deployment!r} is a {target.family} deployment, not {family}")
    options = _options(args)
    source = open_source(adapter.SOURCE, args.input, options)
    spec = JobSpec(family=family, deployment=target.deployment, role=target.role, model=target.name,
                   version=target.version, input=str(args.input), input_fingerprint=source.fingerprint,
                   items=len(source.descriptors), shard_size=args.shard_size, chunk_size=args.chunk_size,
                   format=args.format, options=options,
                   command="" if adapter is families.batch_adapter(family) else args.command)  # "": as older jobs
    spec = jobdir.start(spec)
    plan = Plan(spec=spec, target=target, cache_dir=str(args.cache_dir), output=str(args.output),
                source_kind=adapter.SOURCE, max_batch=args.max_batch, threads=args.threads)
    return plan, source.descriptors, jobdir.pending(spec), jobdir


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    plan, descriptors, pending, jobdir = prepare_job(args)
    spec = plan.spec
    todo = sum(spec.shard_range(s)[1] - spec.shard_range(s)[0] for s in pending)
    bar = progress_bar(todo, f"{args.command} {spec.deployment}") if not args.quiet else None
    on_items = bar.update if bar is not None else None
    try:
        if args.engine == "local":
            run_local(plan, descriptors, pending, args.workers, on_items)
        elif args.engine == "ray":
            from triserve.batch.ray_engine import run_ray

            run_ray(plan, descriptors, pending, actors=args.workers, address=args.ray_address, on_items=on_items)
        else:
            from triserve.batch.spark_engine import run_spark

            run_spark(plan, descriptors, pending, master=args.spark_master, slots=args.workers, on_items=on_items)
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - started
    finished = jobdir.finished(spec, verify=False)
    missing = [s for s in range(spec.shards) if s not in finished]
    summary = {"command": args.command, "deployment": spec.deployment, "model": spec.model, "version": spec.version,
               "engine": args.engine, "output": str(args.output), "items": sum(r.rows for r in finished.values()),
               "errors": sum(r.errors for r in finished.values()), "shards": spec.shards,
               "shards_run": len(pending), "shards_skipped": spec.shards - len(pending), "items_run": todo,
               "seconds": round(seconds, 3), "items_per_s": round(todo / seconds, 2) if seconds > 0 else None,
               "complete": not missing}
    if not missing:
        jobdir.write_success(summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("TRISERVE_BATCH_LOG", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = _parser().parse_args(argv)
    try:
        summary = run(args)
    except JobMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{summary['command']} {summary['deployment']} ({summary['model']}:{summary['version']}, "
          f"{summary['engine']}): {summary['items']} items, {summary['errors']} errors; ran {summary['items_run']} "
          f"items in {summary['shards_run']} shards ({summary['shards_skipped']} already done) in "
          f"{summary['seconds']} s = {summary['items_per_s']} items/s -> {summary['output']}")
    print(json.dumps(summary, sort_keys=True))
    return 0 if summary["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
