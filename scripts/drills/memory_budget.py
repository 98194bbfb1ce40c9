"""Drill: more deployments than the runner's memory budget holds (issue 20).

    python -m scripts.drills.memory_budget            # -> docs/drills/memory_budget.json

Phase 1 measures the real models (models/store) with a generous budget: every deployment loaded, footprints read
from /v1/models. Phase 2 restarts with a budget smaller than the sum of the configured deployments:
  intent        always, its batch capped by memory below its configured 64 (the rest is kept for on-demand loads)
  coco, coco-b  on demand, the same detector twice: the budget holds one of them at its full batch
  series        on demand, the global forecaster (small)
and then checks, through REST on a real `bentoml serve`:
  1. ready without the on-demand deployments; their first requests wait for the load and are answered;
  2. coco and coco-b alternating: each load evicts the other (least recently used), every request answered;
  3. a deployment that cannot fit (a second copy of the text model, added through the admin API) is refused at
     load with the numbers, and everything else keeps serving;
  4. a flood of long texts (several clients, 8-16 texts of ~2,000 characters each) on intent under its memory cap,
     plus requests above the cap (413 exceeds_memory_cap), with coco/coco-b/series requests mixed in;
  5. no 5xx except clean refusals (503 overloaded / model_loading with Retry-After: admission shedding the flood),
     zero transport errors, every request answered, the runner process never restarted.
Bounded: every load loop has a request count and a time limit; traffic goes to 127.0.0.1 only.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import io
import json
import random
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import httpx
import psutil
import yaml

from scripts.drills.common import Row, base_parser, by_status, lat, log_path, post, save, transport_errors
from scripts.drills.server import Server
from scripts.drills.starts import Attempt, StartCheckFailed, StartOnce, check_answer, drill_main, serve_once

NAME = "memory_budget"
MB = 2 ** 20
COCO = {"model": {"name": "yolov8n-coco", "batching": {"max_batch_size": 16}},
        "fallback": {"name": "yolov8n-coco-int8", "batching": {"max_batch_size": 16}}}
INTENT = {"name": "intent", "family": "text", "model": {"name": "minilm-intent", "batching": {"max_batch_size": 64}},
          "fallback": {"name": "minilm-intent-int8", "batching": {"max_batch_size": 64, "per_item": True}}}
SERIES = {"name": "series", "family": "forecast", "residency": "on_demand",
          "model": {"name": "forecast-global", "batching": {"max_batch_size": 256}},
          "fallback": {"name": "forecast-theta", "batching": {"max_batch_size": 64}}}
INTENT_CAP_TARGET = 16
WORDS = ("transfer", "balance", "flight", "paris", "timer", "weather", "reservation", "account", "card", "music")


def _repository(coco_mb: float | None) -> dict:
    extra = {"memory_mb": round(coco_mb, 1)} if coco_mb else {}
    return {"defaults": {"text": "intent", "detection": "coco", "forecast": "series"},
            "deployments": [INTENT,
                            {"name": "coco", "family": "detection", "residency": "on_demand", **COCO, **extra},
                            {"name": "coco-b", "family": "detection", "residency": "on_demand", **COCO, **extra},
                            SERIES]}


def _env(work: Path, repo: dict, key: str, budget_mb: float | None) -> dict:
    models = work / f"models-{secrets.token_hex(3)}.yaml"
    models.write_text(yaml.safe_dump(repo))
    env = {"TRISERVE_MODELS_FILE": str(models), "TRISERVE_ACCESS__CAPACITY_LIMITS": "false",
           "TRISERVE_ACCESS__RATE_PER_S": "100000", "TRISERVE_ACCESS__BURST": "100000",
           "TRISERVE_ROLLOUT__REFRESH_S": "0.2",
           "TRISERVE_ACCESS__API_KEYS": json.dumps([{"name": "drill-admin", "admin": True,
                                                     "sha256": hashlib.sha256(key.encode()).hexdigest()}])}
    if budget_mb:
        env["TRISERVE_RUNNER__MEMORY__BUDGET_MB"] = f"{budget_mb:.1f}"
    return env


def _image_b64() -> str:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (640, 480), (90, 120, 150))
    ImageDraw.Draw(img).rectangle([200, 120, 420, 400], fill=(200, 40, 40))
    buf = io.BytesIO()
    img.save(buf, format="JPEG")
    return base64.b64encode(buf.getvalue()).decode()


def _long_text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(300))[:2000]


def _models(url: str) -> dict:
    return httpx.get(f"{url}/v1/models", timeout=60).json()


def _memory(url: str) -> dict[str, dict]:
    """slot -> {state, resident_mb, per_item_mb, batch_cap} of every deployment's slots."""
    out = {}
    for dep in _models(url)["deployments"]:
        for role in ("model", "fallback"):
            slot = dep.get(role)
            if slot:
                out[slot["slot"]] = {"state": slot["state"], **(slot.get("memory") or {})}
    return out


def _need(m: dict, batch: int) -> float:
    return m["resident_mb"] + m["per_item_mb"] * batch


def _metrics(url: str, prefixes: tuple[str, ...]) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=60).text
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith(prefixes)}


def measure(registry: Path, work: Path, key: str, log: Path) -> dict[str, dict]:
    """Phase 1: every model loaded under a generous budget; their measured footprints."""
    with Server(registry, env=_env(work, _repository(None), key, None), log_path=log) as srv:
        srv.wait_ready(timeout=600)
        for name in ("coco", "series"):
            r = httpx.post(f"{srv.url}/admin/deployments/{name}/load", headers={"X-API-Key": key}, timeout=300)
            r.raise_for_status()
        return _memory(srv.url)


async def _phase(session, url: str, t0: float, label: str, calls: list[tuple[str, dict]], concurrency: int,
                 timeout_ms: int = 60_000) -> list[Row]:
    sem = asyncio.Semaphore(concurrency)

    async def one(path: str, body: dict) -> Row:
        async with sem:
            row = await post(session, url, path, body, t0, headers={"X-Request-Timeout-Ms": str(timeout_ms)},
                             timeout=timeout_ms / 1000 + 10)
            row.slot = row.slot or body.get("deployment")
            return row

    rows = await asyncio.gather(*(one(p, b) for p, b in calls))
    print(f"  {label}: {len(rows)} requests, {by_status(rows)}, latency {lat(rows)}", flush=True)
    return list(rows)


async def run_phase2(url: str, key: str, cap: int, seed: int, flood_requests: int) -> dict:
    rng = random.Random(seed)
    image = {"images": [{"data": _image_b64()}]}
    series = {"values": [100 + 10 * ((i % 24) / 24) + i * 0.05 for i in range(240)], "frequency": "h",
              "start": "2026-01-01T00:00:00", "horizon": 24}
    t0 = time.monotonic()
    out: dict = {"timeline": []}

    def snap(event: str) -> None:
        states = {s: m["state"] for s, m in _memory(url).items()}
        out["timeline"].append({"t": round(time.monotonic() - t0, 2), "event": event, "states": states})

    snap("ready")
    async with aiohttp.ClientSession() as session:
        first: dict[str, list[Row]] = {}
        for name, path, body in (("series", "/v1/forecast", series), ("coco", "/v1/detect", image)):
            first[name] = await _phase(session, url, t0, f"first requests to on-demand {name}",
                                       [(path, {**body, "deployment": name})] * 4, concurrency=4)
            snap(f"after first {name} requests")
        alternating: list[Row] = []
        for i in range(6):
            name = ("coco-b", "coco")[i % 2]
            alternating += await _phase(session, url, t0, f"alternate {i + 1}: {name}",
                                        [("/v1/detect", {**image, "deployment": name})] * 3, concurrency=3)
            snap(f"after alternate {i + 1} ({name})")
        refusal = httpx.put(f"{url}/admin/deployments/intent-copy", headers={"X-API-Key": key}, timeout=600,
                            json={"family": "text", "model": {"name": "minilm-intent",
                                                              "batching": {"max_batch_size": 64}}})
        snap("after refused intent-copy")
        calls: list[tuple[str, dict]] = []
        for _ in range(flood_requests):
            roll = rng.random()
            if roll < 0.08:  # above the memory cap: 413
                calls.append(("/v1/classify", {"texts": [_long_text(rng) for _ in range(cap + 4)]}))
            elif roll < 0.16:  # the detector resident now (coco and coco-b alternating is phase 2's subject)
                calls.append(("/v1/detect", {**image, "deployment": "coco"}))
            elif roll < 0.22:
                calls.append(("/v1/forecast", {**series, "deployment": "series"}))
            else:
                texts = rng.randint(min(8, cap), cap)
                calls.append(("/v1/classify", {"texts": [_long_text(rng) for _ in range(texts)]}))
        flood = await _phase(session, url, t0, "long-text flood + mixed on-demand traffic", calls, concurrency=8)
        snap("after flood")
    out.update({"first": first, "alternating": alternating, "flood": flood,
                "refusal": {"status": refusal.status_code, "body": refusal.json()}})
    return out


def analyse(phase1: dict, phase2: dict, budget_mb: float, memory_ready: dict, memory_end: dict, metrics: dict,
            runner_pids: tuple[list[int], list[int]], rss: dict, cap: int) -> dict:
    all_rows: list[Row] = [r for rows in phase2["first"].values() for r in rows] + phase2["alternating"] + \
        phase2["flood"]
    refusals = ("overloaded", "model_loading")  # clean, fast 503s with Retry-After: shed, not lost
    server_errors = [r for r in all_rows if isinstance(r.status, int) and r.status >= 500
                     and not (r.status == 503 and r.code in refusals)]
    flood_413 = [r for r in phase2["flood"] if r.status == 413]
    evictions = {k: v for k, v in metrics.items() if k.startswith("triserve_model_evictions_total")}
    loads = {k: v for k, v in metrics.items() if k.startswith("triserve_model_loads_total")}
    splits = {k: v for k, v in metrics.items() if k.startswith("triserve_runner_memory_splits_total")}
    timeline_coco = [(e["states"].get("coco"), e["states"].get("coco-b")) for e in phase2["timeline"]
                     if e["event"].startswith("after alternate")]
    refusal_msg = json.dumps(phase2["refusal"]["body"])
    sum_full = sum(_need(m, {"coco": 16, "coco_fallback": 16, "coco-b": 16, "coco-b_fallback": 16, "series": 256,
                             "series_fallback": 64, "intent": 64, "intent_fallback": 1}[s])
                   for s, m in _configured(phase1).items())
    checks = {
        "budget_below_sum_of_deployments": budget_mb < sum_full,
        "ready_with_on_demand_unloaded": all(memory_ready[s]["state"] == "unloaded" for s in
                                             ("coco", "coco-b", "series")),
        "first_requests_answered": all(r.status == 200 for rows in phase2["first"].values() for r in rows),
        "alternating_evicts_the_other": all(pair in (("resident", "unloaded"), ("unloaded", "resident"))
                                            for pair in timeline_coco),
        "alternating_all_answered": all(r.status == 200 for r in phase2["alternating"]),
        "evictions_counted": sum(evictions.values()) >= 4,
        "refused_with_numbers": phase2["refusal"]["status"] == 409 and "MemoryRefused" in refusal_msg
        and "MB" in refusal_msg,
        "intent_capped_by_memory": memory_ready["intent"].get("batch_cap", 64) < 64,
        "oversize_requests_413": bool(flood_413) and all(r.code == "exceeds_memory_cap" for r in flood_413),
        "zero_5xx_except_clean_503_refusals": not server_errors,
        "zero_transport_errors": not transport_errors(all_rows),
        "runner_never_restarted": runner_pids[0] == runner_pids[1] and bool(runner_pids[0]),
    }
    return {
        "budget_mb": round(budget_mb, 1), "sum_of_deployments_at_max_batch_mb": round(sum_full, 1),
        "phase1_footprints": phase1, "phase2_memory_at_ready": memory_ready, "phase2_memory_at_end": memory_end,
        "intent_batch_cap": memory_ready["intent"].get("batch_cap"), "intent_cap_target": cap,
        "first_request_latency_ms": {k: lat(v) for k, v in phase2["first"].items()},
        "alternating": {"statuses": by_status(phase2["alternating"]), "latency": lat(phase2["alternating"]),
                        "states": timeline_coco},
        "refusal": phase2["refusal"],
        "flood": {"requests": len(phase2["flood"]), "statuses": by_status(phase2["flood"]),
                  "text_latency": lat([r for r in phase2["flood"] if r.path == "/v1/classify" and r.status == 200]),
                  "detect_latency": lat([r for r in phase2["flood"] if r.path == "/v1/detect"]),
                  "forecast_latency": lat([r for r in phase2["flood"] if r.path == "/v1/forecast"])},
        "metrics": {"loads": loads, "evictions": evictions, "memory_splits": splits},
        "runner_rss_mb": rss, "runner_pids": {"start": runner_pids[0], "end": runner_pids[1]},
        "transport_errors": transport_errors(all_rows), "server_errors": by_status(server_errors),
        "timeline": phase2["timeline"], "checks": checks, "passed": all(checks.values()),
    }


def _configured(phase1: dict) -> dict:
    """Phase-1 footprints per phase-2 slot (coco-b is coco's twin)."""
    out = dict(phase1)
    out["coco-b"], out["coco-b_fallback"] = phase1["coco"], phase1["coco_fallback"]
    return out


def phase2_budget(phase1: dict[str, dict]) -> tuple[float, float, float]:
    """(the runner's budget, coco's memory_mb, coco at its full batch) for phase 2, from phase 1's footprints."""
    intent, intent_fb = phase1["intent"], phase1["intent_fallback"]
    coco_full = _need(phase1["coco"], 16) + _need(phase1["coco_fallback"], 16)
    room = 1.05 * coco_full  # one coco deployment at its full batch, not two; then no room for a second text model
    coco_mb = room  # its own memory_mb, which is also what the runner keeps free for on-demand loads at startup
    budget = _need(intent, 1) + _need(intent_fb, 1) + intent["per_item_mb"] * (INTENT_CAP_TARGET - 1) + room
    return budget, coco_mb, coco_full


STARTS = ("two `bentoml serve`, one after the other: phase 1 (every deployment, a generous budget; coco and series "
          "loaded through the admin API for their footprints), then phase 2 (a budget below the sum, from them)")


@contextlib.contextmanager
def start_phase(args) -> Iterator[StartOnce]:
    """Each start: phase 1's server measured as the drill does (ready, two loads through the admin API), then phase
    2's server with the budget computed from it, ready without its on-demand deployments; one text request."""
    work = Path(tempfile.mkdtemp(prefix="triserve-drill-memory-"))
    try:
        def once(attempt: Attempt) -> None:
            key = secrets.token_hex(16)
            started = time.monotonic()
            phase1 = measure(args.registry, work, key, attempt.log("phase1"))
            attempt.ready_s["phase1_ready_and_loaded"] = time.monotonic() - started
            budget, coco_mb, _ = phase2_budget(phase1)

            def check(srv: Server) -> list[str]:
                states = {s: m["state"] for s, m in _memory(srv.url).items()}
                loaded = [s for s in ("coco", "coco-b", "series") if states.get(s) != "unloaded"]
                if loaded:
                    raise StartCheckFailed(f"phase 2 ready with on-demand deployments loaded: {states}")
                return [f"phase 1: {len(phase1)} slots measured; phase 2: budget {budget:.0f} MB, on-demand "
                        f"deployments unloaded at ready",
                        check_answer(srv.url, "/v1/classify", {"texts": ["what is my account balance"]})]

            serve_once(attempt, args.registry, _env(work, _repository(coco_mb), key, budget), "phase2", check,
                       ready_timeout=600)

        yield once
    finally:
        shutil.rmtree(work, ignore_errors=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = base_parser(__doc__, NAME)
    ap.add_argument("--flood-requests", type=int, default=240, help="requests in the flood phase (bounded: <= 2000)")
    ap.add_argument("--seed", type=int, default=7)
    return ap.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.starts:
        drill_main(NAME, args, start_phase)
        return
    key = secrets.token_hex(16)
    work = Path(tempfile.mkdtemp(prefix="triserve-drill-memory-"))
    log = log_path(args, NAME)
    started = time.monotonic()
    print("phase 1: measuring every model under a generous budget", flush=True)
    phase1 = measure(args.registry, work, key, log.with_name("phase1.log"))
    for slot, m in phase1.items():
        print(f"  {slot}: {m}", flush=True)
    budget, coco_mb, coco_full = phase2_budget(phase1)
    print(f"phase 2: budget {budget:.1f} MB (coco at full batch {coco_full:.1f} MB, room {coco_mb:.1f} MB)", flush=True)
    with Server(args.registry, env=_env(work, _repository(coco_mb), key, budget), log_path=log) as srv:
        ready_s = srv.wait_ready(timeout=600)
        pids_start = srv.runner_pids()
        memory_ready = _memory(srv.url)
        cap = int(memory_ready["intent"].get("batch_cap") or INTENT_CAP_TARGET)
        rss_start = sum(psutil.Process(p).memory_info().rss / MB for p in pids_start)
        phase2 = asyncio.run(run_phase2(srv.url, key, cap, args.seed, min(args.flood_requests, 2000)))
        rss_end = sum(psutil.Process(p).memory_info().rss / MB for p in srv.runner_pids())
        memory_end = _memory(srv.url)
        metrics = _metrics(srv.url, ("triserve_model_loads_total", "triserve_model_evictions_total",
                                     "triserve_runner_memory_splits_total"))
        pids_end = srv.runner_pids()
    res = {"drill": NAME, "registry": str(args.registry), "server_ready_s": round(ready_s, 1), "server_log": str(log),
           "seconds": round(time.monotonic() - started, 1),
           **analyse(phase1, phase2, budget, memory_ready, memory_end, metrics, (pids_start, pids_end),
                     {"at_ready": round(rss_start, 1), "at_end": round(rss_end, 1)}, cap)}
    for name, ok in res["checks"].items():
        print(f"  {'PASS' if ok else 'FAIL'} {name}")
    print(f"passed: {res['passed']}")
    save(res, args.out)


if __name__ == "__main__":
    main()
