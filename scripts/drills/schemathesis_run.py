"""Drill: a larger schemathesis run against /openapi.json of a freshly started server.

    python -m scripts.drills.schemathesis_run [--registry models/store] [--max-examples 200] [--max-seconds 900]

Runs the schemathesis CLI (phases examples, coverage, fuzzing) on every POST under /v1/ and GET /v1/models, with the
checks of scripts/drills/api_checks.py (no 5xx; 2xx bodies match the documented schema; every 4xx body is the error
model), prints its summary (with a curl line for every failure) and saves it to docs/drills/schemathesis_run.json.

Then a 'valid data' phase (--valid-examples per POST operation, 0 to skip): schema-only generation almost never passes
the semantic limits (36+ forecast points, decodable images), so Hypothesis strategies here build requests that do -
real images of random size/format/mode, series with gaps, duplicates, offsets, every frequency - and each goes
through schemathesis' Case with the same checks. An operation whose 2xx schema check fails is run again without that
check, so a schema mismatch cannot hide a 5xx.
--url targets an already running loopback server instead of starting one. Bounded by --max-seconds (the CLI is
killed after it) and by --max-examples per operation.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import httpx

from scripts.drills.api_checks import selected
from scripts.drills.common import assert_loopback, base_parser, log_path, save
from scripts.drills.server import ROOT, Server
from scripts.drills.starts import Attempt, StartCheckFailed, StartOnce, check_answer, drill_main, serve_once

NAME = "schemathesis_run"
CHECKS = "not_a_server_error,schema_conformance_2xx,error_model_on_4xx"


def operations(url: str) -> list[str]:
    spec = httpx.get(f"{url}/openapi.json", timeout=10).json()
    return [f"{method.upper()} {path}" for path, item in spec["paths"].items() for method in item
            if selected(method, path)]


def run_cli(url: str, args, report: Path) -> dict:
    assert_loopback(url)
    names = operations(url)
    cmd = [sys.executable, "-m", "schemathesis.cli", "run", f"{url}/openapi.json", "--checks", CHECKS,
           "--max-examples", str(args.max_examples), "--phases", args.phases, "--seed", str(args.seed),
           "--workers", str(args.workers), "--request-timeout", "30", "--report", "json",
           "--report-json-path", str(report), "--suppress-health-check", "all"]
    for name in names:
        cmd += ["--include-name", name]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "scripts.drills.api_checks", "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    rc: int | str  # the exit code, or "timeout"
    try:
        # cwd: the CLI keeps a .schemathesis/ cache in its working directory; keep it out of the repository
        proc = subprocess.run(cmd, cwd=report.parent, env=env, capture_output=True, text=True,
                              timeout=args.max_seconds)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc = "timeout"
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
    return {"operations": names, "command": " ".join(cmd), "exit_code": rc,
            "seconds": round(time.monotonic() - started, 1), "output": out}


# -- valid-data phase ------------------------------------------------------------------------------------------
def _strategies():
    import base64
    import io
    from datetime import timedelta, timezone

    import numpy as np
    from hypothesis import strategies as st
    from PIL import Image

    @st.composite
    def image(draw) -> bytes:
        w, h = draw(st.integers(1, 900)), draw(st.integers(1, 900))
        fmt = draw(st.sampled_from(["PNG", "JPEG", "WEBP", "BMP", "GIF", "TIFF"]))
        mode = draw(st.sampled_from(["RGB", "L", "RGBA", "P", "1", "I;16"] if fmt in ("PNG", "TIFF") else
                                    ["RGB", "L"]))
        seed = draw(st.integers(0, 2**31))
        arr = np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8)
        img = Image.fromarray(arr)
        try:
            img = img.convert(mode)
        except ValueError:
            pass
        buf = io.BytesIO()
        try:
            img.save(buf, fmt)
        except OSError:
            buf = io.BytesIO()
            img.convert("RGB").save(buf, fmt)
        return buf.getvalue()

    options = st.fixed_dictionaries({}, optional={
        "conf_threshold": st.floats(0, 1), "iou_threshold": st.floats(0, 1),
        "max_detections": st.integers(1, 2000), "class_aware": st.booleans(),
        "model": st.sampled_from(["auto", "primary", "fallback"])})
    detect = st.tuples(st.lists(image(), min_size=1, max_size=3), options, st.booleans()).map(
        lambda t: {**t[1], "images": [{"data": ("data:image/x;base64," if t[2] else "") +
                                       base64.b64encode(b).decode()} for b in t[0]]})
    upload = st.tuples(st.lists(image(), min_size=1, max_size=3), options).map(
        lambda t: {**{k: v for k, v in t[1].items()}, "images": t[0]})
    text = st.fixed_dictionaries({"texts": st.lists(st.text(min_size=1, max_size=300), min_size=1, max_size=70)},
                                 optional={"top_k": st.integers(1, 12),
                                           "model": st.sampled_from(["auto", "primary", "fallback"])})
    tz = st.sampled_from([None, UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))])
    when = st.datetimes(min_value=__import__("datetime").datetime(1900, 1, 1),
                        max_value=__import__("datetime").datetime(2200, 1, 1), timezones=tz)
    freq = st.sampled_from(["YS", "QS", "MS", "W", "D", "h", "30min", "15min", "min"])

    wild = st.lists(st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False), min_size=30, max_size=400)

    @st.composite
    def realistic(draw) -> list[float]:
        """A level (any magnitude) with a seasonal wave and noise: what a real series looks like."""
        n = draw(st.integers(30, 400))
        level = draw(st.floats(-1e4, 1e4, allow_nan=False))
        amp = draw(st.floats(0, 0.2)) * (abs(level) + 1)
        rng = np.random.default_rng(draw(st.integers(0, 2**31)))
        t = np.arange(n)
        y = level + amp * np.sin(t * 2 * np.pi / 12) + rng.normal(0, amp / 10 + 1e-3, n) + draw(st.floats(-1, 1)) * t
        return [round(float(v), 4) for v in y]

    @st.composite
    def forecast(draw, series) -> dict:
        values = draw(series)
        n = len(values)
        for i in draw(st.lists(st.integers(0, n - 1), max_size=max(1, n // 8))):
            values[i] = None  # a few gaps (mostly under the 20% imputation limit)
        body = {"frequency": draw(freq), "horizon": draw(st.integers(1, 6))}
        if draw(st.booleans()):
            body["start"] = draw(when).isoformat()
        else:
            start = draw(when)
            step = {"YS": timedelta(days=365.25), "QS": timedelta(days=91.3), "MS": timedelta(days=30.5),
                    "W": timedelta(weeks=1), "D": timedelta(days=1), "h": timedelta(hours=1),
                    "30min": timedelta(minutes=30), "15min": timedelta(minutes=15),
                    "min": timedelta(minutes=1)}[body["frequency"]]
            jitter = draw(st.lists(st.integers(-2, 2), min_size=n, max_size=n))
            stamps = [(start + step * (i + j * 0.1)).isoformat() for i, j in enumerate(jitter)]
            if draw(st.booleans()):
                stamps = draw(st.permutations(stamps))
            body["timestamps"] = stamps
        body["values"] = values
        if draw(st.booleans()):
            body["model"] = draw(st.sampled_from(["auto", "primary", "fallback"]))
        return body

    return {"POST /v1/detect": (detect, "application/json"), "POST /v1/detect/upload": (upload, "multipart/form-data"),
            "POST /v1/classify": (text, "application/json"),
            "POST /v1/forecast": (forecast(realistic()), "application/json"),
            "POST /v1/forecast (wild values)": (forecast(wild),
                                                "application/json")}


def valid_phase(url: str, examples: int, seed: int) -> dict:
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from schemathesis.core.result import Err

    from scripts.drills.api_checks import CHECKS, error_model_on_4xx

    assert_loopback(url)
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    ops = {}
    for result in schema.get_all_operations():
        if isinstance(result, Err):  # an operation schemathesis cannot read: its reason, not an AttributeError
            raise result.err()
        operation = result.ok()
        ops[f"{operation.method.upper()} {operation.path}"] = operation
    def fuzz(op: Any, media_type: str, strategy: Any, checks: list, statuses: dict[str, int]) -> Callable[[], None]:
        """One hypothesis run of `op` with bodies from `strategy`, counting answers by status (+ error code) into
        `statuses` (what it closes over is bound here, per operation and check set)."""

        @hseed(seed)
        @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck),
                  phases=[Phase.generate, Phase.shrink])
        @given(body=strategy)
        def run(body: Any) -> None:
            response = op.Case(body=body, media_type=media_type).call_and_validate(
                base_url=url, checks=checks, timeout=60)
            key = str(response.status_code)
            if response.status_code >= 400:
                try:
                    key += ":" + json.loads(response.content)["error"]["code"]
                except (ValueError, KeyError, TypeError):
                    pass
            statuses[key] = statuses.get(key, 0) + 1

        return run

    out: dict[str, Any] = {}
    for label, (strategy, media_type) in _strategies().items():
        op = ops.get(label.split(" (")[0])
        if op is None:
            out[label] = {"error": "not in /openapi.json"}
            continue
        runs = []
        for checks, name in ((CHECKS, "all checks"),
                             ([schemathesis.checks.not_a_server_error, error_model_on_4xx], "without 2xx schema")):
            statuses: dict[str, int] = {}
            failure = None
            run = fuzz(op, media_type, strategy, checks, statuses)
            started = time.monotonic()
            try:
                run()
            except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001  # FailureGroup is a BaseExceptionGroup
                failure = str(exc)[:6000]
            runs.append({"checks": name, "statuses": dict(sorted(statuses.items())), "failed": failure is not None,
                         "failure": failure, "seconds": round(time.monotonic() - started, 1)})
            if failure is None or "Response violates schema" not in failure:
                break
        out[label] = runs
    return out


STARTS = "one `bentoml serve` with the default settings"


@contextlib.contextmanager
def start_phase(args) -> Iterator[StartOnce]:
    """The drill's server, ready; the operations under test read from its /openapi.json, and one of them called."""
    def once(attempt: Attempt) -> None:
        def check(srv: Server) -> list[str]:
            names = operations(srv.url)
            if "POST /v1/classify" not in names:
                raise StartCheckFailed(f"/openapi.json lists no POST /v1/classify among {names}")
            return [f"GET /openapi.json -> {len(names)} operations under test",
                    check_answer(srv.url, "/v1/classify", {"texts": ["play some jazz"], "top_k": 1})]

        serve_once(attempt, args.registry, {}, "serve", check)

    yield once


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = base_parser(__doc__, NAME)
    ap.add_argument("--url", default=None, help="an already running loopback server (default: start one)")
    ap.add_argument("--max-examples", type=int, default=200)
    ap.add_argument("--phases", default="examples,coverage,fuzzing")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--max-seconds", type=float, default=900, help="the CLI is killed after this")
    ap.add_argument("--valid-examples", type=int, default=60, help="valid-data cases per POST operation (0: skip)")
    return ap.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.starts:
        drill_main(NAME, args, start_phase)
        return
    report = Path(tempfile.mkdtemp(prefix="triserve-st-")) / "report.json"
    valid = None
    if args.url:
        res = run_cli(args.url.rstrip("/"), args, report)
        print(res["output"], flush=True)
        if args.valid_examples > 0:
            valid = valid_phase(args.url.rstrip("/"), min(args.valid_examples, 1000), args.seed)
    else:
        log = log_path(args, NAME)
        with Server(args.registry, log_path=log) as srv:
            srv.wait_ready()
            res = run_cli(srv.url, args, report)
            print(res["output"], flush=True)
            if args.valid_examples > 0:
                valid = valid_phase(srv.url, min(args.valid_examples, 1000), args.seed)
        res["server_log"] = str(log)
    out = res.pop("output")
    summary = out[out.rfind("SUMMARY"):] if "SUMMARY" in out else out[-6000:]
    result = {"drill": NAME, "registry": str(args.registry), "max_examples": args.max_examples, **res,
              "summary": summary.splitlines(), "failures_text": out[:out.rfind("SUMMARY")][-20000:]
              if res["exit_code"] not in (0,) else None}
    if report.is_file():
        result["report"] = json.loads(report.read_text())
    result["valid_data_phase"] = valid
    print(f"schemathesis CLI exit code {res['exit_code']} after {res['seconds']} s on {len(res['operations'])} "
          f"operations: {res['operations']}")
    failed = False
    if valid is not None:
        print(f"valid-data phase ({args.valid_examples} cases per POST operation, same checks):")
        for label, runs in valid.items():
            if isinstance(runs, dict):
                print(f"  {label}: {runs['error']}")
                failed = True
                continue
            for r in runs:
                failed |= r["failed"]
                print(f"  {label} [{r['checks']}]: statuses {r['statuses']} in {r['seconds']} s -> "
                      f"{'FAILED' if r['failed'] else 'ok'}")
                if r["failed"]:
                    print("    " + "\n    ".join(r["failure"].splitlines()[:40]))
    save(result, args.out)
    sys.exit(0 if res["exit_code"] == 0 and not failed else 1)


if __name__ == "__main__":
    main()
