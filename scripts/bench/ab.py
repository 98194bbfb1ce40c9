"""Paired A/B of two versions of the code: is a change faster, or did the host drift?

    python -m scripts.bench.ab --base 66c22f8 --out docs/bench/ab_wire          # ~12 min: this tree vs 66c22f8
    python -m scripts.bench.ab --base HEAD~1 --cells text:1 --rounds 2 --out /tmp/ab   # quick look

Why: this shared 2-core host drifts 5-15% within an hour (the in-process text ceiling read 300-349 texts/s over one
night), more than most single changes are worth, so numbers taken from two separate benchmark runs cannot tell a
0.3 ms improvement from the weather. Here both versions run in the same session, interleaved cell by cell (below),
and every metric is reported as the per-round difference head - base: drift shared by both sides cancels.

The base is a git ref checked out (detached) into .cache/bench/ab/<sha>; the head is this working tree (or --head,
another ref). Both serve the same registry (models/store here) with the same environment (harness.RAISED_LIMITS,
ONNX Runtime intra-op --intra-op, plus --env), and both are up at once in each round (fresh servers per round, both
pinned to --server-cpu; the idle one costs next to nothing). Per cell (task:concurrency): a warm-up cell for each,
then four measured wrk closed-loop cells in the order A B B A (B A A B in odd rounds; load pinned to --load-cpu), each
side's two averaged: a drift during the cell cancels instead of landing on whichever side ran second. Metrics:
requests/s, p50, p99, the CPU time per request of every server process (utime + stime from /proc over the measured
cell); c=1 cells also take a sequential probe of the server's own stage timings (preprocess, queue = the
gateway->runner hop, infer, postprocess).
Writes <out>.json and <out>.md.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from scripts.bench.harness import RAISED_LIMITS, TriservePeer, default_generator, load_cell, med_range, timings_probe
from scripts.bench.knee import task_requests
from scripts.bench.report import write_report
from scripts.bench.textmix import ROOT
from scripts.bench.tuning import cpu_seconds
from scripts.imagetools import system_tool

WORKTREES = ROOT / ".cache" / "bench" / "ab"


def git(*args: str, cwd: Path = ROOT) -> str:
    """The system git (scripts/imagetools.py "tool resolution"), never one first on the caller's PATH."""
    return subprocess.run([system_tool("git"), *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def checkout(ref: str) -> tuple[Path, str]:
    """(source tree, commit) for a ref: a detached worktree under .cache/bench/ab, made once per commit."""
    sha = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    tree = WORKTREES / sha[:12]
    if not (tree / "services" / "gateway.py").exists():
        tree.parent.mkdir(parents=True, exist_ok=True)
        git("worktree", "add", "--force", "--detach", str(tree), sha)
    return tree, sha


def parse_cells(spec: str) -> list[tuple[str, int]]:
    """"text:1,detection:1,text:32" -> [("text", 1), ("detection", 1), ("text", 32)]."""
    cells = []
    for part in spec.split(","):
        task, _, conc = part.strip().partition(":")
        if task not in ("text", "detection", "forecast") or not conc.isdigit() or int(conc) < 1:
            raise ValueError(f"bad cell {part!r}: expected task:concurrency, task in text/detection/forecast")
        cells.append((task, int(conc)))
    return cells


def start(tree: Path, args, tmp: Path, tag: str) -> TriservePeer:
    """A server of the tree's code (own BENTOML_HOME), pinned to the server CPU."""
    env = {**RAISED_LIMITS, "TRISERVE_RUNNER__INTRA_OP_THREADS": str(args.intra_op), **args.env}
    return TriservePeer(tag, env, args.server_cpu, tmp / f"{tag}.log", Path(tempfile.mkdtemp(dir=tmp)), root=tree,
                        registry=args.registry)


def cell_order(index: int) -> list[str]:
    """The measured cells of one round: A B B A, mirrored every other round so neither side always goes first."""
    first, second = ("base", "head") if index % 2 == 0 else ("head", "base")
    return [first, second, second, first]


def measure_cell(peer: TriservePeer, task: str, conc: int, args) -> dict[str, float]:
    """One measured closed-loop cell (+ the stage probe at c=1): {metric: value}."""
    requests = task_requests(task, peer.url)
    before = cpu_seconds(peer)
    cell = load_cell(args.generator, requests, conc, 0, args.duration, args.max_requests, args.load_cpu)
    after = cpu_seconds(peer)
    ok = max(cell.get("ok", 0), 1)
    row = {"per_s": cell["texts_per_s"], "p50_ms": cell["latency_ms"]["p50"], "p99_ms": cell["latency_ms"]["p99"],
           "non_200": cell.get("non_200", 0),
           **{f"cpu_ms_per_request[{name}]": (after[name] - before[name]) / ok * 1000 for name in after}}
    if conc == 1:
        probe = timings_probe(requests, args.probe_requests)
        row.update({"stage_client_ms": probe["client_ms_p50"],
                    **{f"stage_{k}": v for k, v in probe["server_timings_ms_p50"].items()}})
    return row


def start_both(trees: dict[str, Path], args, tmp: Path, tag: str) -> dict[str, TriservePeer]:
    """Both versions up at once, each checked to run its own tree's code."""
    peers = {side: start(tree, args, tmp, f"{tag}-{side}") for side, tree in trees.items()}
    try:
        for side, peer in peers.items():
            peer.wait_ready()
            served_from = {psutil.Process(pid).cwd() for plist in peer.pids().values() for pid in plist}
            if served_from != {str(trees[side])}:  # the workers import the code of their working directory
                raise RuntimeError(f"{side}: workers run in {served_from}, expected {trees[side]}")
    except BaseException:
        stop_all(peers)
        raise
    return peers


def stop_all(peers: dict[str, TriservePeer]) -> None:
    for peer in peers.values():
        peer.stop()


def measure_round(peers: dict[str, TriservePeer], cells: list[tuple[str, int]], args, index: int) -> dict:
    """Both versions resident at once; per cell A B B A (B A A B in odd rounds), so the two measurements of each side
    sit symmetrically in time and a linear drift during the cell cancels. {side: {"task:c": {metric: mean}}}."""
    out: dict[str, dict] = {side: {} for side in peers}
    order = cell_order(index)
    for task, conc in cells:
        key = f"{task}:{conc}"
        for side in order[:2]:  # warm both before the first measured cell
            load_cell(args.generator, task_requests(task, peers[side].url), conc, 0, args.warmup,
                      args.max_requests, args.load_cpu)
        samples: dict[str, list[dict]] = {side: [] for side in order[:2]}
        for side in order:
            samples[side].append(measure_cell(peers[side], task, conc, args))
        for side, rows in samples.items():
            out[side][key] = {m: round(statistics.fmean(r[m] for r in rows), 4) for m in rows[0]}
            values = ", ".join(f"{m} {v:g}" for m, v in out[side][key].items())
            print(f"[ab] round {index + 1} {side} {key} {values}", flush=True)
    return out


def paired(rounds: list[dict]) -> dict:
    """Per cell and metric: base and head medians [ranges] and the per-round difference head - base."""
    summary: dict[str, dict] = {}
    for cell in rounds[0]["base"]:
        metrics = sorted(set(rounds[0]["base"][cell]) & set(rounds[0]["head"][cell]))
        summary[cell] = {}
        for m in metrics:
            base = [r["base"][cell][m] for r in rounds]
            head = [r["head"][cell][m] for r in rounds]
            summary[cell][m] = {"base": med_range(base), "head": med_range(head),
                                "diff": med_range([h - b for h, b in zip(head, base)]),
                                "head_wins": sum((h > b) if m == "per_s" else (h < b) for h, b in zip(head, base))}
    return summary


def to_markdown(res: dict) -> str:
    def fmt(mr: dict) -> str:
        return f"{mr['median']:g} [{mr['min']:g} - {mr['max']:g}]"

    lines = [f"# Paired A/B: {res['head']['label']} vs {res['base']['label']} ({res['when']})", "",
             f"Reproduce: `{res['command']}`", "",
             f"Base {res['base']['commit'][:12]}, head {res['head']['label']}. {res['rounds']} rounds, both servers "
             f"up in each round; per cell a {res['warmup_s']:g} s warm-up cell each, then four {res['duration_s']:g} s "
             f"measured cells A B B A (base first in odd rounds), each side's two averaged ({res['generator']}, "
             f"concurrency per cell); server on CPU "
             f"{res['server_cpu']}, load on CPU {res['load_cpu']}; environment {res['env']}. Medians [min - max] over "
             "rounds; **diff** is head - base within each round (drift shared by a round cancels); wins = rounds "
             "where head was better (higher req/s, lower everything else).", "",
             "| cell | metric | base | head | diff (head - base) | head better in |", "|---|---|---|---|---|---|"]
    for cell, metrics in res["summary"].items():
        for m, s in metrics.items():
            if m == "non_200":
                continue
            lines.append(f"| {cell} | {m} | {fmt(s['base'])} | {fmt(s['head'])} | **{fmt(s['diff'])}** | "
                         f"{s['head_wins']}/{res['rounds']} |")
    errors = {cell: s["non_200"]["head"]["max"] + s["non_200"]["base"]["max"] for cell, s in res["summary"].items()
              if "non_200" in s}
    lines += ["", f"Non-200 answers (max per side, summed): {errors}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git ref of the baseline (checked out under .cache/bench/ab)")
    ap.add_argument("--head", default=None, help="git ref of the candidate; default: this working tree as it is")
    ap.add_argument("--cells", default="detection:1,text:1,text:32", help="task:concurrency, comma separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--probe-requests", type=int, default=100, help="sequential stage-timing requests per c=1 cell")
    ap.add_argument("--max-requests", type=int, default=200_000, help="bound per cell")
    ap.add_argument("--intra-op", type=int, default=1)
    ap.add_argument("--env", default="", help="extra server environment for both sides, K=V,K=V")
    ap.add_argument("--registry", type=Path, default=ROOT / "models" / "store", help="the registry both sides serve")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--load-cpu", type=int, default=1)
    ap.add_argument("--generator", default=default_generator(), choices=("wrk", "aiohttp"))
    ap.add_argument("--servers", default="per-round", choices=("per-round", "once"),
                    help="fresh servers every round (default: a process's luck is part of the spread), or one pair "
                         "for every round (CI's performance guard: two starts instead of 2 x rounds)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "ab")
    args = ap.parse_args(argv)
    args.env = dict(kv.split("=", 1) for kv in args.env.split(",") if kv)
    cells = parse_cells(args.cells)
    base_tree, base_sha = checkout(args.base)
    if args.head:
        head_tree, head_sha = checkout(args.head)
        head_label = f"{args.head} ({head_sha[:12]})"
    else:
        head_tree, head_sha = ROOT, git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
        head_label = f"working tree at {head_sha[:12]}" + (" with uncommitted changes" if dirty else "")
    rounds = []
    with tempfile.TemporaryDirectory(prefix="triserve-ab-") as tmp_name:
        tmp = Path(tmp_name)
        trees = {"base": base_tree, "head": head_tree}
        peers = start_both(trees, args, tmp, "all") if args.servers == "once" else None
        try:
            for i in range(args.rounds):
                this = peers if peers is not None else start_both(trees, args, tmp, f"r{i + 1}")
                try:
                    rounds.append(measure_round(this, cells, args, i))
                finally:
                    if this is not peers:
                        stop_all(this)
        finally:
            if peers is not None:
                stop_all(peers)
    res = {"when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "command": "python -m scripts.bench.ab " + " ".join(argv if argv is not None else sys.argv[1:]),
           "base": {"label": args.base, "commit": base_sha}, "head": {"label": head_label, "commit": head_sha},
           "rounds": args.rounds, "servers": args.servers, "warmup_s": args.warmup, "duration_s": args.duration,
           "generator": args.generator,
           "server_cpu": args.server_cpu, "load_cpu": args.load_cpu, "env": args.env, "intra_op": args.intra_op,
           "cells": [f"{t}:{c}" for t, c in cells], "per_round": rounds, "summary": paired(rounds)}
    write_report(args.out, res, to_markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
