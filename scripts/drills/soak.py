"""Drill: a soak. Open-loop mixed traffic through every deployment over REST, typed gRPC, OIP REST and OIP gRPC while
the system is changed and broken under it (issue 42).

    python -m scripts.drills.soak --minutes 3 [--rate 3] [--registry models/store] [--out docs/drills/soak.json]

One `bentoml serve` (scripts/drills/server.py) on a copy of the registry (the source is never touched). Each
deployment gets its own open loop (scripts/drills/soak_traffic.py) at --rate req/s, or 60% of its family's knee
from docs/bench/knee.json, or a conservative default (the report says which); every 8th arrival of the text
deployment is an OIP tensor request pinned to its model's version (answers from another version are counted).
The schedule (scripts/drills/soak_plan.py), spread over the run with a quiet tail: hot add of a deployment (admin
API), canary -> promote -> rollback of the forecast slot, shadow on, runner worker SIGKILL, Redis SIGKILL, shadow off,
Redis started again, gateway API worker SIGKILL, a hot add while the registry answers 3 s late, one while it is
unreachable (must be refused, nothing half added), a corrupt artefact hot-added (must be refused), a burst at 3x, hot
remove. Every 5 s: RSS, fds and threads of each server process and /dev/shm use. Writes <out>.json, .md and .png.

The rate limits are shared through a redis-server the drill starts (access.limits_scope=cluster; the per-client rate
far above the soak's traffic: checked on every request, refusing none), and the server reads its registry over HTTP
(registry_uri) from a server the drill makes slow or unreachable (scripts/drills/soak_faults.py): the code has one
registry setting for startup and hot adds alike, so the startup pull goes through it too (into a model cache in the
work directory), and since an HTTP registry is read-only the promote moves no alias (alias null; the rollback returns
by the runner's promote record).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

from scripts.bench.report import pyplot, write_report
from scripts.drills.common import ROOT, base_parser, by_status, log_path, text_body
from scripts.drills.corrupt_model import corrupt
from scripts.drills.server import Server
from scripts.drills.soak_faults import Mode, RedisServer, RegistryHttp
from scripts.drills.soak_plan import (
    KNEE_FRACTION,
    QUIET_S,
    STEPS,
    Event,
    SoakRow,
    burst_factor,
    knees,
    later_failures,
    leak_check,
    lost,
    minute_table,
    p99_drift,
    rates,
    recoveries,
    rss_growth,
    schedule,
    step_problems,
    window_p99,
    wrong_version,
)
from scripts.drills.soak_traffic import Clients, open_loop
from scripts.drills.starts import Attempt, StartOnce, check_answer, drill_main, serve_once
from triserve.models.registry import LocalRegistry

NAME = "soak"
ADMIN_KEY = "soak-admin"
ADDED = "soak-added"  # the deployment hot-added and later removed
# step -> (the deployment and model it hot-adds, the registry's mode meanwhile)
REGISTRY_ADDS: dict[str, tuple[str, Mode]] = {"registry_slow_add": ("soak-reg-slow", "slow"),
                                              "registry_down_add": ("soak-reg-down", "down")}
SAMPLE_S = 5.0
RATE_PER_S = 100_000  # per client: one load generator is one client address; checked on every request, refuses none


def republish(reg: LocalRegistry, name: str, version: str, new_name: str | None = None) -> Path:
    """The stable artifact of `name` published again as `version` (under `new_name` if given); its stored dir."""
    src, manifest = reg.load_verified(name, "stable")
    with tempfile.TemporaryDirectory(prefix="soak-stage-") as staging:
        shutil.copytree(src, staging, dirs_exist_ok=True)
        reg.publish(Path(staging), manifest.model_copy(update={"version": version, "name": new_name or name}))
    return reg.path(new_name or name, version)


def server_env(extra: dict[str, str], redis: RedisServer | None = None, registry: RegistryHttp | None = None,
               cache: Path | None = None) -> dict[str, str]:
    """The soak's settings; with `redis`, limits shared through it; with `registry`, models read from it over HTTP
    into `cache`."""
    keys = [{"name": "soak-ops", "admin": True, "sha256": hashlib.sha256(ADMIN_KEY.encode()).hexdigest()}]
    env = {"TRISERVE_ACCESS__API_KEYS": json.dumps(keys), "TRISERVE_ROLLOUT__REFRESH_S": "0.5",
           "TRISERVE_ACCESS__RATE_PER_S": str(RATE_PER_S)}
    if redis is not None:
        env |= {"TRISERVE_ACCESS__LIMITS_SCOPE": "cluster", "TRISERVE_ACCESS__REDIS_URL": redis.url}
    if registry is not None and cache is not None:
        env |= {"TRISERVE_REGISTRY_URI": registry.url, "TRISERVE_MODEL_CACHE_DIR": str(cache)}
    return {**env, **extra}


def sample_processes(srv: Server, t: float) -> list[dict]:
    """RSS (MB), open fds and threads of the arbiter and each worker, named '<service> <pid>' (a worker killed by a
    fault and started again by BentoML is another process, another line)."""
    out = []
    named = [("arbiter", [srv.proc.pid])] + sorted(srv.workers().items())
    for service, pids in named:
        for pid in sorted(pids):
            try:
                p = psutil.Process(pid)
                out.append({"t": round(t, 1), "proc": f"{service} {pid}", "pid": pid,
                            "rss_mb": round(p.memory_info().rss / 2**20, 1), "fds": p.num_fds(),
                            "threads": p.num_threads()})
            except psutil.Error:
                continue
    return out


class Soak:
    """One run: the server, its deployments, the schedule's actions, and what was recorded."""

    def __init__(self, srv: Server, reg: LocalRegistry, events: list[Event], seconds: float,
                 redis: RedisServer | None = None, registry: RegistryHttp | None = None):
        self.srv, self.reg, self.events, self.seconds = srv, reg, events, seconds
        self.redis, self.registry = redis, registry
        self.rows: list[SoakRow] = []
        self.procs: list[dict] = []
        self.shm: list[dict] = []
        self.actions: list[dict] = []
        self.removed: set[str] = set()
        self.t0 = time.monotonic()

    def admin(self, method: str, path: str, body: dict | None = None) -> httpx.Response:
        return httpx.request(method, self.srv.url + path, json=body, headers={"X-API-Key": ADMIN_KEY}, timeout=120)

    def repository(self) -> dict[str, dict]:
        return {d["name"]: d for d in self.admin("GET", "/admin/deployments").json()["deployments"]}

    async def act(self, event: Event, ctx: dict) -> None:
        """Run one scheduled step (in a thread: admin calls block) and record what it answered."""
        t = round(time.monotonic() - self.t0, 2)
        try:
            said = await asyncio.to_thread(self._step, event.name, ctx)
        except Exception as exc:  # noqa: BLE001  # a failed step is a finding, not the end of the run
            said = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        self.actions.append({"event": event.name, "t": t, "fault": event.fault, **said})
        print(f"[soak] t={t:7.1f}s {event.name}: {said}", flush=True)

    def _step(self, name: str, ctx: dict) -> dict:
        fc, text = ctx["forecast_slot"], ctx["text"]
        if name == "hot_add":
            r = self.admin("PUT", f"/admin/deployments/{ADDED}", {"family": "text", "model": {"name": text["model"]}})
            if r.status_code == 200:
                ctx["added_active"] = True
            return {"status": r.status_code}
        if name == "hot_remove":
            ctx["added_active"] = False
            time.sleep(1)  # the loop stops arriving first: a removed deployment's 404s are not faults
            return {"status": self.admin("DELETE", f"/admin/deployments/{ADDED}").status_code}
        if name == "canary":
            r = self.admin("POST", f"/admin/models/{fc}/canary", {"ref": ctx["candidate"], "weight": 0.2})
            return {"status": r.status_code, "canary": ctx["candidate"]}
        if name == "promote":  # alias null: a registry read over HTTP cannot move one
            r = self.admin("POST", f"/admin/models/{fc}/promote", {"ref": ctx["candidate"], "alias": None})
            return {"status": r.status_code, "previous": r.json().get("previous") if r.status_code == 200 else r.text}
        if name == "rollback":
            r = self.admin("POST", f"/admin/models/{fc}/rollback")
            return {"status": r.status_code, "body": r.text[:200]}
        if name in ("shadow_on", "shadow_off"):
            r = (self.admin("POST", f"/admin/models/{fc}/shadow", {"ref": ctx["candidate"]}) if name == "shadow_on"
                 else self.admin("DELETE", f"/admin/models/{fc}/shadow"))
            return {"status": r.status_code}
        if name in ("runner_kill", "gateway_kill"):
            pids = self.srv.runner_pids() if name == "runner_kill" else self.srv.entry_pids()[:1]
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            return {"killed": pids}
        if name == "corrupt_add":
            r = self.admin("PUT", "/admin/deployments/soak-corrupt",
                           {"family": "text", "model": {"name": "soak-corrupt", "ref": ctx["corrupt_version"]}})
            body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
            return {"status": r.status_code, "refused": r.status_code >= 400,
                    "code": (body.get("error") or {}).get("code") if isinstance(body, dict) else None}
        if name == "burst":
            return {"factor": burst_factor(self.events, time.monotonic() - self.t0)}
        if name in ("redis_stop", "redis_start"):
            return self._redis(name)
        if name in REGISTRY_ADDS:
            return self._registry_add(name, ctx)
        raise ValueError(f"unknown step {name!r}")

    def _redis(self, name: str) -> dict:
        """SIGKILL the limits' Redis (the API workers fall back to buckets of their own), or start it again on its
        port and time until a bucket check reaches it."""
        assert self.redis is not None
        if name == "redis_stop":
            calls = self.redis.bucket_calls()
            return {"killed": self.redis.kill(), "bucket_checks_before": calls}
        return {"pid": self.redis.start(), "shared_again_s": self.redis.wait_for_calls()}

    def settle(self, timeout: float = 90) -> float | None:
        """Seconds until /readyz answers 200 (None: not within `timeout`). A registry fault starts on a server whose
        workers are up: an API worker restarting (after gateway_kill) reads every model from the registry again, and
        through a slow registry that takes minutes with no answer meanwhile (seen in a run; the report says so)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.srv.url + "/readyz", timeout=2).status_code == 200:
                    return round(time.monotonic() - started, 2)
            time.sleep(0.5)
        return None

    def _registry_add(self, name: str, ctx: dict) -> dict:
        """Hot add a deployment of a model not pulled yet while the registry is slow or down; then the registry
        restored, whether the deployment is listed, and (served) one answer from it before it is removed again."""
        assert self.registry is not None
        dep, mode = REGISTRY_ADDS[name]
        settle_s = self.settle()
        before = self.registry.served[mode]
        self.registry.set(mode)
        started = time.monotonic()
        try:
            r = self.admin("PUT", f"/admin/deployments/{dep}", {"family": "text", "model": {"name": dep,
                                                                                            "ref": ctx["reg_version"]}})
        finally:
            took = round(time.monotonic() - started, 2)
            self.registry.set("ok")
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        error = (body.get("error") or {}) if isinstance(body, dict) else {}
        out = {"status": r.status_code, "code": error.get("code"), "seconds": took, "settle_s": settle_s,
               "registry_requests": self.registry.served[mode] - before, "listed": dep in self.repository()}
        if r.status_code == 200:
            answer = httpx.post(self.srv.url + "/v1/classify", json={"texts": ["hello"], "deployment": dep}, timeout=30)
            removed = self.admin("DELETE", f"/admin/deployments/{dep}")
            out |= {"answer": answer.status_code, "removed": removed.status_code}
        else:
            out["message"] = str(error.get("message", r.text))[:120]
        return out

    async def sampler(self) -> None:
        while (t := time.monotonic() - self.t0) < self.seconds:
            self.procs += await asyncio.to_thread(sample_processes, self.srv, t)
            du = shutil.disk_usage("/dev/shm")
            self.shm.append({"t": round(t, 1), "used_mb": round(du.used / 2**20, 1)})
            await asyncio.sleep(SAMPLE_S)

    async def run(self, deployments: dict[str, str], rate: dict[str, dict], ctx: dict, max_requests: int) -> dict:
        clients = await Clients.open(self.srv.url, self.srv.grpc_target)
        pin = ctx["pinned"]
        self.t0 = time.monotonic()

        def factor(t: float) -> float:
            return burst_factor(self.events, t)

        async def scheduled() -> None:
            for e in sorted(self.events, key=lambda e: e.at_s):
                await asyncio.sleep(max(0.0, e.at_s - (time.monotonic() - self.t0)))
                await self.act(e, ctx)

        try:
            loops = [open_loop(clients, d, fam, rate[d]["rate"], self.seconds, self.t0, factor, self.rows,
                               max_requests, pinned=(lambda: pin) if fam == "text" and d == ctx["text"]["name"]
                               else (lambda: None))
                     for d, fam in deployments.items()]
            added = open_loop(clients, ADDED, "text", rate[ctx["text"]["name"]]["rate"], self.seconds, self.t0,
                              factor, self.rows, max_requests, active=lambda: bool(ctx.get("added_active")))
            results = await asyncio.gather(*loops, added, scheduled(), self.sampler())
        finally:
            await clients.close()
        return {d: r for d, r in zip([*deployments, ADDED], results[:len(deployments) + 1], strict=True)}


def prepare(registry: Path, work: Path) -> LocalRegistry:
    """The registry copied into `work` (the drill publishes into it: a candidate and a corrupt model)."""
    root = work / "registry"
    shutil.copytree(registry, root)
    return LocalRegistry(root)


def build_context(soak: Soak, reg: LocalRegistry) -> tuple[dict[str, str], dict]:
    repo = soak.repository()
    deployments = {n: d["family"] for n, d in repo.items()}
    fam_default = {fam: n for n, fam in reversed(list(deployments.items()))}
    text, fc = repo[fam_default["text"]], repo[fam_default["forecast"]]
    fc_model = fc["model"]["name"]
    candidate = f"{reg.resolve(fc_model, 'stable')}-soak"
    republish(reg, fc_model, candidate)
    reg_version = "0.0.2-soak-reg"
    for dep, _ in REGISTRY_ADDS.values():  # models no process has pulled: their hot add reads the registry
        republish(reg, text["model"]["name"], reg_version, new_name=dep)
    corrupt_version = "0.0.1-soak-corrupt"
    stored = republish(reg, text["model"]["name"], corrupt_version, new_name="soak-corrupt")
    manifest = reg.manifest("soak-corrupt", corrupt_version)
    corrupted = corrupt(stored / manifest.model_file)
    text_model = text["model"]["name"]
    version = reg.resolve(text_model, text["model"].get("ref") or "stable")
    meta = httpx.get(f"{soak.srv.url}/v2/models/{text_model}", timeout=30).json()
    ctx = {"text": {"name": text["name"], "model": text_model}, "forecast_slot": fc["name"], "candidate": candidate,
           "corrupt_version": corrupt_version, "reg_version": reg_version, "corrupted": corrupted,
           "pinned": (text_model, version, meta)}
    return deployments, ctx


def analyse(soak: Soak, loops: dict, rate: dict, elapsed: float) -> dict:
    rows = soak.rows
    sent = sum(v["sent"] for v in loops.values())
    leaks = leak_check(soak.procs, elapsed)
    return {
        "seconds": round(elapsed, 1), "sent": sent, "rows": len(rows), "never_completed": sent - len(rows),
        "lost": sum(lost(r) for r in rows) + sent - len(rows),
        "retried": dict(Counter(r.retried for r in rows if r.retried)),
        "wrong_version": sum(wrong_version(r) for r in rows),
        "pinned_requests": sum(r.pinned is not None for r in rows),
        "pinned_refused": by_status([r for r in rows if r.pinned is not None and r.status != 200]),
        "answered": sum(r.kind != "failed" for r in rows), "degraded": sum(r.kind == "degraded" for r in rows),
        "failed": by_status([r for r in rows if r.kind == "failed"]),
        "by_transport": {t: by_status([r for r in rows if r.transport == t])
                         for t in sorted({r.transport for r in rows})},
        "skipped_by_client_limit": {d: v["skipped"] for d, v in loops.items() if v["skipped"]},
        "rates": rate, "schedule": [e.__dict__ for e in soak.events], "actions": soak.actions,
        "recovery_s": recoveries(rows, soak.events, elapsed),
        "later_failures": recoveries(rows, soak.events, elapsed, measure=later_failures),
        "step_problems": step_problems(soak.actions),
        "p99_ms_after_fault": window_p99(rows, soak.events, elapsed),
        "per_minute": minute_table(rows),
        "leak_check_last_half": leaks, "p99_drift": p99_drift(rows, elapsed),
        "rss_growth_after_settling": rss_growth(soak.procs, elapsed), "dev_shm": soak.shm, "processes": soak.procs,
    }


def plot(res: dict, rows: list[SoakRow], out: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    secs: dict[int, list[SoakRow]] = {}
    for r in rows:
        secs.setdefault(int(r.sent // 5) * 5, []).append(r)
    ts = sorted(secs)
    axes[0].plot(ts, [sum(r.kind != "failed" for r in secs[t]) / 5 for t in ts], label="answered/s")
    axes[0].plot(ts, [sum(r.kind == "failed" for r in secs[t]) / 5 for t in ts], label="failed/s")
    axes[0].set_ylabel("req/s (5 s bins)")
    axes[1].plot(ts, [sorted(r.ms for r in secs[t])[int(0.99 * (len(secs[t]) - 1))] for t in ts], label="p99 all")
    axes[1].set_ylabel("p99 ms")
    axes[1].set_yscale("log")
    for proc in sorted({p["proc"] for p in res["processes"]}):
        pts = [(p["t"], p["rss_mb"]) for p in res["processes"] if p["proc"] == proc]
        axes[2].plot([p[0] for p in pts], [p[1] for p in pts], label=proc)
    axes[2].set_ylabel("RSS MB")
    axes[2].set_xlabel("seconds into the soak")
    for ax in axes:
        for a in res["actions"]:
            ax.axvline(a["t"], color="red" if a["fault"] else "grey", lw=0.8, ls="--")
        ax.legend(fontsize=7, loc="upper left")
    for a in res["actions"]:
        axes[0].annotate(a["event"], (a["t"], axes[0].get_ylim()[1]), rotation=90, fontsize=7, va="top")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out.with_suffix(".png"), dpi=100)
    return True


def markdown(res: dict, out: Path, plotted: bool) -> str:
    L = [f"# Soak: {res['minutes']} minutes under changes and faults ({res['started_utc']})", "",
         f"Command: `{res['command']}`. Registry: {res['registry']}. Issue 42 goals in brackets.", "",
         f"- sent {res['sent']}, answered {res['answered']} (degraded {res['degraded']}), failed "
         f"{sum(res['failed'].values())}: {res['failed']}",
         f"- requests lost (sent, never answered by the server): **{res['lost']}** [0]; sent once more after a "
         f"broken REST connection, as the product's client does: {res.get('retried', {})}",
         f"- answers from the wrong version ({res['pinned_requests']} version-pinned OIP requests): "
         f"**{res['wrong_version']}** [0]; pinned requests refused: {res['pinned_refused']}",
         f"- by transport: {res['by_transport']}",
         f"- arrivals not sent because 64 requests of a deployment were outstanding (the client's own limit): "
         f"{res['skipped_by_client_limit'] or 'none'}",
         f"- fault steps that did not show what they must: {res['step_problems'] or 'none'}", "",
         f"Rate limits shared through Redis ({res['limits']}); the registry read over HTTP from the drill's own server "
         f"({res['registry_http']}).", "", "## Rates", "",
         "| deployment | req/s | from | without --rate |", "|---|---|---|---|"]
    L += [f"| {d} | {v['rate']} | {v['source']} | {res['rates_by_knee'][d]['rate']} "
          f"({res['rates_by_knee'][d]['source']}) |" for d, v in res["rates"].items()]
    L += ["", "## Schedule and recovery [<= 15 s]", "", "recovery s: until the first answer after the run of failures "
          f"the fault opened (it ends where {QUIET_S:g} s of requests in a row fail nothing); later failures: those "
          "sent after that run, before the next fault; p99 ms: of the answers to requests sent from the fault until "
          "the next one.", "", "| t s | step | fault | outcome | recovery s | later failures | p99 ms |",
          "|---|---|---|---|---|---|---|"]
    later = res.get("later_failures", {})
    for a in res["actions"]:
        outcome = {k: v for k, v in a.items() if k not in ("event", "t", "fault")}
        fault = a["fault"]
        L.append(f"| {a['t']} | {a['event']} | {'yes' if fault else ''} | `{json.dumps(outcome)[:160]}` | "
                 f"{res['recovery_s'].get(a['event'], '') if fault else ''} | "
                 f"{later.get(a['event'], '') if fault else ''} | "
                 f"{res['p99_ms_after_fault'].get(a['event'], '') if fault else ''} |")
    L += ["", "## Per minute", "", "| minute | sent | answered | degraded | lost | failed | p99 ms per deployment |",
          "|---|---|---|---|---|---|---|"]
    for m in res["per_minute"]:
        p99 = ", ".join(f"{d} {v['p99']}" for d, v in m["latency_ms"].items())
        L.append(f"| {m['minute']} | {m['sent']} | {m['answered']} | {m['degraded']} | {m['lost']} | "
                 f"{m['failed']} | {p99} |")
    L += ["", "## Leak check (last half of the run: slope per minute, growth first to last sample)", "",
          "| process | RSS MB/min | RSS growth | fds/min | threads/min |", "|---|---|---|---|---|"]
    for proc, m in res["leak_check_last_half"].items():
        L.append(f"| {proc} | {m.get('rss_mb', {}).get('slope_per_min')} | {m.get('rss_mb', {}).get('growth')} | "
                 f"{m.get('fds', {}).get('slope_per_min')} | {m.get('threads', {}).get('slope_per_min')} |")
    drift = res["p99_drift"]
    L += ["", f"## Drift [p99 at the end <= 1.2x the first {drift['first_s']:g} s; RSS growth after settling <= 5%]",
          "",
          f"p99 of primary answers: {drift['first_p99_ms']} ms in the first {drift['first_s']:g} s "
          f"({drift['first_n']} answers), {drift['end_p99_ms']} ms in the quiet tail ({drift['end_n']}): "
          f"**{drift['ratio']}x**.", "", "| process | from s | RSS MB then | at the end | growth |",
          "|---|---|---|---|---|"]
    L += [f"| {proc} | {g['from_s']} | {g['from_mb']} | {g['to_mb']} | **{g['growth']:+.2%}** |"
          for proc, g in res["rss_growth_after_settling"].items()]
    shm = res["dev_shm"]
    if shm:
        L += ["", f"/dev/shm used: {shm[0]['used_mb']} MB at start, {shm[-1]['used_mb']} MB at end."]
    if plotted:
        L += ["", f"![throughput, p99 and RSS over time, changes grey and faults red]({out.with_suffix('.png').name})"]
    L += ["", "A process killed by a fault is replaced by BentoML: its successor is a new line (named by PID). "
          "redis_stop/redis_start: the API workers limit on their own while Redis is down (kernel/protection/"
          "redis_buckets.py); shared_again_s is the time from the restart until a bucket check reached Redis. "
          "registry_*_add: the hot add of a model no process had pulled, while the registry answered "
          f"{res['registry_http']['slow_s']} s late or refused connections; restored right after. Each starts once "
          "/readyz "
          "answers (settle_s): an API worker restarting while the registry is slow re-reads every model from it at "
          "startup and answers nothing for minutes (a run of 2026-12-07 lost 656 requests that way)."]
    return "\n".join(L)


STARTS = "one `bentoml serve` on the registry with the soak's admin key and settings (--env, --models-file)"


def extra_env(args: argparse.Namespace) -> dict[str, str]:
    extra = dict(kv.split("=", 1) for kv in args.env.split(",") if kv)
    if args.models_file:
        extra["TRISERVE_MODELS_FILE"] = str(args.models_file)
    return extra


@contextlib.contextmanager
def start_phase(args: argparse.Namespace) -> Iterator[StartOnce]:
    """The soak's server, ready; one text request answered."""
    def once(attempt: Attempt) -> None:
        def check(srv: Server) -> str:
            return check_answer(srv.url, "/v1/classify", text_body(random.Random(attempt.number)))

        serve_once(attempt, args.registry, server_env(extra_env(args)), "serve", check, ready_timeout=300)

    yield once


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = base_parser(__doc__, NAME)  # --registry, --out (<out>.json, .md, .png), --log, --starts
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--rate", type=float, default=None,
                    help="req/s per deployment (default: an equal part of --load x knee, or 2)")
    ap.add_argument("--load", type=float, default=KNEE_FRACTION,
                    help="the share of the host's knee the whole mix asks for (default %(default)s)")
    ap.add_argument("--models-file", type=Path, default=None, help="TRISERVE_MODELS_FILE for the server")
    ap.add_argument("--knee", type=Path, nargs="+",
                    default=[ROOT / "docs" / "bench" / "knee.json", ROOT / "docs" / "bench" / "knee_images.json"],
                    help="scripts/bench/knee.py reports: each family's knee")
    ap.add_argument("--env", default="", help="comma list of VAR=VALUE for the server")
    ap.add_argument("--max-requests", type=int, default=200_000, help="per deployment")
    ap.add_argument("--steps", type=lambda v: [s for s in v.split(",") if s], default=list(STEPS),
                    help="comma list: only these changes and faults (default: all, in their order)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.starts:
        drill_main(NAME, args, start_phase)
        return {}
    seconds = args.minutes * 60
    events = schedule(args.minutes, steps=args.steps)
    extra = extra_env(args)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    log = log_path(args, NAME)  # outside the work dir: kept when the server fails
    with tempfile.TemporaryDirectory(prefix="triserve-soak-") as d:
        reg = prepare(args.registry, Path(d))
        with (RedisServer(Path(d)) as redis, RegistryHttp(reg.root) as registry,
              Server(reg.root, env=server_env(extra, redis, registry, Path(d) / "model-cache"), log_path=log) as srv):
            srv.wait_ready(timeout=300)
            soak = Soak(srv, reg, events, seconds, redis, registry)
            deployments, ctx = build_context(soak, reg)
            rate = rates(deployments, knees(*args.knee), args.rate, load=args.load)
            by_knee = rates(deployments, knees(*args.knee), None, load=args.load)
            t = time.monotonic()
            loops = asyncio.run(soak.run(deployments, rate, ctx, args.max_requests))
            elapsed = time.monotonic() - t
            tail = log.read_text(errors="replace")[-3000:]
        res = {"drill": NAME, "command": "python -m scripts.drills.soak " + " ".join(argv or []),
               "started_utc": started, "minutes": args.minutes, "registry": str(args.registry),
               "server_env": extra, "server_log": str(log), "rates_by_knee": by_knee,
               "limits": {"limits_scope": "cluster", "redis_port": redis.port, "rate_per_s": RATE_PER_S},
               "registry_http": {"url": registry.url, "slow_s": registry.slow_s, "served": dict(registry.served)},
               **analyse(soak, loops, rate, elapsed), "server_log_tail": tail}
    plotted = plot(res, soak.rows, args.out)
    write_report(args.out, res, markdown(res, args.out, plotted))
    return res


if __name__ == "__main__":
    main(sys.argv[1:])
