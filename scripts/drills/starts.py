"""Start checks of the drills: each drill's start phase alone, N times in a row, counted.

    python -m scripts.drills.starts --times 5                       # every drill that starts servers
    python -m scripts.drills.starts --times 5 --drills overload,split_tiers
    python -m scripts.drills.kill_runner --starts 5                  # one drill, with its own options

A start is exactly what the drill starts, with the drill's settings and environment (each drill's `start_phase`):
its servers up until ready, one real request whose answer is checked, everything stopped. Per drill: how many starts
came up and answered, the start failures with their error (and whether a log says EADDRINUSE), bind retries (a
server started again on its held ports after a lost bind: the marks scripts/drills/server.py and scripts/tiers.py
write into the logs), seconds per start (first process started to the last one stopped). A failed start does not end
the loop: the next one runs. Writes docs/drills/starts.{json,md}; the logs of each start stay under
.cache/drills/starts/<drill>/start-<i>/ (git-ignored, replaced at each run).

batch_resume and api_checks start no server (see NO_SERVER).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import shlex
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from scripts.drills.common import DEFAULT_REGISTRY, OUT_DIR, says_degraded
from scripts.drills.ports import address_in_use, bind_retries_in
from scripts.drills.server import ROOT, Server

# the drills that start servers, in the order they are run
DRILLS = ("kill_runner", "overload", "slow_model", "corrupt_model", "memory_budget", "side_by_side",
          "schemathesis_run", "split_tiers", "soak")
NO_SERVER = {"batch_resume": "runs `triserve batch` (python -m triserve.batch.cli) subprocesses: no server, no port",
             "api_checks": "the schemathesis checks schemathesis_run loads: no process of its own",
             "soak_plan": "the soak drill's schedule and accounting (pure): no process of its own",
             "soak_traffic": "the soak drill's requests over four transports: no process of its own",
             "soak_faults": "the soak drill's Redis and HTTP registry (no triserve server): started by soak.py"}
LOG_ROOT = ROOT / ".cache" / "drills" / "starts"


class StartCheckFailed(RuntimeError):
    """The servers came up, but the request's answer was not the one expected."""


class Unavailable(RuntimeError):
    """A prerequisite of the drill is missing (a binary, a trained model): no start was tried."""


@dataclass
class Attempt:
    """One start: where its logs go (every server of the start logs under log_dir), and what it saw."""

    number: int
    log_dir: Path
    ready_s: dict[str, float] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)

    def log(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"


StartOnce = Callable[[Attempt], None]
StartPhase = Callable[[argparse.Namespace], contextlib.AbstractContextManager[StartOnce]]


# --------------------------------------------------------------------------------------------------- the loop

def _logs(log_dir: Path) -> list[Path]:
    return sorted(log_dir.rglob("*.log")) if log_dir.is_dir() else []


def _tail(path: Path, lines: int = 12) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def run_starts(drill: str, times: int, start_once: StartOnce, log_root: Path,
               say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`start_once` `times` times in a row, each with a fresh Attempt; every start is a row, failed or not."""
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    rows: list[dict[str, Any]] = []
    for i in range(times):
        attempt = Attempt(i + 1, log_root / f"start-{i + 1}")
        shutil.rmtree(attempt.log_dir, ignore_errors=True)
        attempt.log_dir.mkdir(parents=True)
        t0 = time.monotonic()
        error = None
        try:
            start_once(attempt)
        except Exception as exc:  # noqa: BLE001 - a failed start is a row with its error; the next start runs
            error = f"{type(exc).__name__}: {exc}"
        logs = _logs(attempt.log_dir)
        row: dict[str, Any] = {"start": i + 1, "ok": error is None, "seconds": round(time.monotonic() - t0, 2),
                               "ready_s": {k: round(v, 2) for k, v in attempt.ready_s.items()},
                               "checks": attempt.checks, "bind_retries": sum(bind_retries_in(p) for p in logs),
                               "logs": str(attempt.log_dir)}
        if error is not None:
            row["error"] = error[:3000]
            row["address_in_use"] = any(address_in_use(p) for p in logs)
            row["log_tails"] = {str(p.relative_to(attempt.log_dir)): _tail(p) for p in logs}
        rows.append(row)
        say(f"[starts] {drill} start {i + 1}/{times}: "
            + (f"ok in {row['seconds']} s, ready {row['ready_s']}, {'; '.join(row['checks'])}" if error is None
               else f"FAILED after {row['seconds']} s: {error[:500]}")
            + (f" ({row['bind_retries']} bind retries)" if row["bind_retries"] else ""))
    return summarise(drill, times, rows)


def summarise(drill: str, times: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if r["ok"]]
    seconds = [r["seconds"] for r in (ok or rows)]
    return {"drill": drill, "times": times, "started": len(ok), "failed": len(rows) - len(ok),
            "failures": [{"start": r["start"], "error": r["error"], "address_in_use": r["address_in_use"]}
                         for r in rows if not r["ok"]],
            "bind_retries": sum(r["bind_retries"] for r in rows),
            "seconds_per_start": {"median": round(statistics.median(seconds), 2), "min": min(seconds),
                                  "max": max(seconds), "of": "successful starts" if ok else "all starts"}
            if seconds else None,
            "starts": rows}


# ----------------------------------------------------------------------------------- what a start does, shared

def check_answer(url: str, path: str, body: dict, *, want: int = 200, primary: bool = True,
                 headers: dict[str, str] | None = None, timeout: float = 60) -> str:
    """POST one real request and check its answer: the status; for a 200 a JSON object with one result per text or
    image sent and (`primary`) not a fallback's answer; for an error status the error model's code. Returns what it
    saw, for the report."""
    r = httpx.post(url + path, json=body, headers=headers, timeout=timeout)
    if r.status_code != want:
        raise StartCheckFailed(f"POST {path} answered {r.status_code}, expected {want}: {r.text[:400]}")
    try:
        data = r.json()
    except ValueError:
        raise StartCheckFailed(f"POST {path} {r.status_code}: not JSON: {r.text[:200]!r}") from None
    if not isinstance(data, dict):
        raise StartCheckFailed(f"POST {path} {r.status_code}: not a JSON object: {r.text[:200]}")
    if want != 200:
        code = (data.get("error") or {}).get("code") if isinstance(data.get("error"), dict) else None
        if not code:
            raise StartCheckFailed(f"POST {path} {r.status_code} without the error model: {r.text[:300]}")
        return f"POST {path} -> {r.status_code} {code}"
    sent = body.get("texts") or body.get("images")
    if sent is not None and len(data.get("results") or []) != len(sent):
        raise StartCheckFailed(f"POST {path}: {len(sent)} inputs sent, answer has {len(data.get('results') or [])} "
                               f"results: {r.text[:300]}")
    if primary and says_degraded(r.content):
        raise StartCheckFailed(f"POST {path}: answered by a fallback model (degraded): {r.text[:300]}")
    model = (data.get("model") or {}).get("name") if isinstance(data.get("model"), dict) else None
    return f"POST {path} -> 200" + (f" ({model})" if model else "")


def check_get(url: str, path: str, *, want: int = 200, headers: dict[str, str] | None = None,
              timeout: float = 30) -> httpx.Response:
    r = httpx.get(url + path, headers=headers, timeout=timeout)
    if r.status_code != want:
        raise StartCheckFailed(f"GET {path} answered {r.status_code}, expected {want}: {r.text[:400]}")
    return r


def serve_once(attempt: Attempt, registry: Path, env: dict[str, str], name: str,
               check: Callable[[Server], str | list[str]], ready_timeout: float = 180) -> None:
    """The start of a drill's one `bentoml serve`: Server on held ports with the drill's env, ready, `check` (one
    real request), stopped (also when anything failed)."""
    with Server(registry, env=env, log_path=attempt.log(name)) as srv:
        attempt.ready_s[name] = srv.wait_ready(ready_timeout)
        seen = check(srv)
        attempt.checks.extend([seen] if isinstance(seen, str) else seen)


# -------------------------------------------------------------------------------------------------- the CLIs

def summary_line(res: dict[str, Any]) -> str:
    if "not_run" in res:
        return f"{res['drill']}: not run: {res['not_run']}"
    if "error" in res:
        return f"{res['drill']}: could not prepare its starts: {res['error']}"
    s = res["seconds_per_start"] or {}
    return (f"{res['drill']}: {res['started']} of {res['times']} starts up and answering, {res['failed']} failed, "
            f"{res['bind_retries']} bind retries; seconds per start median {s.get('median')} "
            f"[{s.get('min')}-{s.get('max')}]")


def starts_of(name: str, args: argparse.Namespace, start_phase: StartPhase, times: int,
              log_root: Path = LOG_ROOT) -> dict[str, Any]:
    """One drill's start phase `times` times: its result, or why it was not run (Unavailable) or could not be
    prepared (any other error before the first start)."""
    res: dict[str, Any]
    try:
        with start_phase(args) as start_once:
            res = run_starts(name, times, start_once, log_root / name)
    except Unavailable as exc:
        return {"drill": name, "not_run": str(exc)}
    except Exception as exc:  # noqa: BLE001 - reported: the preparation failed before any start
        return {"drill": name, "times": times, "started": 0, "failed": times,
                "error": f"{type(exc).__name__}: {exc}"[:3000]}
    return res


def drill_main(name: str, args: argparse.Namespace, start_phase: StartPhase) -> None:
    """A drill's `--starts N`: its start phase N times; a line per start on stderr, the count on stdout; exit 1 when
    a start failed (nothing written to docs/)."""
    res = starts_of(name, args, start_phase, args.starts)
    print(summary_line(res))
    for f in res.get("failures", []):
        print(f"  start {f['start']}: {f['error'][:600]}")
    if "not_run" in res or "error" in res or res["failed"]:
        raise SystemExit(1)


def to_markdown(result: dict[str, Any]) -> str:
    L = [f"# Drill start checks ({result['started_utc']})", "", f"Command: `{result['command']}`", "",
         f"Host: {result['host']}. Each start: the drill's servers with its settings, up until ready, one real "
         "request with its answer checked, everything stopped; the next start only after that. A bind retry is a "
         "server started again on its held ports after a bind it lost (EADDRINUSE in its log).", "",
         "| drill | what one start starts | started / N | failures | bind retries | seconds per start, median "
         "[min-max] |", "|---|---|---|---|---|---|"]
    for name, res in result["drills"].items():
        what = result["what"].get(name, "")
        if "not_run" in res:
            L.append(f"| {name} | {what} | not run | {res['not_run']} | - | - |")
            continue
        if "error" in res:
            L.append(f"| {name} | {what} | 0 / {res['times']} | preparation failed: {res['error'][:300]} | - | - |")
            continue
        fails = "; ".join(f"start {f['start']}: {f['error'][:240]}" + (" (EADDRINUSE in a log)"
                                                                         if f["address_in_use"] else "")
                          for f in res["failures"]) or "none"
        s = res["seconds_per_start"]
        L.append(f"| {name} | {what} | {res['started']} / {res['times']} | {fails} | {res['bind_retries']} | "
                 f"{s['median']} [{s['min']}-{s['max']}] |")
    L += ["", "What each start checked (first start of each drill):", ""]
    for name, res in result["drills"].items():
        if res.get("starts"):
            first = res["starts"][0]
            L.append(f"- {name}: ready {first['ready_s']} s; " + "; ".join(first["checks"] or ["-"]))
    L += ["", "Drills that start no server: " + "; ".join(f"{k} ({v})" for k, v in result["no_server"].items()) + ".",
          "", "Logs of every start (not committed): `.cache/drills/starts/<drill>/start-<i>/`.", ""]
    return "\n".join(L)


def relative(text: str) -> str:
    """Paths inside the checkout written relative to it: the files are committed, the checkout moves."""
    return text.replace(str(ROOT) + "/", "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.drills.starts", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--times", type=int, default=5, help="starts per drill, in a row")
    ap.add_argument("--drills", default=",".join(DRILLS), help="comma-separated (default: every drill that starts "
                                                               "servers)")
    ap.add_argument("--registry", type=Path, default=DEFAULT_REGISTRY, help="registry root (default models/store)")
    ap.add_argument("--out", type=Path, default=OUT_DIR / "starts.json", help="the JSON; the .md goes next to it")
    ap.add_argument("--log-dir", type=Path, default=LOG_ROOT)
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.drills.split(",") if n.strip()]
    unknown = [n for n in names if n not in DRILLS]
    if unknown:
        ap.error(f"{unknown}: not a drill that starts servers ({', '.join(DRILLS)}; no server: "
                 f"{', '.join(NO_SERVER)})")
    result: dict[str, Any] = {
        "command": "python -m scripts.drills.starts " + shlex.join(sys.argv[1:] if argv is None else argv),
        "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "host": f"{os.cpu_count()} CPUs", "times": args.times, "what": {}, "drills": {}, "no_server": NO_SERVER}
    t0 = time.monotonic()
    for name in names:
        mod = importlib.import_module(f"scripts.drills.{name}")
        drill_args = mod.parse_args(["--registry", str(args.registry)])
        result["what"][name] = mod.STARTS
        res = starts_of(name, drill_args, mod.start_phase, args.times, args.log_dir)
        result["drills"][name] = res
        print(summary_line(res), flush=True)
    result["minutes"] = round((time.monotonic() - t0) / 60, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(relative(json.dumps(result, indent=1, default=str)) + "\n")
    args.out.with_suffix(".md").write_text(relative(to_markdown(result)))
    print(f"saved {args.out} and {args.out.with_suffix('.md')}")
    ran = [r for r in result["drills"].values() if "not_run" not in r]
    return 0 if all("error" not in r and r["failed"] == 0 for r in ran) else 1


if __name__ == "__main__":
    # through the module's import name: the drills raise scripts.drills.starts.Unavailable, which is not this
    # __main__'s class of the same name
    from scripts.drills import starts

    sys.exit(starts.main())
