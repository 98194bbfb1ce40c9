"""Batch throughput vs the in-process ceiling, per family (issue 33): does the job keep the model busy?

    python -m scripts.bench.batch_throughput                        # default models (models/store), 3 runs each
    python -m scripts.bench.batch_throughput --registry /tmp/reg --models-file tests/fixtures/models.tiny.yaml \\
        --deployments classify=text,detect=detection,forecast=forecast --scaling classify

Per family, on the same inputs (made here: texts, JPEG photos-sized images, 500-point daily series):
  session   the bare model session (the runner's pool, triserve.batch.model.Session) on items prepared beforehand: model
            calls only (decoding, tokenising, the forecaster's classical methods done before the clock starts);
  pipeline  the in-process ceiling: the family's whole chain in one process on records already in memory (prepare +
            model + finish per chunk, no files, no shards), the same work the job does;
  job       `triserve batch` as a user runs it (files in, Parquet out, shards committed, worker processes), timed
            from start to summary, model load and process start included.
Ratios job/session and job/pipeline; medians of --runs. --scaling COMMAND also runs that job on Ray and Spark with 1
and 2 workers (local cluster / local[N] on this machine). Writes docs/bench/batch_throughput.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scripts.drills.common import DEFAULT_REGISTRY
from scripts.drills.server import ROOT

OUT = ROOT / "docs" / "bench" / "batch_throughput"
KIND = {"detect": "images", "classify": "texts", "forecast": "series"}


def make_inputs(root: Path, n_texts: int, n_images: int, n_series: int, points: int) -> dict[str, Path]:
    import csv
    import datetime as dt

    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(3)
    root.mkdir(parents=True, exist_ok=True)
    words = ("what is my account balance book a flight to paris next monday set a timer for ten minutes how do you "
             "say good morning in german transfer two hundred dollars to my savings tell me a joke").split()
    texts = root / "texts.jsonl"
    with open(texts, "w") as fh:
        for i in range(n_texts):
            fh.write(json.dumps({"id": i, "text": " ".join(rng.choice(words, int(rng.integers(3, 20))))}) + "\n")
    images = root / "images"
    images.mkdir()
    for i in range(n_images):  # COCO-sized photos: 640 x 480, shapes on noise
        img = Image.fromarray(rng.integers(0, 255, (480, 640, 3), dtype=np.uint8))
        draw = ImageDraw.Draw(img)
        for _ in range(4):
            x, y = int(rng.integers(0, 560)), int(rng.integers(0, 400))
            draw.rectangle([x, y, x + 80, y + 60], fill=tuple(int(c) for c in rng.integers(0, 255, 3)))
        img.save(images / f"{i:05d}.jpg", quality=85)
    series = root / "series.csv"
    with open(series, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "timestamp", "value"])
        start = dt.datetime(2020, 1, 1)
        for s in range(n_series):
            level, amp = 100 + 10 * s % 50, 5 + s % 7
            for t in range(points):
                w.writerow([f"s{s:04d}", (start + dt.timedelta(days=t)).isoformat(),
                            round(level + amp * np.sin(2 * np.pi * t / 7) + 0.05 * t + rng.normal(), 4)])
    return {"classify": texts, "detect": images, "forecast": series}


def cli_args(command: str, deployment: str, source: Path, output: Path, registry: str, models_file, cache: Path,
             workers: int, engine: str = "local") -> list[str]:
    out = [command, "--deployment", deployment, "--input", str(source), "--output", str(output), "--registry",
           registry, "--cache-dir", str(cache), "--workers", str(workers), "--engine", engine, "--quiet"]
    return out + (["--models-file", str(models_file)] if models_file else [])


def measure(command: str, deployment: str, source: Path, args, work: Path) -> dict:
    from triserve.batch import cli
    from triserve.batch.sources import Loader, open_source
    from triserve.batch.work import ShardWorker

    parsed = cli._parser().parse_args(cli_args(command, deployment, source, work / f"probe-{command}", args.registry,
                                               args.models_file, work / "cache", args.workers))
    plan, descriptors, _, _ = cli.prepare_job(parsed)
    worker = ShardWorker(plan)
    records = Loader()(KIND[command], open_source(KIND[command], str(source)).descriptors)
    chunk = plan.spec.chunk_size
    chunks = [records[k: k + chunk] for k in range(0, len(records), chunk)]
    prepared = [worker.preparer.adapter.prepare(c) for c in chunks]
    worker.session.run(prepared[0].items)  # warm
    n = len(records)
    session_s, pipeline_s, job = [], [], []
    for run in range(args.runs):
        t0 = time.perf_counter()
        for p in prepared:
            worker.session.run(p.items)
        session_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for c in chunks:
            p = worker.preparer.adapter.prepare(c)
            worker.preparer.finish(p.without_items(), worker.session.run(p.items))
        pipeline_s.append(time.perf_counter() - t0)
        parsed = cli._parser().parse_args(cli_args(command, deployment, source, work / f"{command}-{run}",
                                                   args.registry, args.models_file, work / "cache", args.workers))
        t0 = time.perf_counter()
        summary = cli.run(parsed)
        job.append(time.perf_counter() - t0)
        assert summary["complete"] and summary["items"] == n
    med = {k: statistics.median(v) for k, v in (("session", session_s), ("pipeline", pipeline_s), ("job", job))}
    rate = {k: n / s for k, s in med.items()}
    return {"command": command, "deployment": deployment, "model": plan.spec.model, "version": plan.spec.version,
            "items": n, "chunk_size": chunk, "batch_cap": worker.session.batch_cap, "workers": args.workers,
            "runs": args.runs, "seconds": {k: [round(x, 3) for x in v] for k, v in
                                           (("session", session_s), ("pipeline", pipeline_s), ("job", job))},
            "items_per_s": {k: round(v, 1) for k, v in rate.items()},
            "job_vs_session": round(rate["job"] / rate["session"], 3),
            "job_vs_pipeline": round(rate["job"] / rate["pipeline"], 3)}


def scaling(command: str, deployment: str, source: Path, args, work: Path) -> list[dict]:
    from triserve.batch import cli

    out: list[dict[str, Any]] = []
    for engine in ("local", "ray", "spark"):
        for workers in (1, 2):
            parsed = cli._parser().parse_args(cli_args(command, deployment, source, work / f"s-{engine}-{workers}",
                                                       args.registry, args.models_file, work / "cache", workers,
                                                       engine))
            if engine == "spark":
                parsed.spark_master = f"local[{workers}]"
            t0 = time.perf_counter()
            try:
                summary = cli.run(parsed)
            except ImportError as exc:
                out.append({"engine": engine, "workers": workers, "skipped": str(exc)})
                continue
            seconds = time.perf_counter() - t0
            out.append({"engine": engine, "workers": workers, "items": summary["items"], "seconds": round(seconds, 2),
                        "items_per_s": round(summary["items"] / seconds, 1)})
            print(f"  scaling {engine} x{workers}: {out[-1]['items_per_s']} items/s", flush=True)
    return out


def markdown(report: dict) -> str:
    lines = ["# Batch throughput vs the in-process ceiling (issue 33)", "",
             f"{report['when']}, {report['machine']}; registry `{report['registry']}`"
             + (f", models file `{report['models_file']}`" if report["models_file"] else "") + ". "
             "Generated by `scripts/bench/batch_throughput.py`; medians of "
             f"{report['runs']} runs. session = the bare model session on items prepared beforehand (model calls "
             "only); pipeline = the in-process ceiling: prepare + model + finish in one process on in-memory "
             "records; job = "
             "`triserve batch` from files to committed Parquet shards, model load and worker start included.", "",
             "| family | model | items | chunk | workers | session items/s | pipeline items/s | job items/s | "
             "job/session | job/pipeline |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        ips = r["items_per_s"]
        lines.append(f"| {r['command']} | {r['model']}:{r['version']} | {r['items']} | {r['chunk_size']} | "
                     f"{r['workers']} | {ips['session']} | {ips['pipeline']} | {ips['job']} | {r['job_vs_session']} | "
                     f"{r['job_vs_pipeline']} |")
    if report.get("scaling"):
        lines += ["", f"Scaling of `{report['scaling_command']}` with workers (this 2-core machine):", "",
                  "| engine | workers | items/s | seconds (start to summary) |", "|---|---|---|---|"]
        for s in report["scaling"]:
            lines.append(f"| {s['engine']} | {s['workers']} | {s.get('items_per_s', 'skipped')} | "
                         f"{s.get('seconds', s.get('skipped'))} |")
    return "\n".join(lines + ["", report.get("note", ""), ""])


def main(argv: list[str] | None = None) -> int:
    import os
    import platform

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--registry", default=str(DEFAULT_REGISTRY))
    ap.add_argument("--models-file", type=Path, default=None)
    ap.add_argument("--deployments", default="classify=intent,detect=coco,forecast=series")
    ap.add_argument("--texts", type=int, default=4000)
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--series", type=int, default=400)
    ap.add_argument("--points", type=int, default=500)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--scaling", default=None, help="a command to also run on local/Ray/Spark with 1 and 2 workers")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="triserve-bench-batch-"))
    inputs = make_inputs(work / "inputs", args.texts, args.images, args.series, args.points)
    pairs = [p.split("=") for p in args.deployments.split(",")]
    results = []
    for command, deployment in pairs:
        r = measure(command, deployment, inputs[command], args, work)
        results.append(r)
        print(f"{command} {r['model']}: session {r['items_per_s']['session']}/s, pipeline "
              f"{r['items_per_s']['pipeline']}/s, job {r['items_per_s']['job']}/s -> job/session "
              f"{r['job_vs_session']}, job/pipeline {r['job_vs_pipeline']}", flush=True)
    report = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": f"{os.cpu_count()} CPUs, {platform.machine()}",
              "registry": args.registry, "models_file": str(args.models_file) if args.models_file else None,
              "runs": args.runs, "results": results, "note": args.note}
    if args.scaling:
        deployment = dict(pairs)[args.scaling]
        report["scaling_command"] = args.scaling
        report["scaling"] = scaling(args.scaling, deployment, inputs[args.scaling], args, work)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    print(f"saved {args.out}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
