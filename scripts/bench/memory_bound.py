"""The runner's memory against what its models need (issue 40 part 8): RSS next to the sum of the models' resident
memory and the largest single batch's working set, with the default deployments plus two more detectors.

    python -m scripts.bench.memory_bound --out docs/bench/memory_bound

One server on models/store (the six default deployments of configs/models.yaml and two more detection deployments
on the COCO detector's primary and INT8 fallback: eight deployments, fourteen slots), wrk on CPU 1. The
runner's RSS is read when it is ready (every slot loaded and warmed) and again after each deployment was
driven at its gateway batch cap (every primary at its largest calls, so each arena has grown to the working set it
will keep). Per slot, the runner's own measurements (runners/memory.py, shown in /v1/models): resident (RSS a
loaded session adds), per-item working memory and the batch it computes. The goal: runner RSS <= 1.5 x (sum of
resident + the largest single batch's working set). The report says which slot holds what.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import yaml

from scripts.bench import cpu_split
from scripts.bench.wrk import closed_loop
from scripts.drills.common import ROOT
from scripts.drills.server import Server

EXTRA = {"coco-b": "yolov8n-coco", "coco-c": "yolov8n-coco-int8"}  # two more detectors, their own sessions
GOAL = 1.5


def models_file(path: Path) -> Path:
    """configs/models.yaml plus the EXTRA detection deployments (no fallback: one session each)."""
    repo = yaml.safe_load((ROOT / "configs" / "models.yaml").read_text())
    coco = next(d for d in repo["deployments"] if d["name"] == "coco")
    for name, model in EXTRA.items():
        extra = copy.deepcopy(coco)
        extra.update(name=name, description=f"a second detector session ({model}) for the memory measurement")
        extra["model"] = {**coco["model"], "name": model}
        extra.pop("fallback", None)
        repo["deployments"].append(extra)
    path.write_text(yaml.safe_dump(repo, sort_keys=False))
    return path


def runner_rss_mb(server: Server) -> float:
    return sum(psutil.Process(pid).memory_info().rss for pid in server.runner_pids()) / 2**20


def slot_memory(models: dict) -> dict[str, dict]:
    """slot -> {resident_mb, per_item_mb, batch_cap, model} from the runner's "models" table in /v1/models."""
    found: dict[str, dict] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            table = node.get("models")
            if isinstance(table, dict) and all(isinstance(v, dict) and "loaded_versions" in v for v in table.values()):
                found.update({slot: {**v["memory"], "model": v["name"]} for slot, v in table.items()
                              if isinstance(v.get("memory"), dict)})
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(models)
    return found


def requests_for(url: str, repo: dict) -> dict[str, tuple[list[tuple[str, bytes]], int]]:
    """deployment -> (its wrk requests, concurrency = its gateway batch cap) for the families with a body here."""
    out = {}
    for dep in repo["deployments"]:
        family = {"detection": "detect", "text": "text"}.get(dep["family"])
        if family is None:
            continue
        path, body = cpu_split.request(family)
        body = {**body, "deployment": dep["name"]}
        out[dep["name"]] = ([(url + path, json.dumps(body).encode())],
                            int(dep["model"].get("batching", {}).get("max_batch_size", 16)))
    return out


def measure(seconds: float) -> dict:
    """One fresh server: runner RSS when ready and after every deployment ran at its batch cap, and the slots."""
    with tempfile.TemporaryDirectory(prefix="triserve-mem-") as tmp:
        file = models_file(Path(tmp) / "models.yaml")
        repo = yaml.safe_load(file.read_text())
        with Server(ROOT / "models" / "store", env={"TRISERVE_MODELS_FILE": str(file)},
                    log_path=Path(tmp) / "serve.log") as server:
            server.wait_ready(timeout=900)
            ready_rss = runner_rss_mb(server)
            driven = {}
            for name, (reqs, conc) in requests_for(server.url, repo).items():
                loop = closed_loop(reqs, conc, 0, seconds, 10**6, cpu=1)
                driven[name] = {"concurrency": conc, "ok": loop["ok"]}
            time.sleep(1.0)
            loaded_rss = runner_rss_mb(server)
            slots = slot_memory(httpx.get(server.url + "/v1/models", timeout=30).json())
    print(f"[memory] ready {ready_rss:.1f} MB, after load {loaded_rss:.1f} MB", flush=True)
    return {"repo": repo, "slots": slots, "driven": driven, "ready_rss": ready_rss, "loaded_rss": loaded_rss}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.memory_bound", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0, help="load per deployment at its batch cap")
    ap.add_argument("--rounds", type=int, default=3, help="fresh servers, one after the other; medians reported")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    rounds = [measure(args.seconds) for _ in range(args.rounds)]
    repo, slots, driven = rounds[-1]["repo"], rounds[-1]["slots"], rounds[-1]["driven"]
    working = {slot: m["per_item_mb"] * max(m.get("batch_cap") or 1, 1) for slot, m in slots.items()}
    largest_slot = max(working, key=working.__getitem__)
    needs = [sum(m["resident_mb"] for m in r["slots"].values())
             + max(m["per_item_mb"] * max(m.get("batch_cap") or 1, 1) for m in r["slots"].values()) for r in rounds]
    ratios = [r["loaded_rss"] / need for r, need in zip(rounds, needs)]
    resident = statistics.median(sum(m["resident_mb"] for m in r["slots"].values()) for r in rounds)
    need = statistics.median(needs)
    ready_rss = statistics.median(r["ready_rss"] for r in rounds)
    loaded_rss = statistics.median(r["loaded_rss"] for r in rounds)
    res = {"when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "command": "python -m scripts.bench.memory_bound " + " ".join(argv if argv is not None else sys.argv[1:]),
           "deployments": len(repo["deployments"]), "slots": slots, "driven": driven,
           "resident_sum_mb": round(resident, 1), "largest_batch_slot": largest_slot,
           "largest_batch_working_set_mb": round(working[largest_slot], 1), "need_mb": round(need, 1),
           "runner_rss_ready_mb": round(ready_rss, 1), "runner_rss_after_load_mb": round(loaded_rss, 1),
           "ratio_after_load": round(statistics.median(ratios), 3),
           "ratio_per_round": [round(r, 3) for r in ratios], "goal": GOAL}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    lines = [f"# Runner memory against what its models need ({res['when']})", "",
             f"Command: `{res['command']}`", "",
             "| slot | model | resident MB | per item MB | batch | batch working set MB |", "|---|---|---|---|---|---|"]
    for slot, m in sorted(slots.items()):
        lines.append(f"| {slot} | {m['model']} | {m['resident_mb']:.1f} | {m['per_item_mb']:.2f} | "
                     f"{m.get('batch_cap')} | {working[slot]:.1f} |")
    lines += ["", f"- {res['deployments']} deployments, {len(slots)} slots; resident sum {resident:.1f} MB, largest "
              f"batch's working set {working[largest_slot]:.1f} MB ({largest_slot}): need {need:.1f} MB",
              f"- runner RSS ready {ready_rss:.1f} MB, after every deployment at its batch cap {loaded_rss:.1f} MB: "
              f"**{res['ratio_after_load']:.2f}x** the need (goal <= {GOAL}x; medians of {len(rounds)} fresh servers, "
              f"ratio per round {res['ratio_per_round']})",
              f"- load per deployment: {driven}"]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
