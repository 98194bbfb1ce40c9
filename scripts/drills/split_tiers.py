"""Drill: the tiers apart (scripts/tiers.py) under steady load: a rolling restart of the runner replicas, then the loss
of one gateway instance.

    python -m scripts.drills.split_tiers [--registry models/store] [--rate 40] [--before 10] [--after 10]
    python -m scripts.drills.split_tiers --starts 5     # the start phase alone, 5 times in a row (no load)

Starts 2 runner replicas behind haproxy (health checks on /readyz, L7 retries + redispatch on connection failures),
2 gateways pointing at it by BENTOML_SERVE_DEPENDS and a second haproxy frontend in front of the gateways; only the
`intent` deployment is served (the cheapest). An open-loop text load (one text per request, --rate per second, bounded
by --max-seconds and the count that implies) goes through the gateway balancer for the whole drill.

(a) rolling restart: each runner replica in turn gets SIGTERM (BentoML's graceful stop), is started again on its
    port, and the next one waits until haproxy has it UP again. Goal: zero failed requests.
(b) gateway loss: SIGKILL to one gateway's arbiter and workers at once (a node dying); the other keeps serving; the
    lost one is started again after --hold seconds. Goal: no request lost that the balancer can retry.

Reports ok/failed by status, p50/p99 before/during/after, haproxy's view (when a server went DOWN and came back UP,
retries and redispatches) and the recovery times; saves docs/drills/split_tiers.{json,md,png}.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from scripts.bench.harness import RAISED_LIMITS
from scripts.bench.report import pyplot
from scripts.drills.common import DEGRADED, FAILED, OUT_DIR, PRIMARY, TEXTS, base_parser, by_kind, save
from scripts.drills.loadgen import LoadResult, open_loop, per_second, phase
from scripts.drills.server import ROOT
from scripts.drills.starts import Attempt, StartOnce, Unavailable, check_answer, drill_main
from scripts.tiers import Tiers, TiersConfig, haproxy_binary

NAME = "split_tiers"
PATH = "/v1/classify"


def bodies() -> list[dict]:
    return [{"texts": [t], "top_k": 3} for t in TEXTS]


class Timeline:
    """haproxy's view of every server, sampled every `interval` s: (t, backend, server, status) on each change."""

    def __init__(self, tiers: Tiers, t0: float, interval: float = 0.1):
        self.tiers, self.t0, self.interval = tiers, t0, interval
        self.changes: list[dict] = []
        self._last: dict[tuple[str, str], str] = {}

    def sample(self) -> None:
        try:
            rows = self.tiers.haproxy.stats()
        except Exception:  # noqa: BLE001 - a missed sample is not a drill failure
            return
        for r in rows:
            if r["svname"] in ("FRONTEND", "BACKEND"):
                continue
            key = (r["pxname"].removesuffix("_servers"), r["svname"])
            status = r["status"].split(" ")[0]
            if self._last.get(key) != status:
                self._last[key] = status
                self.changes.append({"t": round(time.monotonic() - self.t0, 2), "backend": key[0],
                                     "server": key[1], "status": status})

    async def run(self, stop: Callable[[], bool]) -> None:
        while not stop():
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(self.interval)

    def first(self, server: str, status: str, after: float) -> float | None:
        return next((c["t"] for c in self.changes if c["server"] == server and c["status"].startswith(status)
                     and c["t"] >= after), None)


async def under_load(tiers: Tiers, rate: float, max_seconds: float, after_s: float,
                     scenario: Callable[[float, list[dict], Timeline], Awaitable[None]]) -> dict:
    """Run `scenario(t0, events, timeline)` while the open-loop load runs; stop the load `after_s` after it ends."""
    t0 = time.monotonic()
    done = {"scenario": False, "load": False}
    events: list[dict] = []
    timeline = Timeline(tiers, t0)
    counters_before = {b: tiers.haproxy.counters(b) for b in (Tiers.RUNNER_BACKEND, Tiers.GATEWAY_BACKEND)}
    load = LoadResult()
    stop_at: dict[str, float] = {}

    def stop_load() -> bool:
        return "t" in stop_at and time.monotonic() >= stop_at["t"]

    async def drive() -> None:
        try:
            await scenario(t0, events, timeline)
        finally:
            done["scenario"] = True
            stop_at["t"] = time.monotonic() + after_s

    mon = asyncio.create_task(timeline.run(lambda: done["load"]))
    load_task = asyncio.create_task(open_loop([tiers.url], PATH, bodies(), rate, max_seconds,
                                              int(rate * max_seconds), t0, stop=stop_load, result=load))
    await drive()
    await load_task
    done["load"] = True
    await mon
    counters_after = {b: tiers.haproxy.counters(b) for b in (Tiers.RUNNER_BACKEND, Tiers.GATEWAY_BACKEND)}
    return {"t0": t0, "rows": load.rows, "skipped": load.skipped, "events": events, "timeline": timeline.changes,
            "haproxy": {b: {k: counters_after[b][k] - counters_before[b][k] for k in counters_after[b]}
                        for b in counters_after},
            "seconds": round(time.monotonic() - t0, 2)}


def now(t0: float) -> float:
    return round(time.monotonic() - t0, 2)


async def rolling_restart(tiers: Tiers, args) -> dict:
    async def scenario(t0: float, events: list[dict], timeline: Timeline) -> None:
        await asyncio.sleep(args.before)
        for r in tiers.runners:
            ev: dict = {"replica": r.name, "pids_before": r.pids(), "sigterm_s": now(t0)}
            ev["stop_took_s"] = round(await asyncio.to_thread(r.terminate, args.grace), 2)
            ev["exited_s"] = now(t0)
            ev["started_s"] = now(t0)
            # started again on its (still reserved) port, one arbiter at a time; a lost circus endpoint is retried
            await asyncio.to_thread(tiers.launch, r)
            await asyncio.to_thread(r.wait_ready, 240)
            ev["ready_s"] = now(t0)
            await asyncio.to_thread(tiers.haproxy.wait_up, Tiers.RUNNER_BACKEND, [r.name], 60)
            ev["lb_up_s"] = now(t0)
            ev["pids_after"] = r.pids()
            ev["lb_down_s"] = timeline.first(r.name, "DOWN", ev["sigterm_s"])
            events.append(ev)
            await asyncio.sleep(args.settle)

    res = await under_load(tiers, args.rate, args.max_seconds, args.after, scenario)
    ev = res["events"]
    start, end = (ev[0]["sigterm_s"], ev[-1]["lb_up_s"]) if ev else (None, None)
    return summarise(res, start, end, "rolling restart of the runner replicas (SIGTERM, start, ready, next)")


async def gateway_loss(tiers: Tiers, args) -> dict:
    async def scenario(t0: float, events: list[dict], timeline: Timeline) -> None:
        await asyncio.sleep(args.before)
        g = tiers.gateways[0]
        ev: dict = {"gateway": g.name, "sigkill_s": now(t0)}
        ev["pids_killed"] = await asyncio.to_thread(g.kill)
        while timeline.first(g.name, "DOWN", ev["sigkill_s"]) is None and now(t0) - ev["sigkill_s"] < 30:
            await asyncio.sleep(0.1)
        ev["lb_down_s"] = timeline.first(g.name, "DOWN", ev["sigkill_s"])
        await asyncio.sleep(args.hold)
        ev["restart_s"] = now(t0)
        await asyncio.to_thread(tiers.launch, g)
        await asyncio.to_thread(g.wait_ready, 240)
        ev["ready_s"] = now(t0)
        await asyncio.to_thread(tiers.haproxy.wait_up, Tiers.GATEWAY_BACKEND, [g.name], 60)
        ev["lb_up_s"] = now(t0)
        events.append(ev)

    res = await under_load(tiers, args.rate, args.max_seconds, args.after, scenario)
    ev = res["events"]
    start, end = (ev[0]["sigkill_s"], ev[0]["lb_up_s"]) if ev else (None, None)
    return summarise(res, start, end, "SIGKILL one gateway (arbiter + workers), the other serves, then restart it")


def summarise(res: dict, start: float | None, end: float | None, what: str) -> dict:
    rows = res["rows"]
    kinds = by_kind(rows)  # ok: primary answers; degraded answers apart (scripts/drills/common.answer_kind)
    failed = kinds[FAILED]
    out = {
        "scenario": what, "seconds": res["seconds"], "requests": len(rows), "skipped_by_client": res["skipped"],
        "ok": len(kinds[PRIMARY]), "degraded": len(kinds[DEGRADED]), "failed": len(failed),
        "failed_sent_s": [round(r.sent, 2) for r in failed][:50],
        "before": phase(rows, None, start), "during": phase(rows, start, end), "after": phase(rows, end, None),
        "events": res["events"], "haproxy_timeline": res["timeline"], "haproxy_counters": res["haproxy"],
        "per_second": per_second(rows),
    }
    if start is not None:
        slow = [r for r in rows if r.sent >= start and r.ok]
        base = out["before"]["latency_ok_ms"]["p99"] or 0.0
        # recovery: from the event to the last request (sent after it) that failed or took over 2x the p99 before
        bad = [r for r in rows if r.sent >= start and (not r.ok or r.ms > 2 * base)]
        out["recovery"] = {
            "p99_before_ms": base,
            "last_bad_request_sent_s": round(max((r.sent for r in bad), default=start) - start, 2),
            "bad_requests": len(bad), "ok_after_event": len(slow),
        }
    return out


WIRING = """## How the tiers are wired (BentoML 1.4.40)

- Runner replica: `python -m bentoml_cli._internal.start start-http-server triserve.services.gateway:Gateway
--service-name
  triserve-runner --port P` (what a Bento image runs for `args: [start-http-server, --service-name, ...]`). Not
  `bentoml serve triserve.runners.service:ModelRunner`: that serves the runner as an *entry* service, and BentoML
  refuses the
  gateway's pickle bodies there (`application/vnd.bentoml+pickle is not allowed in main server`, every call a 503
  `runner_unavailable`).
- Gateway: the same command with `--service-name triserve` and `BENTOML_SERVE_DEPENDS=triserve-runner=<url>` (the
  `--depends` option). BentoML hands its workers `BENTOML_RUNNER_MAP` with that URL, `bentoml.depends(ModelRunner)`
  becomes a remote client of it, and no runner process is started: scripts/tiers.py checks both (the workers' map,
  no runner worker under the gateway). No code change in services/gateway.py.
- Pitfalls: setting `BENTOML_RUNNER_MAP` yourself does nothing (the serving process overwrites it for its workers);
  `--service-name triserve` *without* the runner in the map silently builds the runner inside every gateway worker
  (every worker loads every model, /readyz 200). `bentoml.depends(url=...)` would work too but speaks JSON, not the
  pickle wire the runner's answers are built for (runners/wire.py).
- haproxy stands in for the runner Service: HTTP checks on /readyz (500 ms, fall 2, rise 2), `retry-on conn-failure
  empty-response junk-response`, 3 retries with `option redispatch 1`, `option http-buffer-request` (the request is
  in the buffer to resend). A SIGTERMed runner closes its connections and its port; calls caught in that window fail
  at the transport level and haproxy resends them to the other replica before the gateway sees anything (the
  `retries / redispatches` column). A Kubernetes Service balances connections (kube-proxy), not requests, and
  resends nothing: there the pod's readiness probe and preStop sleep keep new calls away from a stopping runner, and
  a call on a connection it closes is a transport error the gateway retries itself (gateway.runner_retries); that
  path is not what this drill measures.
"""


def to_markdown(res: dict) -> str:
    logs = res["tiers"]["logs"].replace(str(ROOT) + "/", "")
    L = [f"# Split tiers drill ({res['started_utc']})", "", f"Command: `{res['command']}`", "",
         f"{res['setup']}", "",
         "| scenario | requests | ok | failed (by status) | p50 / p99 ms before | during | after | haproxy retries / "
         "redispatches (runners; gateways) |", "|---|---|---|---|---|---|---|---|"]
    for key in ("rolling_restart", "gateway_loss"):
        s = res[key]
        bad = {k: v for k, v in s["before"]["status"].items() if k != "200"}
        for ph in ("during", "after"):
            for k, v in s[ph]["status"].items():
                if k != "200":
                    bad[k] = bad.get(k, 0) + v
        hp = s["haproxy_counters"]
        lat = {ph: f"{s[ph]['latency_ms']['p50']} / {s[ph]['latency_ms']['p99']}"
               for ph in ("before", "during", "after")}
        ok = f"{s['ok']}" + (f" (+{s['degraded']} degraded)" if s.get("degraded") else "")
        L.append(f"| {key.replace('_', ' ')} | {s['requests']} | {ok} | {s['failed']} {bad or ''} | "
                 f"{lat['before']} | {lat['during']} | {lat['after']} | {hp['runners']['retries']} / "
                 f"{hp['runners']['redispatches']}; {hp['gateways']['retries']} / {hp['gateways']['redispatches']} |")
    L += ["", "Rolling restart, per replica (seconds from the drill's start):", "",
          "| replica | SIGTERM | haproxy DOWN | exited (stop took) | started | /readyz 200 | haproxy UP |",
          "|---|---|---|---|---|---|---|"]
    for e in res["rolling_restart"]["events"]:
        L.append(f"| {e['replica']} | {e['sigterm_s']} | {e['lb_down_s']} | {e['exited_s']} ({e['stop_took_s']} s) | "
                 f"{e['started_s']} | {e['ready_s']} | {e['lb_up_s']} |")
    for e in res["gateway_loss"]["events"]:
        L += ["", f"Gateway loss: SIGKILL {e['gateway']} at {e['sigkill_s']} s, haproxy marked it DOWN at "
                  f"{e['lb_down_s']} s ({round((e['lb_down_s'] or 0) - e['sigkill_s'], 2)} s later); restarted at "
                  f"{e['restart_s']} s, /readyz 200 at {e['ready_s']} s, back in rotation at {e['lb_up_s']} s."]
    L.append("")
    for key in ("rolling_restart", "gateway_loss"):
        rec = res[key].get("recovery")
        if rec:
            L.append(f"- {key.replace('_', ' ')}: {rec['bad_requests']} requests sent after the first event failed "
                     f"or took over 2x the p99 before ({rec['p99_before_ms']} ms); the last was sent "
                     f"{rec['last_bad_request_sent_s']} s after it.")
    L += ["", f"Goals: rolling restart zero failed: **{res['goals']['rolling_restart_zero_failed']}**; gateway loss "
              f"zero failed: **{res['goals']['gateway_loss_zero_failed']}**.", "",
          f"![per second]({Path(res['plot']).name})", "", f"Logs of the run (not committed): `{logs}`.", "",
          WIRING]
    return "\n".join(L)


def plot(res: dict, out: Path) -> None:
    plt = pyplot()
    if plt is None:
        return None

    fig, axes = plt.subplots(2, 1, figsize=(11, 7.5))
    for ax, key in zip(axes, ("rolling_restart", "gateway_loss")):
        s = res[key]
        ps = s["per_second"]
        t = [p["t"] for p in ps]
        ax.bar(t, [p["ok"] for p in ps], width=0.9, color="#9ecae1", label="ok / s")
        ax.bar(t, [p.get("degraded", 0) for p in ps], width=0.9, color="#fdae6b", label="degraded / s",
               bottom=[p["ok"] for p in ps])
        ax.bar(t, [p["failed"] for p in ps], width=0.9, color="#de2d26", label="failed / s",
               bottom=[p["ok"] + p.get("degraded", 0) for p in ps])
        ax.set_ylabel("requests per second (by send time)")
        ax2 = ax.twinx()
        ax2.plot(t, [p["p50_ms"] for p in ps], color="#31a354", label="p50 ms")
        ax2.plot(t, [p["p99_ms"] for p in ps], color="#756bb1", label="p99 ms")
        ax2.set_yscale("log")
        ax2.set_ylabel("latency ms (log)")
        for e in s["events"]:
            for k, style in (("sigterm_s", "--"), ("sigkill_s", "--"), ("lb_down_s", ":"), ("ready_s", "-."),
                             ("lb_up_s", "-")):
                if e.get(k) is not None:
                    ax.axvline(e[k], color="k", linestyle=style, linewidth=0.8)
                    ax.text(e[k], ax.get_ylim()[1] * 0.98, f" {k[:-2]} {e.get('replica') or e.get('gateway')}",
                            rotation=90, va="top", fontsize=7)
        ax.set_title(f"{s['scenario']}: {s['ok']} ok, {s['failed']} failed")
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="lower left", fontsize=8)
    axes[-1].set_xlabel("seconds since the scenario started")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def drill_config(args, log_dir: Path | None = None) -> TiersConfig:
    log_dir = log_dir or args.log_dir
    if log_dir is None:  # git-ignored, replaced at each run
        log_dir = ROOT / ".cache" / "drills" / NAME
        shutil.rmtree(log_dir, ignore_errors=True)
    # one client address (haproxy) carries all the load: per-client rate limits and capacity limits off; the runner
    # threads do not spin (two replicas and two gateways share the machine's cores)
    return TiersConfig(registry_dir=args.registry.resolve(), runners=2, gateways=2, gateway_lb=True,
                       deployments=("intent",), log_dir=log_dir,
                       env={**RAISED_LIMITS, "TRISERVE_GRPC__ENABLED": "true", "TRISERVE_RUNNER__SPIN_WAIT": "false"})


STARTS = ("2 runner replicas (deployment intent) behind haproxy, then 2 gateways behind a second haproxy frontend "
          "(Tiers.start: one arbiter at a time)")


@contextlib.contextmanager
def start_phase(args) -> Iterator[StartOnce]:
    """The drill's tiers up (Tiers.start: every replica ready, haproxy has them UP, the gateways run no runner of
    their own), one request through the gateway balancer, everything stopped. No load."""
    if haproxy_binary() is None:
        raise Unavailable("haproxy is not installed: apt-get install -y haproxy")

    def once(attempt: Attempt) -> None:
        with Tiers(drill_config(args, attempt.log_dir / "tiers")) as tiers:
            attempt.ready_s.update(tiers.timings)  # each process spawned and ready, all_ready_s: all of them
            remote = tiers.check_remote()
            body = bodies()[attempt.number % len(bodies())]
            attempt.checks += [f"gateways {sorted(remote)} reach the runners through haproxy only",
                               check_answer(tiers.url, PATH, body)]

    yield once


async def run(args) -> dict:
    cfg = drill_config(args)
    res: dict = {"started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "command": " ".join(["python -m scripts.drills.split_tiers", *sys.argv[1:]]),
                 "rate_per_s": args.rate, "path": PATH}
    with Tiers(cfg) as tiers:
        res["tiers"] = tiers.describe()
        res["remote_check"] = tiers.check_remote()
        res["setup"] = (f"2 runner replicas (deployment intent) behind haproxy ({cfg.balancer.balance}, /readyz checks "
                        f"every {cfg.balancer.check_inter_ms} ms, fall {cfg.balancer.fall} rise {cfg.balancer.rise}, "
                        f"retry-on {' '.join(cfg.balancer.retry_on)}, {cfg.balancer.retries} retries with redispatch); "
                        f"2 gateways (BENTOML_SERVE_DEPENDS -> the runner balancer) behind a second haproxy frontend; "
                        f"open-loop load {args.rate}/s of one-text {PATH} through the gateway balancer; runner "
                        f"spin_wait off, client rate and capacity limits off. Everything (load generator included) "
                        f"on one 2-core machine shared with other work.")
        print(f"[{NAME}] tiers up in {tiers.timings['all_ready_s']} s; rolling restart ...", file=sys.stderr)
        res["rolling_restart"] = await rolling_restart(tiers, args)
        print(f"[{NAME}] rolling restart: {res['rolling_restart']['ok']} ok, {res['rolling_restart']['failed']} failed;"
              f" gateway loss ...", file=sys.stderr)
        await asyncio.sleep(2)
        res["gateway_loss"] = await gateway_loss(tiers, args)
        res["tiers"]["pids_at_end"] = {p.name: p.pids() for p in [*tiers.runners, *tiers.gateways]}
    res["goals"] = {"rolling_restart_zero_failed": res["rolling_restart"]["failed"] == 0,
                    "gateway_loss_zero_failed": res["gateway_loss"]["failed"] == 0}
    return res


def summary(res: dict) -> str:
    lines = []
    for key in ("rolling_restart", "gateway_loss"):
        s = res[key]
        lines.append(f"{key}: {s['requests']} requests, {s['ok']} ok, {s['failed']} failed; "
                     f"p50/p99 ms before {s['before']['latency_ms']['p50']}/{s['before']['latency_ms']['p99']}, "
                     f"during {s['during']['latency_ms']['p50']}/{s['during']['latency_ms']['p99']}, "
                     f"after {s['after']['latency_ms']['p50']}/{s['after']['latency_ms']['p99']}; "
                     f"haproxy {s['haproxy_counters']}; recovery {s.get('recovery')}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = base_parser(__doc__ or "", NAME)
    ap.add_argument("--rate", type=float, default=40.0, help="requests per second (open loop)")
    ap.add_argument("--before", type=float, default=10.0, help="seconds of load before each scenario's event")
    ap.add_argument("--after", type=float, default=10.0, help="seconds of load after each scenario ends")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds between two replicas' restarts")
    ap.add_argument("--hold", type=float, default=8.0, help="seconds on one gateway before restarting the other")
    ap.add_argument("--grace", type=float, default=30.0, help="SIGTERM grace before SIGKILL, per replica")
    ap.add_argument("--max-seconds", type=float, default=240.0, help="bound on each scenario's load")
    ap.add_argument("--log-dir", type=Path, default=None,
                    help="process logs (default: .cache/drills/split_tiers, replaced at each run)")
    return ap.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.starts:
        drill_main(NAME, args, start_phase)
        return
    if haproxy_binary() is None:
        raise SystemExit("haproxy is not installed: apt-get install -y haproxy")
    res = asyncio.run(run(args))
    out = Path(args.out)
    res["plot"] = str(out.with_suffix(".png"))
    plot(res, out.with_suffix(".png"))
    save(res, out)
    out.with_suffix(".md").write_text(to_markdown(res))
    print(summary(res))


if __name__ == "__main__":
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    main()
