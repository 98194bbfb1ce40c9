"""Closed-loop load with wrk: N connections, each sending its next request when the previous answer arrived.

Why wrk: a C load generator spends far less CPU per request than a Python client, so the load core is never what
limits a measurement, and its latency histogram is exact to the microsecond. The request mix (paths and JSON bodies,
e.g. one text or one image each) is replayed in order by scripts/bench/wrk_replay.lua, cycling.

    from scripts.bench.wrk import closed_loop
    cell = closed_loop([("http://127.0.0.1:3000/v1/classify", b'{"texts": ["hi"]}')], concurrency=32,
                       warmup_s=2, duration_s=10, max_requests=200_000, cpu=1)

Bounded in time (wrk -d) and count (the script stops sending after max_requests); loopback targets only. The result
has the shape of scripts.bench.harness.closed_loop's (ok and texts_per_s = primary answers and their rate, degraded
answers apart, latency percentiles in ms, non_200), plus p99.9 and the transport-error breakdown. wrk counts answers
with status >= 400 as one number, so "status" holds {"<400": n, ">=400": n}; the Lua script counts the 200s whose body
says "degraded": true. wrk's latency histogram holds every answer (degraded and failed ones too: it cannot be split
by kind), which the cell says in "latency_of"; the aiohttp generator times primary answers alone.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from scripts.imagetools import StepFailed, system_tool

LUA = Path(__file__).with_name("wrk_replay.lua")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def available() -> str | None:
    """The wrk binary, by absolute path in the system directories (Debian: apt-get install -y wrk), or None; never
    one first on the caller's PATH (scripts/imagetools.py "tool resolution")."""
    try:
        return system_tool("wrk")
    except StepFailed:
        return None


def _requests_file(requests: list[tuple[str, bytes]], path: Path) -> str:
    """Writes "<path>\\t<body>" lines; returns the base URL every request shares (one server per cell)."""
    bases = set()
    with open(path, "wb") as f:
        for url, body in requests:
            u = urlparse(url)
            if u.hostname not in LOOPBACK:
                raise SystemExit("refusing to send load to a non-loopback address")
            if b"\n" in body or b"\t" in body:
                raise ValueError("request bodies must be single-line JSON (json.dumps without indent)")
            bases.add(f"{u.scheme}://{u.netloc}")
            f.write((u.path or "/").encode() + (b"?" + u.query.encode() if u.query else b"") + b"\t" + body + b"\n")
    if len(bases) != 1:
        raise ValueError(f"one server per closed loop, got {sorted(bases)}")
    return bases.pop()


def run_wrk(base: str, requests_file: Path, concurrency: int, seconds: float, max_requests: int,
            cpu: int | None = None, timeout_s: int = 30) -> dict:
    """One wrk run; returns the script's counters (latency in microseconds)."""
    exe = system_tool("wrk")  # StepFailed (a RuntimeError) naming the Debian package when it is not installed
    cmd = [exe, "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", f"--timeout={timeout_s}s", "-s", str(LUA),
           base, "--", str(requests_file), str(max_requests)]
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + timeout_s + 30, check=False,
                       preexec_fn=pin)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("WRK_JSON ")), None)
    if p.returncode or line is None:
        raise RuntimeError(f"wrk exited {p.returncode}: {(p.stderr or p.stdout)[-800:]}")
    return json.loads(line[len("WRK_JSON "):])


def summarise(raw: dict, concurrency: int, max_requests: int) -> dict:
    """wrk's counters in closed_loop's result shape."""
    seconds = raw["duration_us"] / 1e6
    errors = raw["errors"]
    bad_status = errors["status"]
    answered = raw["requests"] - bad_status
    degraded = raw.get("degraded", 0)
    ok = answered - degraded  # primary answers (scripts/drills/common.answer_kind)
    transport = {k: v for k, v in errors.items() if k != "status" and v}
    return {"concurrency": concurrency, "seconds": round(seconds, 2), "ok": ok,
            "texts_per_s": round(ok / max(seconds, 1e-9), 1),
            "latency_ms": {q: round(raw["latency_us"][q] / 1000, 3) for q in ("p50", "p90", "p99", "p99.9")},
            "latency_of": "every answer (wrk: degraded and failed included)" if degraded or bad_status or transport
            else "primary answers (every answer was one)",
            "degraded": degraded, "degraded_per_s": round(degraded / max(seconds, 1e-9), 1),
            "status": {"<400": answered, ">=400": bad_status}, "errors": transport,
            "non_200": bad_status + sum(transport.values()), "sent_total": raw["sent"],
            "capped": raw["sent"] > max_requests, "generator": "wrk"}


def closed_loop(requests: list[tuple[str, bytes]], concurrency: int, warmup_s: float, duration_s: float,
                max_requests: int, cpu: int | None = None) -> dict:
    """An unmeasured warm-up run (if warmup_s > 0), then the measured run; both with `concurrency` connections."""
    with tempfile.TemporaryDirectory(prefix="triserve-wrk-") as tmp:
        path = Path(tmp) / "requests.txt"
        base = _requests_file(requests, path)
        if warmup_s > 0:
            run_wrk(base, path, concurrency, warmup_s, max_requests, cpu)
        if duration_s <= 0:
            return {"concurrency": concurrency, "seconds": 0.0, "ok": 0, "texts_per_s": 0.0, "degraded": 0,
                    "generator": "wrk"}
        return summarise(run_wrk(base, path, concurrency, duration_s, max_requests, cpu), concurrency, max_requests)
