"""The soak drill's pure parts (scripts/drills/soak.py): the schedule of changes and faults scaled to the run, the
rate per deployment, and the accounting of the rows (per minute, lost, wrong version, recovery, leak slopes).

No I/O here, so the tests (tests/scripts/drills/test_soak.py) check the schedule and every count without a server.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scripts.drills.common import DEGRADED, FAILED, PRIMARY, Row, pct

# issue 42: load at ~60% of the knee. Each knee was measured with its family alone on the host, and the soak sends to
# every deployment at once, so each gets an equal part of that 60%: 0.6 x knee / deployments (at 0.6 x knee each, five
# deployments would ask ~3x what the host answers, an overload drill rather than a soak).
KNEE_FRACTION = 0.6
PROXY_KNEE = {"pose": "detection", "segmentation": "detection", "classification": "detection"}
DEFAULT_RATE = 2.0  # req/s for a deployment knee.json does not cover (a conservative guess, said in the report)
QUIET_TAIL = 0.12  # the last share of the run has no change or fault: what the system settles to is measured
# the order is the story: changes and faults in turn, spread over the run by their weights (below)
STEPS: tuple[str, ...] = ("hot_add", "canary", "promote", "rollback", "shadow_on", "runner_kill", "redis_stop",
                          "shadow_off", "redis_start", "gateway_kill", "registry_slow_add", "registry_down_add",
                          "corrupt_add", "burst", "hot_remove")
FAULTS = frozenset({"runner_kill", "redis_stop", "redis_start", "gateway_kill", "registry_slow_add",
                    "registry_down_add", "corrupt_add", "burst"})
# room a step gets, in steps: a killed process is back in 5-10 s here (recovery is measured until the next fault), a
# hot add through a registry that answers 3 s late makes ~7 slow requests (runner and gateway), one through an
# unreachable registry waits out the pull's retries (~8 s): the next step does not start while they are still going
WEIGHTS = {"runner_kill": 2.0, "gateway_kill": 2.0, "registry_slow_add": 3.5, "registry_down_add": 2.0}
BURST_FACTOR = 3.0
QUIET_S = 5.0  # a fault is recovered from once this long of sends in a row fail nothing


@dataclass(frozen=True)
class Event:
    name: str
    at_s: float
    duration_s: float = 0.0  # a burst lasts; every other event is an instant

    @property
    def fault(self) -> bool:
        return self.name in FAULTS


# a step that undoes or continues another needs it earlier in the run
NEEDS = {"promote": "canary", "rollback": "promote", "shadow_off": "shadow_on", "redis_start": "redis_stop",
         "hot_remove": "hot_add"}


def schedule(minutes: float, warmup_s: float = 10.0, steps: Sequence[str] = STEPS) -> list[Event]:
    """Every step of `steps` (all of STEPS unless a subset is asked for: `--steps burst` isolates one fault) once, in
    STEPS' order from `warmup_s` to the start of the quiet tail, each followed by room in proportion to its weight
    (WEIGHTS, else 1); the burst lasts a third of a step (at least 5 s)."""
    unknown = sorted(set(steps) - set(STEPS))
    missing = sorted(f"{s} needs {NEEDS[s]}" for s in steps if s in NEEDS and NEEDS[s] not in steps)
    if unknown or missing:
        raise ValueError(f"unknown steps {unknown} (known: {', '.join(STEPS)})" if unknown else "; ".join(missing))
    steps = [name for name in STEPS if name in steps]
    total = minutes * 60
    span = total * (1 - QUIET_TAIL) - warmup_s
    if span <= 0:
        raise ValueError(f"a {minutes}-minute soak leaves no time for its schedule")
    step = span / sum(WEIGHTS.get(name, 1.0) for name in steps)
    events, at = [], warmup_s
    for name in steps:
        events.append(Event(name, round(at, 2), round(max(5.0, step / 3), 2) if name == "burst" else 0.0))
        at += step * WEIGHTS.get(name, 1.0)
    return events


def burst_factor(events: Sequence[Event], t: float) -> float:
    """The arrival-rate multiplier at second `t` of the run."""
    return BURST_FACTOR if any(e.name == "burst" and e.at_s <= t < e.at_s + e.duration_s for e in events) else 1.0


def knees(*paths: Path) -> dict[str, float]:
    """family -> knee (req/s) from scripts/bench/knee.py's reports (docs/bench/knee.json: text, detection,
    forecast; knee_images.json: the other image families), measured per family on the default models; a later file
    wins for a family both measured; a missing or unreadable file adds nothing."""
    out: dict[str, float] = {}
    for path in paths:
        try:
            tasks = json.loads(path.read_text()).get("tasks", {})
        except (OSError, ValueError):
            continue
        out.update({fam: float(t["knee_rps"]) for fam, t in tasks.items() if t.get("knee_rps")})
    return out


def rates(deployments: dict[str, str], knee: dict[str, float], fixed: float | None,
          default: float = DEFAULT_RATE, load: float = KNEE_FRACTION) -> dict[str, dict]:
    """deployment -> {"rate", "source"}: `fixed` when given, else its equal part of `load` x its family's knee
    (load / number of deployments), an image family without a knee of its own taking detection's (PROXY_KNEE: a
    YOLO-sized model per image), else `default`."""
    out = {}
    share = load / max(1, len(deployments))
    for name, family in sorted(deployments.items()):
        measured = family if family in knee else PROXY_KNEE.get(family)
        if fixed is not None:
            out[name] = {"rate": fixed, "source": "--rate"}
        elif measured in knee:
            proxy = "" if measured == family else f" ({measured}'s: none measured for {family})"
            out[name] = {"rate": round(share * knee[measured], 2),
                         "source": f"{load:g} x knee {knee[measured]:g} req/s{proxy} / {len(deployments)} "
                                   "deployments (docs/bench/knee*.json)"}
        else:
            out[name] = {"rate": default, "source": f"default {default:g} req/s (no knee measured)"}
    return out


@dataclass
class SoakRow(Row):
    """One soak request: a drills Row plus where it went and which version it asked for and got."""
    transport: str = "rest"
    deployment: str = ""
    pinned: str | None = None  # the version a version-pinned request asked for
    version: str | None = None  # the version that answered
    retried: str | None = None  # the first try's transport failure, when the request was sent once more


def lost(row: Row) -> bool:
    """Sent and never answered by the server: a transport failure (no HTTP status, no gRPC status from the server) or
    the client's own deadline ("client_deadline"); a gRPC status the server sent (its own deadline included) is an
    answer."""
    return not isinstance(row.status, int) and not row.status.startswith("grpc:")


def wrong_version(row: SoakRow) -> bool:
    return row.pinned is not None and row.status == 200 and row.version != row.pinned


def status_key(row: Row) -> str:
    return f"{row.status}" + (f":{row.code}" if row.code and isinstance(row.status, int) else "")


def minute_table(rows: Iterable[SoakRow]) -> list[dict]:
    """Per minute of send time: answered, failed by status/code, degraded, p50/p99 of primary answers per deployment."""
    buckets: dict[int, list[SoakRow]] = {}
    for r in rows:
        buckets.setdefault(int(r.sent // 60), []).append(r)
    out = []
    for m in sorted(buckets):
        b = buckets[m]
        per_dep: dict[str, list[float]] = {}
        for r in b:
            if r.kind == PRIMARY:
                per_dep.setdefault(r.deployment, []).append(r.ms)
        out.append({"minute": m, "sent": len(b), "answered": sum(r.kind != FAILED for r in b),
                    "degraded": sum(r.kind == DEGRADED for r in b),
                    "failed": dict(sorted(Counter(status_key(r) for r in b if r.kind == FAILED).items())),
                    "lost": sum(lost(r) for r in b),
                    "latency_ms": {d: {"p50": pct(ms, 50), "p99": pct(ms, 99)} for d, ms in sorted(per_dep.items())}})
    return out


def opening_failures_end(rows: Sequence[Row], start: float, end: float, quiet_s: float = QUIET_S) -> float | None:
    """When the run of failures a fault opens ends: the send time of its last failure, the run ending where `quiet_s`
    of sends in a row fail nothing (None: nothing failed in the first `quiet_s` after `start`)."""
    last = None
    for t in sorted(r.sent for r in rows if start <= r.sent < end and r.kind == FAILED):
        if t - (start if last is None else last) >= quiet_s:
            break
        last = t
    return last


def recovery_s(rows: Sequence[Row], start: float, end: float, quiet_s: float = QUIET_S) -> float | None:
    """Seconds from `start` (a fault, or a burst's end) until the system answers again: 0 when nothing failed in
    the first `quiet_s`; else the completion of the first success sent after the run of failures the fault opened
    (opening_failures_end), less `start`; None when nothing succeeded after it before `end`. A failure after that
    run (a refusal minutes later, the system long recovered) is not the fault's: later_failures counts those."""
    last = opening_failures_end(rows, start, end, quiet_s)
    if last is None:
        return 0.0
    ok = [r.done for r in rows if last < r.sent < end and r.kind != FAILED]
    return round(min(ok) - start, 2) if ok else None


def later_failures(rows: Sequence[Row], start: float, end: float, quiet_s: float = QUIET_S) -> int:
    """Failures sent in [start, end) after the run the fault opened (see recovery_s)."""
    last = opening_failures_end(rows, start, end, quiet_s)
    return sum(1 for r in rows if r.kind == FAILED and start <= r.sent < end and (last is None or r.sent > last))


def recoveries(rows: Sequence[Row], events: Sequence[Event], run_end: float,
               measure: Callable[[Sequence[Row], float, float], Any] = recovery_s) -> dict[str, Any]:
    """Recovery after each fault (or `measure`: later_failures), each within the time until the next fault (a burst:
    from its end); the changes between faults are meant to fail nothing, so a failure they cause counts against the
    fault before them."""
    out = {}
    faults = sorted((e for e in events if e.fault), key=lambda e: e.at_s)
    for i, e in enumerate(faults):
        nxt = faults[i + 1].at_s if i + 1 < len(faults) else run_end
        out[e.name] = measure(rows, e.at_s + e.duration_s, nxt)
    return out


def window_p99(rows: Sequence[Row], events: Sequence[Event], run_end: float) -> dict[str, float | None]:
    """p99 latency (ms) of the answers to requests sent from each fault until the next one (a stall shows here when
    nothing fails: e.g. an event loop blocked while a hot add reads a slow registry); None without answers."""
    out = {}
    faults = sorted((e for e in events if e.fault), key=lambda e: e.at_s)
    for i, e in enumerate(faults):
        nxt = faults[i + 1].at_s if i + 1 < len(faults) else run_end
        out[e.name] = pct([r.ms for r in rows if e.at_s <= r.sent < nxt and r.kind != FAILED], 99)
    return out


def slope_per_min(samples: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope (units per minute) of (seconds, value) samples; None with fewer than 3."""
    if len(samples) < 3:
        return None
    t = np.array([s[0] for s in samples]) / 60
    v = np.array([s[1] for s in samples], dtype=float)
    return round(float(np.polyfit(t, v, 1)[0]), 4)


def leak_check(procs: Sequence[dict], run_s: float) -> dict[str, dict]:
    """Per process and metric (rss_mb, fds, threads): slope per minute over the last half of the run, and the growth
    from the first to the last sample of that half. `procs`: samples {"t", "proc", "rss_mb", "fds", "threads"}."""
    half = run_s / 2
    out: dict[str, dict] = {}
    for name in sorted({p["proc"] for p in procs}):
        late = [p for p in procs if p["proc"] == name and p["t"] >= half]
        if len(late) < 3:
            continue
        out[name] = {}
        for metric in ("rss_mb", "fds", "threads"):
            vals = [(p["t"], p[metric]) for p in late if p.get(metric) is not None]
            if len(vals) < 3:
                continue
            first, last = vals[0][1], vals[-1][1]
            out[name][metric] = {"slope_per_min": slope_per_min(vals), "first": first, "last": last,
                                 "growth": round((last - first) / first, 4) if first else None}
    return out


def settle_s(run_s: float) -> float:
    """The start of the run the drift goals compare with: its first 10 minutes (issue 42), a sixth of a shorter run."""
    return min(600.0, run_s / 6)


def p99_drift(rows: Sequence[Row], run_s: float) -> dict:
    """p99 of the primary answers sent in the first settle_s(run_s) (no fault yet: the schedule's first fault comes
    later in a 60-minute run) against those sent in the quiet tail (the last QUIET_TAIL of the run, no change or fault):
    a p99 that creeps up shows here. Goal: ratio <= 1.2."""
    start = settle_s(run_s)
    first = [r.ms for r in rows if r.kind == PRIMARY and r.sent < start]
    end = [r.ms for r in rows if r.kind == PRIMARY and r.sent >= run_s * (1 - QUIET_TAIL)]
    a, b = pct(first, 99), pct(end, 99)
    return {"first_s": round(start, 1), "first_p99_ms": a, "end_p99_ms": b, "first_n": len(first), "end_n": len(end),
            "ratio": round(b / a, 3) if a and b is not None else None}


def rss_growth(procs: Sequence[dict], run_s: float) -> dict[str, dict]:
    """Per process alive at the end: RSS growth from the first sample after it settled (settle_s(run_s) into the run,
    and half that after its own first sample: a process a fault restarted settles too) to its last. Goal: <= 5%."""
    start = settle_s(run_s)
    out = {}
    for name in sorted({p["proc"] for p in procs}):
        samples = sorted((p["t"], p["rss_mb"]) for p in procs if p["proc"] == name and p.get("rss_mb") is not None)
        if not samples or samples[-1][0] < run_s * 0.9:
            continue  # gone before the end (killed by a fault): its successor is measured
        base_t = max(start, samples[0][0] + start / 2)
        base = next((v for t, v in samples if t >= base_t), None)
        if base:
            out[name] = {"from_s": round(base_t, 1), "from_mb": base, "to_mb": samples[-1][1],
                         "growth": round((samples[-1][1] - base) / base, 4)}
    return out


def step_problems(actions: Sequence[dict]) -> dict[str, str]:
    """What the new fault steps must show, per step that did not (empty: all did): a hot add through a slow registry
    serves (200) or is refused with an error code; one through an unreachable registry is refused with a 4xx/5xx and
    an error code and leaves no deployment behind; Redis restarted, its buckets are used again."""
    out = {}
    for a in actions:
        name, status = a["event"], a.get("status")
        if name == "registry_slow_add" and status != 200 and not (isinstance(status, int) and a.get("code")):
            out[name] = f"neither served nor refused with a code: {status} {a.get('error', '')}".strip()
        if name == "registry_down_add":
            if not (isinstance(status, int) and status >= 400 and a.get("code")):
                out[name] = f"not refused with a 4xx/5xx and a code: {status} {a.get('error', '')}".strip()
            elif a.get("listed"):
                out[name] = "refused, but the deployment is listed (half added)"
        if name == "redis_start" and a.get("shared_again_s") is None:
            out[name] = f"the shared buckets were not used again: {a.get('error', 'no bucket check reached Redis')}"
    return out
