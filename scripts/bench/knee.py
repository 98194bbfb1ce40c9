"""The latency knee per task: ramp an open-loop arrival rate until p99 breaks the SLO, then limit at 80% of it.

    python -m scripts.bench.knee                       # text, detection, forecast; ~10 min; docs/bench/knee.*
    python -m scripts.bench.knee --tasks pose,classification,segmentation --out docs/bench/knee_images
    python -m scripts.bench.knee --tasks text --rounds 1 --step-seconds 5 --out /tmp/knee   # quick look
    python -m scripts.bench.knee --write-config   # also writes the limits and the autoscaling targets (below)

Why open loop: a closed loop slows down with the server and hides queueing; a constant arrival rate keeps sending,
so the rate where p99 leaves the SLO is the real capacity. The generator is scripts/bench/harness.py's open_loop:
Grafana's k6 (constant-arrival-rate, --no-usage-report) when its binary is installed in the system directories, else
the project's bounded aiohttp generator (scripts/drills/loadgen.py; a few hundred requests/s at most on one core).
One triserve instance (default config, capacity limits off, per-client limit raised since the generator is one
client) is pinned to --server-cpu and the generator to --load-cpu. Per task and round the rate starts at
--start-rate and grows by --factor per step of --step-seconds until a step breaks the SLO: p99 of the primary answers
above the task's SLO, more than 1% failed requests, more than 1% degraded answers (a fallback model answered: the
primary did not hold that rate; counted apart, never as served load), or more than 1% of the arrivals dropped by the
generator (k6 for lack of VUs, loadgen at its in-flight cap). The knee is the last rate that held; the knee of a task
is the median over --rounds ramps, and the limit written is floor(0.8 x knee) requests/s for the instance.

--write-config writes, per default deployment measured: the limit (access.deployment_rate_per_s in
configs/serving.yaml), and the targets derived from the knee by scripts/bench/scaling_targets.py (Little's law: the
HPA/KEDA/Yatai pending-items targets, the TriserveQueueSaturated thresholds, the dashboard's lines, BentoCloud's
concurrency, docs/operations.md's table), then regenerates the Prometheus Operator files from them. Families not
measured this time keep their record from the previous docs/bench/knee.json.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench import scaling_targets
from scripts.bench.harness import RAISED_LIMITS, TriservePeer, k6_binary, open_loop
from scripts.bench.load_mix import payloads
from scripts.bench.report import pyplot, write_report
from scripts.bench.textmix import ROOT
from scripts.bench.textmix import texts as mix_texts
from triserve.configs.deployments import load_repository

# p99 per request, what a client would be promised: ~3x each family's lone request on one core of this host
# (segmentation's mask head makes a lone image ~0.3-0.6 s)
SLO_MS = {"text": 100.0, "detection": 300.0, "forecast": 100.0, "pose": 300.0, "classification": 300.0,
          "segmentation": 1000.0}
PATHS = {"text": "/v1/classify", "detection": "/v1/detect", "forecast": "/v1/forecast", "pose": "/v1/pose",
         "classification": "/v1/classify-image", "segmentation": "/v1/segment"}
LIMIT_SHARE = 0.8
CONFIG = ROOT / "configs" / "serving.yaml"


def task_requests(task: str, base: str) -> list[tuple[str, bytes]]:
    """The request mix per task: the text mix of the text benchmark (one text each), load_mix's images and series
    (the image families other than detection get detection's images, one per request)."""
    if task == "text":
        texts, _ = mix_texts(256)
        return [(base + PATHS[task], json.dumps({"texts": [t], "top_k": 3}).encode()) for t in texts]
    path = "/v1/detect" if task in ("pose", "classification", "segmentation") else PATHS[task]
    return [(base + PATHS[task], json.dumps(body).encode()) for p, body in payloads() if p == path]


def held(cell: dict, slo_ms: float) -> bool:
    """A step holds when the primary answers' p99 is within the SLO and (almost) nothing failed, was answered
    degraded (by a fallback model) or was dropped."""
    if "latency_ms" not in cell or not cell.get("requests"):
        return False
    expected = cell["rate"] * cell["seconds"]
    p99 = cell["latency_ms"].get("p99")
    return (p99 is not None and p99 <= slo_ms and (cell.get("failed_share") or 0.0) <= 0.01
            and cell.get("degraded", 0) <= 0.01 * cell["requests"]
            and cell.get("dropped_iterations", 0) <= 0.01 * expected)


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def step_seconds(rate: float, args) -> float:
    """--step-seconds, longer at low rates so that every step has --min-step-requests arrivals: a p99 over the
    40 requests of 8 s at 5/s (coco's first steps) would be the slowest request alone."""
    return max(args.step_seconds, math.ceil(args.min_step_requests / rate))


def ramp(task: str, requests: list, args, tmp: Path) -> dict:
    """One ramp: rates start, start*f, ... until a step breaks the SLO (or --max-rate); the knee is the last held.
    A first step that breaks halves the rate (down to 1/s) and the ramp goes on up from there: a start rate above
    the knee (a slower model under the same deployment name) measures the knee instead of reporting none."""
    steps, rate, knee = [], float(args.start_rate[task]), None
    while rate <= args.max_rate:
        cell = open_loop(f"{task}_{int(rate)}", requests, int(rate), step_seconds(rate, args), tmp, args.load_cpu)
        cell["held"] = held(cell, SLO_MS[task])
        steps.append(cell)
        lat = cell.get("latency_ms", {})
        print(f"[knee] {task} {int(rate):>5}/s  p50 {_ms(lat.get('p50')):>8}  p99 {_ms(lat.get('p99')):>8} ms  "
              f"failed {cell.get('failed_share')}  degraded {cell.get('degraded')}  dropped "
              f"{cell.get('dropped_iterations')}  {'held' if cell['held'] else 'BROKE'}", file=sys.stderr)
        if not cell["held"]:
            if knee is None and rate > 1:
                rate = max(1, math.floor(rate / 2))
                time.sleep(1.0)
                continue
            break
        knee = int(rate)
        rate = math.ceil(rate * args.factor)
        time.sleep(1.0)  # let the queue drain between steps
    return {"steps": steps, "knee_rps": knee}


def write_limits(limits: dict[str, int], config: Path = CONFIG) -> None:
    """Replace (or add) the `deployment_rate_per_s` line of the access section, keeping the rest of the file as is;
    deployments not measured this time keep their limits."""
    import yaml

    text = config.read_text()
    current = ((yaml.safe_load(text) or {}).get("access") or {}).get("deployment_rate_per_s") or {}
    limits = {**current, **limits}
    line = f"  deployment_rate_per_s: {{{', '.join(f'{t}: {v}' for t, v in sorted(limits.items()))}}}"
    line += f"  # 80% of the knee, scripts/bench/knee.py {time.strftime('%Y-%m-%d')}"
    if re.search(r"^  deployment_rate_per_s:.*$", text, flags=re.M):
        text = re.sub(r"^  deployment_rate_per_s:.*$", line, text, count=1, flags=re.M)
    elif re.search(r"^access:\s*$", text, flags=re.M):
        text = re.sub(r"^access:\s*$", "access:\n" + line, text, count=1, flags=re.M)
    else:
        text = text.rstrip("\n") + "\naccess:\n" + line + "\n"
    config.write_text(text)


def to_markdown(res: dict) -> str:
    L = [f"# Latency knee per task ({res['started_utc']})", "", f"Command: `{res['command']}`", "",
         f"{res['placement']}. Step: {res['step_seconds']} s (at least {res.get('min_step_requests', 0)} arrivals) "
         f"at a constant arrival rate, rate x{res['factor']} "
         f"per step; a step breaks on p99 of the primary answers > SLO, > 1% failed, > 1% degraded answers (a "
         f"fallback model answered) or > 1% dropped arrivals. Knee = median over "
         f"{res['rounds']} ramps; limit = floor({LIMIT_SHARE} x knee).", "",
         "| task | SLO p99 ms | knee per round (req/s) | knee (median) | limit written |", "|---|---|---|---|---|"]
    for task, r in res["tasks"].items():
        L.append(f"| {task} | {SLO_MS[task]:g} | {', '.join(str(k) for k in r['knees'])} | {r['knee_rps']} | "
                 f"{r['limit_rps']} |")
    L += ["", "Steps (every round):", "",
          "| task | round | offered req/s | sent req/s | primary answers/s | p50 ms | p90 ms | p99 ms | failed | "
          "degraded | dropped | verdict |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for task, r in res["tasks"].items():
        for i, rnd in enumerate(r["rounds"]):
            for c in rnd["steps"]:
                lat = c.get("latency_ms", {})
                got = (c.get("requests") or 0) / c["seconds"] if c.get("seconds") else 0
                primary = f"{c['ok'] / c['seconds']:.0f}" if c.get("seconds") and "ok" in c else "n/a"
                L.append(f"| {task} | {i + 1} | {c.get('rate')} | {got:.0f} | {primary} | {_ms(lat.get('p50'))} | "
                         f"{_ms(lat.get('p90'))} | {_ms(lat.get('p99'))} | {c.get('failed_share', 0) or 0:.3f} | "
                         f"{c.get('degraded', 'n/a')} | {c.get('dropped_iterations', 0)} | "
                         f"{'held' if c['held'] else 'broke'} |")
    # count - (le="0.05" bucket) = pauses longer than 50 ms
    signals = [ln for ln in res.get("stall_signals") or [] if "_count" in ln or 'le="0.05"' in ln]
    if signals:
        L += ["", "Pause histograms of the server after the ramps (`/metrics`; _count minus the le=\"0.05\" bucket = "
              "pauses over 50 ms; a tail spike with a low p50 points here first):", "", "```"] + signals + ["```"]
    if res.get("server_log"):
        L += ["", f"Server log kept at `{res['server_log']}` (not committed)."]
    if res.get("plot"):
        L += ["", f"![p99 vs offered rate]({Path(res['plot']).name})"]
    return "\n".join(L) + "\n"


def plot(res: dict, out: Path) -> str | None:
    plt = pyplot()
    if plt is None:
        return None
    tasks = list(res["tasks"])
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        r = res["tasks"][task]
        for i, rnd in enumerate(r["rounds"]):
            steps = [c for c in rnd["steps"] if "latency_ms" in c]
            xs = [c["rate"] for c in steps]
            for q, style, alpha in (("p99", "o-", 1.0), ("p50", "x--", 0.6)):
                ys = [c["latency_ms"].get(q) for c in steps]
                ax.plot(xs, [float("nan") if y is None else y for y in ys], style, alpha=alpha,
                        label=f"{q} round {i + 1} (primary answers)")
        ax.axhline(SLO_MS[task], color="red", lw=1, label="SLO (p99)")
        if r["knee_rps"]:
            ax.axvline(r["knee_rps"], color="grey", ls=":", label=f"knee {r['knee_rps']}/s")
            ax.axvline(r["limit_rps"], color="green", ls="--", label=f"limit {r['limit_rps']}/s")
        ax.set_yscale("log")
        ax.set_xlabel("offered requests/s (open loop)")
        ax.set_ylabel("latency ms")
        ax.set_title(task)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = out.with_name(out.name + ".png")
    fig.savefig(path, dpi=110)
    return str(path)


def stall_signals(url: str) -> list[str]:
    """The server's own pause histograms after the ramps (GC pauses, malloc_trim), to explain a tail spike."""
    import httpx

    try:
        text = httpx.get(f"{url}/metrics", timeout=10).text
    except httpx.HTTPError as exc:
        return [f"metrics unreachable: {exc}"]
    return [ln for ln in text.splitlines()
            if ln.startswith(("triserve_gc_pause_seconds", "triserve_malloc_trim_seconds")) and not ln.startswith("#")]


def keep_log(log: Path, out: Path) -> str | None:
    """The server log survives the run (under .cache/bench/logs, git-ignored) for post-mortems."""
    if not log.exists():
        return None
    kept = ROOT / ".cache" / "bench" / "logs" / f"{out.name}_server.log"
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_bytes(log.read_bytes())
    return str(kept.relative_to(ROOT))


def write_targets(res: dict, defaults: dict[str, str], previous: Path = scaling_targets.KNEE_JSON,
                  root: Path = ROOT, render: bool = True) -> dict:
    """The autoscaling targets from this run's knees, plus the previous record of the families without a knee in
    this run (not measured, or no step held): their targets must stay, and the smallest target over all is the one
    for deployments nobody measured."""
    tasks = {}
    measured = {f for f, t in res["tasks"].items() if t.get("limit_rps")}
    if previous.exists():
        tasks = {f: t for f, t in json.loads(previous.read_text()).get("tasks", {}).items() if f not in measured}
        if tasks:
            print(f"[knee] targets of {sorted(tasks)} from the previous record {previous}", file=sys.stderr)
    targets = scaling_targets.derive({"tasks": {**tasks, **{f: res["tasks"][f] for f in measured}}}, defaults)
    for path in scaling_targets.write_targets(targets, root, render):
        print(f"wrote {path.relative_to(root)}")
    return {d: {"target": scaling_targets.quantity(t.target), "alert": scaling_targets.plain(t.knee_items)}
            for d, t in targets.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.knee", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="text,detection,forecast")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--step-seconds", type=float, default=8.0)
    ap.add_argument("--min-step-requests", type=int, default=120,
                    help="a step lasts at least this many arrivals (longer than --step-seconds at low rates)")
    ap.add_argument("--factor", type=float, default=1.25)
    ap.add_argument("--start-rate", default="text=20,detection=5,forecast=10,pose=5,classification=5,segmentation=1",
                    help="task=rate list: the first step of each ramp")
    ap.add_argument("--max-rate", type=float, default=2000)
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--load-cpu", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "knee")
    ap.add_argument("--write-config", action="store_true", help="write the limits into configs/serving.yaml")
    args = ap.parse_args(argv)
    args.start_rate = {k: float(v) for k, v in (kv.split("=") for kv in args.start_rate.split(","))}
    tasks = [t for t in args.tasks.split(",") if t]
    res = {"command": "python -m scripts.bench.knee " + " ".join(argv if argv is not None else sys.argv[1:]),
           "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rounds": args.rounds,
           "step_seconds": args.step_seconds, "min_step_requests": args.min_step_requests, "factor": args.factor,
           "slo_ms": SLO_MS,
           "placement": f"server pinned to CPU {args.server_cpu}, the load generator "
                        f"({'k6' if k6_binary() else 'scripts/drills/loadgen.py'}) to CPU {args.load_cpu}",
           "tasks": {}}
    previous = None  # the record of the families not measured now, read before --out may overwrite it
    if args.write_config and scaling_targets.KNEE_JSON.exists():
        previous = Path(tempfile.mkdtemp(prefix="triserve-knee-prev-")) / "knee.json"
        previous.write_text(scaling_targets.KNEE_JSON.read_text())
    with tempfile.TemporaryDirectory(prefix="triserve-knee-") as d:
        tmp = Path(d)
        env = dict(RAISED_LIMITS)  # capacity limits off: they are what this measures
        peer = TriservePeer("triserve", env, args.server_cpu, tmp / "triserve.log", tmp / "bentoml_home")
        try:
            print(f"[knee] triserve ready after {peer.wait_ready():.1f}s", file=sys.stderr)
            for task in tasks:
                reqs = task_requests(task, peer.url)
                open_loop(f"{task}_warm", reqs, int(args.start_rate[task]), 3, tmp, args.load_cpu)
                rounds = [ramp(task, reqs, args, tmp) for _ in range(args.rounds)]
                knees = [r["knee_rps"] or 0 for r in rounds]
                knee = int(statistics.median(knees))
                res["tasks"][task] = {"slo_ms": SLO_MS[task], "knees": knees, "knee_rps": knee,
                                      "limit_rps": int(LIMIT_SHARE * knee), "rounds": rounds}
            res["stall_signals"] = stall_signals(peer.url)
        finally:
            peer.stop()
            res["server_log"] = keep_log(tmp / "triserve.log", args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    res["plot"] = plot(res, args.out)
    write_report(args.out, res, to_markdown(res))
    # the requests carry no deployment: each family's default deployment is what was measured
    repo = load_repository()
    limits = {dep.name: r["limit_rps"] for t, r in res["tasks"].items()
              if r["limit_rps"] > 0 and (dep := repo.default_for(t)) is not None}
    if args.write_config and limits:
        write_limits(limits)
        print(f"wrote access.deployment_rate_per_s = {limits} into {CONFIG}")
        defaults = {f: dep.name for f in SLO_MS if (dep := repo.default_for(f)) is not None}
        targets = write_targets(res, defaults, previous or Path("/nonexistent"))
        print(f"wrote the autoscaling targets {targets} (scripts/bench/scaling_targets.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
