"""Batch kill-and-resume drill: SIGKILL `triserve batch` at random moments, rerun it, count lost and duplicated items.

    python -m scripts.drills.batch_resume                                     # default models (models/store)
    python -m scripts.drills.batch_resume --registry /tmp/reg --models-file tests/fixtures/models.tiny.yaml \\
        --deployments classify=text,detect=detection,forecast=forecast --kills 5

Per command: an uninterrupted reference run; then the same command started `--kills` times and killed (SIGKILL to its
whole process group: the CLI and its worker processes) once a random number of further shards is recorded plus a
random moment (up to 0.3 s: inside a chunk, between a part and its record, ...); then once more to completion.
Pass: the final output has every input item exactly once (0 lost, 0 duplicated) and its rows equal the reference's.
The inputs are made here (images with a corrupt one, texts, a long series table).
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from scripts.drills.common import DEFAULT_REGISTRY, OUT_DIR
from scripts.drills.server import ROOT

DEFAULT_DEPLOYMENTS = "classify=intent,detect=coco,forecast=series"


def make_inputs(root: Path, scale: int) -> dict[str, Path]:
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(7)
    images = root / "images"
    images.mkdir(parents=True)
    for i in range(24 * scale):
        img = Image.new("RGB", (int(rng.integers(64, 480)), int(rng.integers(64, 480))), (30, 30, 30))
        x, y = int(rng.integers(0, 40)), int(rng.integers(0, 40))
        ImageDraw.Draw(img).ellipse([x, y, x + 40, y + 30], fill=(220, 40, 40))
        img.save(images / f"img{i:05d}.jpg", quality=90)
    (images / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    words = "book flight timer balance weather jazz transfer card blocked dinner reservation tomorrow".split()
    texts = root / "texts.jsonl"
    with open(texts, "w") as fh:
        for i in range(400 * scale):
            fh.write(json.dumps({"id": f"t{i:06d}", "text": " ".join(rng.choice(words, int(rng.integers(0, 12))))})
                     + "\n")
    series = root / "series.csv"
    with open(series, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "timestamp", "value"])
        for s in range(60 * scale):
            for t in range(int(rng.integers(30, 120))):
                stamp = (dt.datetime(2023, 1, 1) + dt.timedelta(days=t)).isoformat()
                w.writerow([f"s{s:05d}", stamp, 50 + s % 7 + 5 * np.sin(2 * np.pi * t / 7) + rng.normal()])
    return {"detect": images, "classify": texts, "forecast": series}


def command_line(args, command: str, deployment: str, source: Path, output: Path) -> list[str]:
    cmd = [sys.executable, "-m", "triserve.batch.cli", command, "--deployment", deployment, "--input", str(source),
           "--output", str(output), "--registry", str(args.registry), "--cache-dir", str(args.cache_dir),
           "--shard-size", str(args.shard_size), "--chunk-size", str(args.chunk_size), "--workers", str(args.workers),
           "--quiet"]
    if args.models_file:
        cmd += ["--models-file", str(args.models_file)]
    return cmd


def run_to_end(cmd: list[str]) -> tuple[float, dict]:
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.monotonic() - started, json.loads(proc.stdout.strip().splitlines()[-1])


def rows(output: Path) -> list[dict]:
    from triserve.batch.sinks import read_rows

    return read_rows(output)


def drill(args, command: str, deployment: str, source: Path, work: Path, rng: random.Random) -> dict:
    from triserve.batch.job import JobDir
    from triserve.batch.sources import open_source

    reference_dir, killed_dir = work / f"{command}-reference", work / f"{command}-killed"
    ref_seconds, ref_summary = run_to_end(command_line(args, command, deployment, source, reference_dir))
    kills = []
    shards = ref_summary["shards"]
    for k in range(args.kills):
        done_dir = killed_dir / "_done"
        before = len(list(done_dir.glob("*.json"))) if done_dir.is_dir() else 0
        # kill once a random number of further shards is recorded, plus a random moment within the next one (in a
        # chunk, between a part and its record, ...): every try gets part of the way, none to the end
        target = min(shards - 1, before + rng.randint(1, max(1, (shards - before) // (args.kills - k + 1))))
        extra = rng.uniform(0.0, 0.3)
        proc = subprocess.Popen(command_line(args, command, deployment, source, killed_dir), cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        started = time.monotonic()
        while proc.poll() is None and (len(list(done_dir.glob("*.json"))) if done_dir.is_dir() else 0) < target:
            time.sleep(0.005)
        time.sleep(extra)
        finished_before = proc.poll() is not None
        if not finished_before:
            os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its worker processes (its own session)
        proc.wait()
        spec = JobDir(killed_dir).existing_spec()
        done = len(JobDir(killed_dir).finished(spec)) if spec else 0
        kills.append({"kill": k + 1, "after_s": round(time.monotonic() - started, 3), "shards_finished": done,
                      "already_complete": finished_before})
    final_seconds, final = run_to_end(command_line(args, command, deployment, source, killed_dir))
    expected = open_source({"detect": "images", "classify": "texts", "forecast": "series"}[command], str(source)).keys
    got = [r["key"] for r in rows(killed_dir)]
    lost = len(set(expected) - set(got))
    duplicated = len(got) - len(set(got))
    same = rows(killed_dir) == rows(reference_dir)
    return {"command": command, "deployment": deployment, "items": len(expected), "shards": ref_summary["shards"],
            "reference_seconds": round(ref_seconds, 2), "kills": kills, "final_run": {
                "shards_skipped": final["shards_skipped"], "shards_run": final["shards_run"],
                "seconds": round(final_seconds, 2)},
            "lost": lost, "duplicated": duplicated, "rows_equal_reference": same,
            "errors": final["errors"], "passed": lost == 0 and duplicated == 0 and same}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--registry", default=str(DEFAULT_REGISTRY))
    ap.add_argument("--models-file", type=Path, default=None)
    ap.add_argument("--deployments", default=DEFAULT_DEPLOYMENTS, help="command=deployment,... to drill")
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--scale", type=int, default=1, help="input size multiplier")
    ap.add_argument("--shard-size", type=int, default=32)
    ap.add_argument("--chunk-size", type=int, default=16)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT_DIR / "batch_resume.json")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="triserve-drill-batch-"))
    args.cache_dir = work / "cache"
    inputs = make_inputs(work / "inputs", args.scale)
    results = []
    for pair in args.deployments.split(","):
        command, deployment = pair.split("=")
        result = drill(args, command, deployment, inputs[command], work, rng)
        results.append(result)
        print(f"{command} {deployment}: {result['items']} items in {result['shards']} shards, {args.kills} kills at "
              f"{[k['after_s'] for k in result['kills']]} s (shards finished then: "
              f"{[k['shards_finished'] for k in result['kills']]}); final run {result['final_run']}: lost "
              f"{result['lost']}, duplicated {result['duplicated']}, rows equal to the reference: "
              f"{result['rows_equal_reference']} -> {'PASS' if result['passed'] else 'FAIL'}")
    report = {"drill": "batch_resume", "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "registry": str(args.registry), "models_file": str(args.models_file) if args.models_file else None,
              "kills_per_command": args.kills, "workers": args.workers, "seed": args.seed, "results": results,
              "passed": all(r["passed"] for r in results)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"saved {args.out}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
