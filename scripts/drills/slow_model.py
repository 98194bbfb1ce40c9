"""Drill: a slow text primary (fault injection: +800 ms per batch) against 300/1000/3000 ms deadlines.

    python -m scripts.drills.slow_model [--registry models/store] [--latency-ms 800] [--rounds 5]

Sends /v1/classify with X-Request-Timeout-Ms 300, 1000 and 3000 and model=primary or auto:
  phase 'sequential' - one request at a time (rounds x deadlines x models), so each sees an idle runner;
  phase 'burst'      - --burst concurrent requests per (deadline, model), so queueing and batching show.
For every request: status and error code, latency against its deadline, degraded reason. After each step the text
breaker's state is read from /admin/protection (with a throw-away admin key configured for this server only).
A deadline holds when the answer (of any status) arrives within deadline + --slack-ms.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import secrets
import time
from collections.abc import Iterator

import aiohttp

from scripts.common import default_deployment
from scripts.drills.common import (
    Row,
    assert_loopback,
    base_parser,
    by_status,
    degraded_reasons,
    lat,
    log_path,
    post,
    save,
)
from scripts.drills.server import Server
from scripts.drills.starts import (
    Attempt,
    StartCheckFailed,
    StartOnce,
    check_answer,
    check_get,
    drill_main,
    serve_once,
)

NAME = "slow_model"
DEADLINES = (300, 1000, 3000)
MODELS = ("primary", "auto")
TEXT = "what is my account balance"
DEPLOYMENT = default_deployment("text")  # the slot made slow: the text family's default


async def breaker(session, url: str, key: str) -> dict | None:
    try:
        async with session.get(url + "/admin/protection", headers={"X-API-Key": key},
                               timeout=aiohttp.ClientTimeout(total=3)) as r:
            if r.status == 200:
                d = await r.json()
                return {"text": (d["breakers"].get(DEPLOYMENT) or {}).get("state", "closed"),
                        "text_queue_ms_per_item": d["queues"].get(DEPLOYMENT, {}).get("ms_per_item")}
            return {"status": r.status}
    except Exception as exc:  # noqa: BLE001  # a failed status probe is recorded, never fatal
        return {"error": type(exc).__name__}


async def drill(url: str, key: str, rounds: int, burst: int, slack_ms: float, latency_ms: int) -> dict:
    assert_loopback(url)
    t0 = time.monotonic()
    records: list[dict] = []
    async with aiohttp.ClientSession() as session:

        async def one(deadline: int, model: str, phase: str) -> Row:
            body = {"texts": [TEXT], "top_k": 1, "model": model}
            row = await post(session, url, "/v1/classify", body, t0,
                             headers={"X-Request-Timeout-Ms": str(deadline)}, timeout=30)
            records.append({"phase": phase, "deadline_ms": deadline, "model_choice": model, "row": row})
            return row

        for rnd in range(rounds):
            for deadline in DEADLINES:
                for model in MODELS:
                    row = await one(deadline, model, "sequential")
                    records[-1]["breaker_after"] = await breaker(session, url, key)
                    records[-1]["round"] = rnd
                    # let an abandoned batch finish so the next request sees an idle runner
                    await asyncio.sleep(max(0.0, latency_ms / 1000 + 0.1 - row.ms / 1000))
        for deadline in DEADLINES:
            for model in MODELS:
                await asyncio.gather(*(one(deadline, model, "burst") for _ in range(burst)))
                state = await breaker(session, url, key)
                for rec in records[-burst:]:
                    rec["breaker_after"] = state
                await asyncio.sleep(latency_ms / 1000 * 2)
    return analyse(records, slack_ms, time.monotonic() - t0)


def analyse(records: list[dict], slack_ms: float, elapsed: float) -> dict:
    groups = []
    for phase in ("sequential", "burst"):
        for deadline in DEADLINES:
            for model in MODELS:
                recs = [r for r in records
                        if (r["phase"], r["deadline_ms"], r["model_choice"]) == (phase, deadline, model)]
                rows = [r["row"] for r in recs]
                if not rows:
                    continue
                over = [round(r.ms - deadline, 1) for r in rows]
                groups.append({
                    "phase": phase, "deadline_ms": deadline, "model": model, "n": len(rows),
                    "status": by_status(rows), "latency_ms": lat(rows),
                    "max_over_deadline_ms": max(over),
                    "deadline_held": sum(1 for o in over if o <= slack_ms),
                    "degraded": degraded_reasons([r for r in rows if r.ok]),
                    "served_by": dict(sorted({(r.model or "-"): sum(1 for x in rows if x.model == r.model)
                                              for r in rows if r.ok}.items())),
                    "breaker_after": sorted({(r.get("breaker_after") or {}).get("text", "?") for r in recs}),
                })
    rows = [r["row"] for r in records]
    violations = [{"phase": r["phase"], "deadline_ms": r["deadline_ms"], "model": r["model_choice"],
                   "status": r["row"].status, "code": r["row"].code, "latency_ms": round(r["row"].ms, 1)}
                  for r in records if r["row"].ms > r["deadline_ms"] + slack_ms]
    sequence = [{"t": round(r["row"].sent, 2), "phase": r["phase"], "deadline_ms": r["deadline_ms"],
                 "model": r["model_choice"], "status": r["row"].status, "code": r["row"].code,
                 "latency_ms": round(r["row"].ms, 1), "degraded_reason": r["row"].reason, "served_by": r["row"].model,
                 "breaker_after": (r.get("breaker_after") or {}).get("text")} for r in records]
    return {"seconds": round(elapsed, 1), "requests": len(rows), "status": by_status(rows),
            "slack_ms": slack_ms, "deadline_violations": violations, "groups": groups, "sequence": sequence}


def summary(res: dict) -> str:
    lines = [f"slow_model: text primary +{res['latency_ms']} ms per batch; {res['requests']} requests in "
             f"{res['seconds']} s; status {res['status']}",
             f"  {'phase':<10} {'deadline':>8} {'model':<7} {'n':>3}  {'p50':>7} {'max':>7} {'max-over':>8}  "
             f"status / degraded / breaker"]
    for g in res["groups"]:
        lines.append(f"  {g['phase']:<10} {g['deadline_ms']:>8} {g['model']:<7} {g['n']:>3}  "
                     f"{g['latency_ms']['p50']:>7} {g['latency_ms']['max']:>7} {g['max_over_deadline_ms']:>8}  "
                     f"{g['status']} {g['degraded'] or ''} breaker={','.join(g['breaker_after'])}")
    v = res["deadline_violations"]
    lines.append(f"  deadline held (answer within deadline + {res['slack_ms']} ms) for "
                 f"{res['requests'] - len(v)}/{res['requests']} requests" + (f"; violations: {v}" if v else ""))
    return "\n".join(lines)


STARTS = (f"one `bentoml serve` with the {DEPLOYMENT} primary slowed down (runner.faults.latency_ms) and a "
          "throw-away admin key")


def server_env(args, key: str) -> dict[str, str]:
    return {"TRISERVE_RUNNER__FAULTS__LATENCY_MS": json.dumps({DEPLOYMENT: args.latency_ms}),
            "TRISERVE_ACCESS__API_KEYS": json.dumps([{"name": "drill-admin", "admin": True,
                                                      "sha256": hashlib.sha256(key.encode()).hexdigest()}])}


@contextlib.contextmanager
def start_phase(args) -> Iterator[StartOnce]:
    """The drill's server, ready; one 'primary' text request within the drill's longest deadline (slowed down by the
    injected latency, answered by the primary) and the breaker's state through the admin key."""
    def once(attempt: Attempt) -> None:
        key = secrets.token_hex(16)

        def check(srv: Server) -> list[str]:
            started = time.monotonic()
            seen = check_answer(srv.url, "/v1/classify", {"texts": [TEXT], "top_k": 1, "model": "primary"},
                                headers={"X-Request-Timeout-Ms": str(max(DEADLINES))})
            took_ms = (time.monotonic() - started) * 1000
            if took_ms < args.latency_ms:
                raise StartCheckFailed(f"answered in {took_ms:.0f} ms: the injected {args.latency_ms} ms are missing")
            state = check_get(srv.url, "/admin/protection", headers={"X-API-Key": key}).json()
            text_breaker = (state["breakers"].get(DEPLOYMENT) or {}).get("state", "closed")
            return [f"{seen} in {took_ms:.0f} ms", f"GET /admin/protection -> 200 (breaker {text_breaker})"]

        serve_once(attempt, args.registry, server_env(args, key), "serve", check)

    yield once


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = base_parser(__doc__, NAME)
    ap.add_argument("--latency-ms", type=int, default=800, help="injected extra latency of the text primary")
    ap.add_argument("--rounds", type=int, default=5, help="sequential rounds over deadlines x models")
    ap.add_argument("--burst", type=int, default=8, help="concurrent requests per (deadline, model) in the burst phase")
    ap.add_argument("--slack-ms", type=float, default=100, help="overhead allowed past the deadline")
    return ap.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.starts:
        drill_main(NAME, args, start_phase)
        return
    key = secrets.token_hex(16)
    env = server_env(args, key)
    print(f"server env knobs: TRISERVE_RUNNER__FAULTS__LATENCY_MS={env['TRISERVE_RUNNER__FAULTS__LATENCY_MS']} "
          f"(+ a throw-away admin key for /admin/protection)", flush=True)
    log = log_path(args, NAME)
    with Server(args.registry, env=env, log_path=log) as srv:
        ready_s = srv.wait_ready()
        res = asyncio.run(drill(srv.url, key, min(args.rounds, 20), min(args.burst, 64), args.slack_ms,
                                args.latency_ms))
    res = {"drill": NAME, "registry": str(args.registry), "server_ready_s": round(ready_s, 1), "server_log": str(log),
           "latency_ms": args.latency_ms, **res}
    print(summary(res))
    save(res, args.out)


if __name__ == "__main__":
    main()
