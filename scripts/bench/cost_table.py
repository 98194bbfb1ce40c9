"""The cost table (issue 40's yardstick): CPU milliseconds per answered request in each server process next to the
floor of the same request measured in one process, per family, concurrency, placement and setting variant.

    python -m scripts.bench.cost_table --cells detect:16:remote,text:32:remote --rounds 3 \\
        [--variant base= --variant chunk1=TRISERVE_SLOTS__COCO__BATCHING__COMPUTE_BATCH=1] --out docs/bench/cost_table

Every cell is scripts.bench.cpu_split (server pinned to CPU 0, wrk on CPU 1, model primary); variants run
interleaved within each round (A, B, A, B, ...), so a drift of the host reaches both; the table shows the median and
range over rounds. The floor (cpu_split.floor_cpu_ms: the product's own decode/tokenise, model and postprocess, no
server) is measured once per family and round. Writes <out>.json and <out>.md.
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.cost_table", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", default="detect:16:remote,text:32:remote",
                    help="family:concurrency:placement, comma-separated")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=K=V,K=V (server settings of a variant); default one variant 'base' with none")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    variants = dict(v.split("=", 1) for v in args.variant) or {"base": ""}
    cells = [tuple(c.split(":")) for c in args.cells.split(",") if c]
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    runs: list[dict] = []
    floors: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for family, conc, placement in cells:
            for name, env in variants.items():
                with tempfile.TemporaryDirectory() as tmp:
                    out = Path(tmp) / "cell.json"
                    cpu_split.main(["--family", family, "--concurrency", conc, "--placement", placement,
                                    "--seconds", str(args.seconds), "--env", env, "--out", str(out)])
                    runs.append({"round": r, "variant": name, **json.loads(out.read_text())})
        for family in sorted({c[0] for c in cells}):
            _, body = cpu_split.request(family)
            floors.setdefault(family, []).append(cpu_split.floor_cpu_ms(family, body, seconds=8))
    table = []
    for family, conc, placement in cells:
        for name in variants:
            mine = [x for x in runs if x["variant"] == name and x["family"] == family
                    and x["concurrency"] == int(conc) and x["placement"] == placement]
            per_tier: dict[str, list[float]] = {}
            for x in mine:
                for tier, ms in x["cpu_ms_per_request"].items():
                    per_tier.setdefault(tier, []).append(ms)
            floor = statistics.median(floors[family])
            totals = [x["cpu_ms_per_request_total"] for x in mine]
            table.append({"family": family, "concurrency": int(conc), "placement": placement, "variant": name,
                          "env": variants[name], "requests_per_s": [x["requests_per_s"] for x in mine],
                          "failed": sum(x["failed"] for x in mine), "cpu_ms": per_tier, "total_ms": totals,
                          "floor_ms": floors[family], "total_over_floor": [round(t / floor, 3) for t in totals],
                          "rss_mb": [x["rss_mb"] for x in mine]})
    result = {"command": "python -m scripts.bench.cost_table " + " ".join(argv if argv is not None else sys.argv[1:]),
              "started_utc": started, "rounds": args.rounds, "table": table, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(to_markdown(result))
    print(to_markdown(result))
    return 0


def to_markdown(result: dict) -> str:
    lines = [f"# Cost per request ({result['started_utc']})", "", f"Command: `{result['command']}`", "",
             f"Medians [range] of {result['rounds']} interleaved rounds; CPU ms per answered request per server "
             "process (the gateway's API worker `triserve`, the runner `triserve-runner`), the floor is the same "
             "request in one process (scripts/bench/cpu_split.floor_step).", "",
             "| family | c | placement | variant | req/s | gateway ms | runner ms | total ms | floor ms "
             "| total / floor | runner RSS MB | failed |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["table"]:
        tiers = row["cpu_ms"]
        rss = [x.get("triserve-runner", 0.0) for x in row["rss_mb"]]
        lines.append(f"| {row['family']} | {row['concurrency']} | {row['placement']} | {row['variant']} | "
                     f"{med_range(row['requests_per_s'])} | {med_range(tiers.get('triserve', []))} | "
                     f"{med_range(tiers.get('triserve-runner', []))} | {med_range(row['total_ms'])} | "
                     f"{med_range(row['floor_ms'])} | {med_range(row['total_over_floor'])} | {med_range(rss)} | "
                     f"{row['failed']} |")
    variants = {row["variant"]: row["env"] for row in result["table"]}
    lines += ["", "Variants: " + "; ".join(f"`{k}`: {v or '(defaults)'}" for k, v in variants.items()), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
