"""CI's performance guard: CPU per request of this commit against its base, measured in the same run, fails on a
regression of more than --max-ratio (default 1.15).

    python -m scripts.bench.perf_guard                      # HEAD vs HEAD~1, tiny text model, ~1 min
    python -m scripts.bench.perf_guard --base 7227e1d --rounds 5

Why CPU per request and not throughput or latency: on a shared 2-core host the wall clock drifts 5-15% within an
hour, while the CPU a request costs the server's processes (utime + stime of every worker over a measured cell,
scripts/bench/ab.py) moves far less; both versions run in the same session, interleaved A B B A per round, and the
verdict is the median over rounds of head / base (drift shared by a round cancels). The model is the tiny text
classifier built by the pipeline (seconds), so what is measured is the serving path itself: edge, validation,
kernel, runner hop, batching, response. Not a timed test: a script with a number and a threshold.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from scripts.bench.textmix import ROOT
from scripts.imagetools import system_tool

CACHE = ROOT / ".cache" / "perf_guard"
TINY_MODELS = ROOT / "tests" / "fixtures" / "models.tiny.yaml"


def text_models_file(path: Path = CACHE / "models.yaml") -> Path:
    """The tiny models file's text deployment alone (the registry here holds only the text models)."""
    import yaml

    repo = yaml.safe_load(TINY_MODELS.read_text())
    repo["deployments"] = [d for d in repo["deployments"] if d["family"] == "text"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(repo, sort_keys=False))
    return path


def tiny_text_registry(root: Path = CACHE / "registry") -> Path:
    """The tiny text model of the test session, built once into its own registry (alias stable)."""
    from scripts.pipeline import build_task
    from triserve.models.registry import LocalRegistry

    build_task("text", "tiny", LocalRegistry(root), CACHE / "build")
    return root


def cpu_per_request(side: dict) -> float:
    """Total CPU ms per answered request over every server process of one side's cell."""
    return sum(v for k, v in side.items() if k.startswith("cpu_ms_per_request["))


def ratios(per_round: list[dict], cell: str) -> list[float]:
    """head / base CPU per request, one per round."""
    return [cpu_per_request(r["head"][cell]) / cpu_per_request(r["base"][cell]) for r in per_round]


def verdict(per_round: list[dict], cell: str, max_ratio: float) -> tuple[bool, float, list[float]]:
    """(passed, median ratio, every round's ratio): the median must not exceed max_ratio."""
    values = ratios(per_round, cell)
    median = statistics.median(values)
    return median <= max_ratio, median, values


def main(argv: list[str] | None = None) -> int:
    from scripts.bench import ab

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="HEAD~1", help="git ref of the baseline (default: the previous commit)")
    ap.add_argument("--cell", default="text:16", help="task:concurrency (the tiny models serve text)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="A B B A rounds; the verdict is their median (identical code measured 0.78 and 1.07 over 3)")
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per measured cell (4 cells per round)")
    ap.add_argument("--max-ratio", type=float, default=1.15)
    ap.add_argument("--servers", default="once", choices=("once", "per-round"),
                    help="one server pair for every round (default: CI's time budget) or fresh ones per round")
    ap.add_argument("--out", type=Path, default=CACHE / "ab")
    args = ap.parse_args(argv)
    if subprocess.run([system_tool("git"), "rev-parse", "--verify", "--quiet", f"{args.base}^{{commit}}"], cwd=ROOT,
                      capture_output=True).returncode != 0:
        print(f"perf guard: WARNING: no commit {args.base} in this clone (a shallow clone?): nothing to compare "
              "against, the guard did not run", flush=True)
        return 0
    registry = tiny_text_registry()
    ab.main(["--base", args.base, "--cells", args.cell, "--rounds", str(args.rounds), "--warmup", "1.5",
             "--duration", str(args.duration), "--probe-requests", "0", "--servers", args.servers,
             "--registry", str(registry),
             "--env", f"TRISERVE_MODELS_FILE={text_models_file()}", "--out", str(args.out)])
    result = json.loads(args.out.with_suffix(".json").read_text())
    passed, median, values = verdict(result["per_round"], args.cell, args.max_ratio)
    base, head = result["base"]["commit"][:12], result["head"]["label"]
    print(f"perf guard: CPU per request {head} / {base} on {args.cell}: median {median:.3f} "
          f"(rounds {', '.join(f'{v:.3f}' for v in values)}); limit {args.max_ratio:.2f}: "
          f"{'pass' if passed else 'FAIL'}", flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
