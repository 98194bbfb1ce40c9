"""The cost table (issue 40's yardstick): CPU milliseconds per answered request in each server process next to the
floor of the same request measured in one process, per family, concurrency, placement, transport and setting variant.

    python -m scripts.bench.cost_table --cells detect:16:remote,text:32:remote,text:32:remote:grpc --rounds 3 \\
        [--variant base= --variant chunk1=TRISERVE_SLOTS__COCO__BATCHING__COMPUTE_BATCH=1] --out docs/bench/cost_table

A cell is family:concurrency:placement[:transport] (families text, detect, pose, segment, forecast; transports rest,
the default, grpc, oip-rest, oip-grpc). Every cell is scripts.bench.cpu_split (server pinned to CPU 0, the load on
CPU 1, model primary); variants run interleaved within each round (A, B, A, B, ...), so a drift of the host reaches
both; the table shows the median and range over rounds. The floor (cpu_split.floor_cpu_ms: the product's own
decode/tokenise, model and postprocess, no server) is measured once per family and round: the same for every
transport, since each carries the same request. Writes <out>.json and <out>.md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench import cpu_split


def med_range(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]" if values else "n/a"


def parse_cell(cell: str) -> tuple[str, str, str, str]:
    """family:concurrency:placement[:transport] -> its four parts, checked (a typo fails before any server starts)."""
    parts = cell.split(":")
    if len(parts) not in (3, 4):
        raise SystemExit(f"cell {cell!r}: want family:concurrency:placement[:transport]")
    family, conc, placement, transport = (*parts, "rest") if len(parts) == 3 else parts
    if family not in cpu_split.FAMILIES or not conc.isdigit() or placement not in ("remote", "local") \
            or transport not in cpu_split.TRANSPORTS:
        raise SystemExit(f"cell {cell!r}: family one of {list(cpu_split.FAMILIES)}, concurrency a number, "
                         f"placement remote or local, transport one of {list(cpu_split.TRANSPORTS)}")
    return family, conc, placement, transport


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.cost_table", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", default="detect:16:remote,text:32:remote",
                    help="family:concurrency:placement[:transport], comma-separated (transport default rest)")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=K=V,K=V (server settings of a variant); default one variant 'base' with none")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--generator", choices=("auto", "python"), default="auto",
                    help="cpu_split's --generator: auto (wrk for JSON bodies) or python (grpc_loop for every cell)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    variants = dict(v.split("=", 1) for v in args.variant) or {"base": ""}
    cells = [parse_cell(c) for c in args.cells.split(",") if c]
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    runs: list[dict] = []
    floors: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for family, conc, placement, transport in cells:
            for name, env in variants.items():
                with tempfile.TemporaryDirectory() as tmp:
                    out = Path(tmp) / "cell.json"
                    cpu_split.main(["--family", family, "--concurrency", conc, "--placement", placement,
                                    "--transport", transport, "--generator", args.generator,
                                    "--seconds", str(args.seconds), "--env", env, "--out", str(out)])
                    runs.append({"round": r, "variant": name, **json.loads(out.read_text())})
        for family in sorted({c[0] for c in cells}):
            _, body = cpu_split.request(family)
            floors.setdefault(family, []).append(cpu_split.floor_cpu_ms(family, body, seconds=8))
    table = []
    for family, conc, placement, transport in cells:
        for name in variants:
            mine = [x for x in runs if x["variant"] == name and x["family"] == family
                    and x["concurrency"] == int(conc) and x["placement"] == placement
                    and x.get("transport", "rest") == transport]
            per_tier: dict[str, list[float]] = {}
            for x in mine:
                for tier, ms in x["cpu_ms_per_request"].items():
                    per_tier.setdefault(tier, []).append(ms)
            floor = statistics.median(floors[family])
            totals = [x["cpu_ms_per_request_total"] for x in mine]
            table.append({"family": family, "concurrency": int(conc), "placement": placement,
                          "transport": transport, "variant": name, "generator": sorted({x.get("generator", "wrk")
                                                                                        for x in mine}),
                          "env": variants[name], "requests_per_s": [x["requests_per_s"] for x in mine],
                          "failed": sum(x["failed"] for x in mine), "cpu_ms": per_tier, "total_ms": totals,
                          "floor_ms": floors[family], "total_over_floor": [round(t / floor, 3) for t in totals],
                          "rss_mb": [x["rss_mb"] for x in mine]})
    result = {"command": "python -m scripts.bench.cost_table " + " ".join(argv if argv is not None else sys.argv[1:]),
              "started_utc": started, "rounds": args.rounds, "generator": args.generator, "table": table,
              "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(to_markdown(result))
    print(to_markdown(result))
    return 0


def to_markdown(result: dict) -> str:
    lines = [f"# Cost per request ({result['started_utc']})", "", f"Command: `{result['command']}`", "",
             f"Medians [range] of {result['rounds']} interleaved rounds; CPU ms per answered request per server "
             "process (the gateway's API worker `triserve`, the runner `triserve-runner`), the floor is the same "
             "request in one process (scripts/bench/cpu_split.floor_step), the same for every transport. " + (
                 "The load: scripts/bench/grpc_loop.py for every cell." if result.get("generator") == "python" else
                 "The load: wrk for rest and OIP REST JSON (text, forecast); scripts/bench/grpc_loop.py for grpc and "
                 "oip-grpc, and for OIP REST with images (binary tensor data, which wrk's replay cannot send)."), "",
             "| family | c | placement | transport | variant | req/s | gateway ms | runner ms | total ms | floor ms "
             "| total / floor | runner RSS MB | failed |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["table"]:
        tiers = row["cpu_ms"]
        rss = [x.get("triserve-runner", 0.0) for x in row["rss_mb"]]
        lines.append(f"| {row['family']} | {row['concurrency']} | {row['placement']} | "
                     f"{row.get('transport', 'rest')} | {row['variant']} | "
                     f"{med_range(row['requests_per_s'])} | {med_range(tiers.get('triserve', []))} | "
                     f"{med_range(tiers.get('triserve-runner', []))} | {med_range(row['total_ms'])} | "
                     f"{med_range(row['floor_ms'])} | {med_range(row['total_over_floor'])} | {med_range(rss)} | "
                     f"{row['failed']} |")
    variants = {row["variant"]: row["env"] for row in result["table"]}
    lines += ["", "Variants: " + "; ".join(f"`{k}`: {v or '(defaults)'}" for k, v in variants.items()), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
