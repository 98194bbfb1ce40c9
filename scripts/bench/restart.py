"""Restart with the models cached: seconds to /readyz 200, and a SIGKILLed runner's time until its primaries answer.

    python -m scripts.bench.restart [--runs 3] [--load 4] [--out docs/bench/restart]

Per run: `bentoml serve triserve.services.gateway:Gateway` with the default deployments (configs/models.yaml) over
models/store
(already on disk: nothing to pull), timed from the spawn until /readyz answers 200. Then, under a bounded closed-loop
mixed load (--load concurrent 'auto' requests), every runner worker is SIGKILLed (3 s + a seeded 0-10 s after ready,
the same in each round) and each default deployment is probed with 'primary' requests (one in flight per deployment,
every --probe-interval s): the time from the kill until a primary answer (200, not degraded), per deployment and for
all of them, when the new runner process was made, and until /readyz is 200 again. /v1/models says where the runner's
start went (runner_startup; per slot: verify + session + warm-up seconds). --base: another tree's runs interleaved.
Reported: medians [min-max] over --runs, against the goal (ready <= 10 s). Writes <out>.json and <out>.md.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx
import numpy as np
import psutil

from scripts.bench.load_mix import TEXTS, _image, payloads
from scripts.bench.report import write_report
from scripts.drills.common import says_degraded
from scripts.drills.server import ROOT, Server

GOAL_READY_S = 10.0


def primary_bodies() -> dict[str, tuple[str, dict]]:
    """One 'primary' request per default deployment (each family's default: configs/models.yaml)."""
    img = {"images": [{"data": _image(3)}], "model": "primary"}
    values = (340 + 3 * np.sin(np.arange(60) * np.pi / 6)).round(3).tolist()
    return {"coco": ("/v1/detect", img), "people": ("/v1/pose", img), "plates": ("/v1/segment", img),
            "imagenet": ("/v1/classify-image", img),
            "intent": ("/v1/classify", {"texts": TEXTS[:2], "top_k": 3, "model": "primary"}),
            "series": ("/v1/forecast", {"values": values, "start": "1990-01-01T00:00:00", "frequency": "MS",
                                        "horizon": 12, "model": "primary"})}


def runner_start(url: str) -> dict:
    """Where the serving runner's start went (/v1/models: runner_startup, and per slot its load seconds: verify +
    session + warm-up); empty from a server without them."""
    try:
        body = httpx.get(url + "/v1/models", timeout=10).json()
    except (httpx.HTTPError, ValueError):
        return {}
    return {"phases": body.get("runner_startup"),
            "slot_load_s": {slot: m.get("load_seconds") for slot, m in sorted(body.get("models", {}).items())}}


async def _post(session: aiohttp.ClientSession, url: str, body: dict) -> tuple[int | str, bytes]:
    try:
        async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=30)) as r:
            return r.status, await r.read()
    except Exception as exc:  # noqa: BLE001 - a failed request is a probe result
        return type(exc).__name__, b""


async def kill_and_probe(srv: Server, load: int, max_s: float, interval: float, kill_after: float = 3.0) -> dict:
    """SIGKILL the runner under load; seconds until each deployment's primary answers again and /readyz is 200."""
    bodies, mix = primary_bodies(), payloads()
    back: dict[str, float] = {}
    out: dict = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=load + len(bodies) + 2)) as session:
        stop = asyncio.Event()
        counter = itertools.count()

        async def loader() -> None:
            for i in counter:
                if stop.is_set() or i > 20_000:
                    return
                path, body = mix[i % len(mix)]
                await _post(session, srv.url + path, body)

        loaders = [asyncio.create_task(loader()) for _ in range(load)]
        await asyncio.sleep(kill_after)  # the load is running when the kill comes
        out["kill_after_ready_s"] = round(kill_after, 2)
        pids = srv.runner_pids()
        t0, wall0 = time.monotonic(), time.time()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        out["killed_pids"] = pids

        async def respawn() -> None:
            """When the arbiter started the new runner process (its create time, after the kill)."""
            while time.monotonic() - t0 < max_s:
                new = [p for p in srv.runner_pids() if p not in pids]
                if new:
                    try:
                        out["respawned_s"] = round(psutil.Process(new[0]).create_time() - wall0, 2)
                    except psutil.Error:
                        pass
                    return
                await asyncio.sleep(0.1)

        async def probe(name: str, path: str, body: dict) -> None:
            while time.monotonic() - t0 < max_s:
                sent = time.monotonic()
                status, answer = await _post(session, srv.url + path, body)
                if status == 200 and not says_degraded(answer):  # answered by the primary (a retry may have waited)
                    back[name] = round(time.monotonic() - t0, 2)
                    return
                await asyncio.sleep(max(0.0, interval - (time.monotonic() - sent)))

        async def readyz() -> None:
            await asyncio.sleep(0.5)  # the gateway notices the dead runner first
            while time.monotonic() - t0 < max_s:
                try:
                    async with session.get(srv.url + "/readyz", timeout=aiohttp.ClientTimeout(total=2)) as r:
                        if r.status == 200:
                            out["readyz_200_again_s"] = round(time.monotonic() - t0, 2)
                            return
                except Exception:  # noqa: BLE001 - not ready yet
                    pass
                await asyncio.sleep(interval)

        await asyncio.gather(respawn(), readyz(), *(probe(n, p, b) for n, (p, b) in bodies.items()))
        stop.set()
        await asyncio.gather(*loaders)
    out["primary_back_s"] = back
    out["all_primaries_back_s"] = max(back.values()) if len(back) == len(bodies) else None
    return out


def one_run(tmp: Path, i: int, load: int, max_s: float, interval: float, root: Path = ROOT,
            env: dict[str, str] | None = None, kill_after: float = 3.0) -> dict:
    srv = Server(root / "models" / "store", env=env, log_path=tmp / f"run{i}-{root.name}.log", root=root)
    try:
        ready = srv.wait_ready(timeout=180)
        res: dict = {"tree": str(root), "ready_s": round(ready, 2), "start": runner_start(srv.url)}
        res.update(asyncio.run(kill_and_probe(srv, load, max_s, interval, kill_after)))
        time.sleep(1.0)
        res["restart"] = runner_start(srv.url)
        phases = res["restart"].get("phases") or {}
        if "respawned_s" in res and phases:  # the new runner's own ready time, after the kill
            res["runner_ready_s"] = round(res["respawned_s"] + sum(phases.values()), 2)
        return res
    finally:
        srv.stop()


def _stat(xs: list[float]) -> dict:
    return {"median_s": round(statistics.median(xs), 2), "min_s": min(xs), "max_s": max(xs)} if xs else {}


def summarise(runs: list[dict]) -> dict:
    backs = [r["all_primaries_back_s"] for r in runs if r["all_primaries_back_s"] is not None]
    out = {"ready": _stat([r["ready_s"] for r in runs]), "all_primaries_back_after_kill": _stat(backs),
           "readyz_200_after_kill": _stat([r["readyz_200_again_s"] for r in runs if "readyz_200_again_s" in r])}
    out["ready"]["met"] = out["ready"]["median_s"] <= GOAL_READY_S
    return out


def _cell(s: dict) -> str:
    return f"{s['median_s']} [{s['min_s']}-{s['max_s']}]" if s else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.restart", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--load", type=int, default=4, help="concurrent 'auto' requests during the kill")
    ap.add_argument("--max-seconds", type=float, default=90.0, help="give up on a primary after this long")
    ap.add_argument("--probe-interval", type=float, default=0.25)
    ap.add_argument("--base", type=Path, default=None,
                    help="another source tree (e.g. `git archive <base> | tar -x -C DIR`, with models/store) whose "
                         "runs interleave with this tree's: before and after under the same host noise")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "restart")
    ap.add_argument("--logs", type=Path, default=None, help="keep the servers' logs here (default: a temp dir)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill times")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="server setting for every run, e.g. TRISERVE_RUNNER__FALLBACKS=gateway (repeatable)")
    args = ap.parse_args(argv)
    env = dict(e.split("=", 1) for e in args.env)
    # the kill comes 3 s + a seeded draw in [0, 10) s after ready, the same draw for every tree of a round: a
    # restart that waits for a periodic check (BentoML's arbiter: 10 s) is seen at every phase, not at one
    rng = random.Random(args.seed)
    trees = ([args.base.resolve()] if args.base else []) + [ROOT]
    runs: dict[str, list[dict]] = {str(t): [] for t in trees}
    with tempfile.TemporaryDirectory(prefix="triserve-restart-") as d:
        for i in range(args.runs):
            kill_after = 3.0 + rng.uniform(0.0, 10.0)
            for tree in trees:
                r = one_run(args.logs or Path(d), i, args.load, args.max_seconds, args.probe_interval, tree, env,
                            kill_after)
                runs[str(tree)].append(r)
                print(f"[restart] run {i + 1} {tree}: ready {r['ready_s']} s, primaries back "
                      f"{r['all_primaries_back_s']} s after the kill ({r['primary_back_s']}), /readyz "
                      f"{r.get('readyz_200_again_s')} s", file=sys.stderr)
    summary = {tree: summarise(rs) for tree, rs in runs.items()}
    res = {"command": "python -m scripts.bench.restart " + " ".join(argv if argv is not None else sys.argv[1:]),
           "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
           "load": args.load, "env": env, "goal_ready_s": GOAL_READY_S, "summary": summary, "runs": runs}
    L = [f"# Restart with the models cached ({res['started_utc']})", "", f"Command: `{res['command']}`", "",
         f"Default deployments over models/store{', ' + str(env) if env else ''}, not pinned ({res['cpus']} cores), "
         "run alone; the kill 3-13 s after ready (seeded, the same in each round) under "
         f"{args.load} concurrent mixed 'auto' requests. Seconds, medians [min-max] of {args.runs} runs"
         + (", the trees' runs interleaved." if args.base else "."), "",
         f"| tree | spawn -> /readyz 200 (goal <= {GOAL_READY_S:g} s) | runner SIGKILL -> every default "
         "deployment's primary answers | runner SIGKILL -> /readyz 200 |", "|---|---|---|---|"]
    for tree, s in summary.items():
        L.append(f"| {Path(tree).name} | {_cell(s['ready'])} | {_cell(s['all_primaries_back_after_kill'])} | "
                 f"{_cell(s['readyz_200_after_kill'])} |")
    L += ["", "Where the runner's start went (first run; process_to_init_s: process start, imports and BentoML's "
          "worker setup; load_s: verify + sessions + warm-up of every slot until ready):", ""]
    for tree, rs in runs.items():
        for key, label in (("start", "at the start"), ("restart", "after the kill")):
            phases = rs[0].get(key, {}).get("phases")
            slots = rs[0].get(key, {}).get("slot_load_s", {})
            L.append(f"- {Path(tree).name}, {label}: {phases or 'not reported'}; per slot: "
                     + ", ".join(f"{k} {v}" for k, v in slots.items()))
        after = [(r.get("respawned_s"), r.get("runner_ready_s"), r.get("readyz_200_again_s")) for r in rs]
        L.append(f"- {Path(tree).name}, after the kill (respawned, runner ready, /readyz 200) per run: {after}")
    write_report(args.out, res, "\n".join(L))
    return 0


if __name__ == "__main__":
    sys.exit(main())
