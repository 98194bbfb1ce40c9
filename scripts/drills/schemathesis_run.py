"""Drill: a larger schemathesis run against /openapi.json of a freshly started server.

    python -m scripts.drills.schemathesis_run [--registry models/store] [--max-examples 200] [--max-seconds 900]

Runs the schemathesis CLI (phases examples, coverage, fuzzing) on every POST under /v1/ and GET /v1/models, with the
checks of scripts/drills/api_checks.py (no 5xx; 2xx bodies match the documented schema; every 4xx body is the error
model), prints its summary (with a curl line for every failure) and saves it to docs/drills/schemathesis_run.json.
--url targets an already running loopback server instead of starting one. Bounded by --max-seconds (the CLI is
killed after it) and by --max-examples per operation.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from scripts.drills.api_checks import selected
from scripts.drills.common import assert_loopback, base_parser, log_path, save
from scripts.drills.server import ROOT, Server

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
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.max_seconds)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc = "timeout"
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
    return {"operations": names, "command": " ".join(cmd), "exit_code": rc,
            "seconds": round(time.monotonic() - started, 1), "output": out}


def main() -> None:
    ap = base_parser(__doc__, NAME)
    ap.add_argument("--url", default=None, help="an already running loopback server (default: start one)")
    ap.add_argument("--max-examples", type=int, default=200)
    ap.add_argument("--phases", default="examples,coverage,fuzzing")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--max-seconds", type=float, default=900, help="the CLI is killed after this")
    args = ap.parse_args()
    report = Path(tempfile.mkdtemp(prefix="triserve-st-")) / "report.json"
    if args.url:
        res = run_cli(args.url.rstrip("/"), args, report)
    else:
        log = log_path(args, NAME)
        with Server(args.registry, log_path=log) as srv:
            srv.wait_ready()
            res = run_cli(srv.url, args, report)
        res["server_log"] = str(log)
    print(res["output"])
    out = res.pop("output")
    summary = out[out.rfind("SUMMARY"):] if "SUMMARY" in out else out[-6000:]
    result = {"drill": NAME, "registry": str(args.registry), "max_examples": args.max_examples, **res,
              "summary": summary.splitlines(), "failures_text": out[:out.rfind("SUMMARY")][-20000:]
              if res["exit_code"] not in (0,) else None}
    if report.is_file():
        import json

        result["report"] = json.loads(report.read_text())
    print(f"schemathesis exit code {res['exit_code']} after {res['seconds']} s on {len(res['operations'])} "
          f"operations: {res['operations']}")
    save(result, args.out)
    sys.exit(0 if res["exit_code"] == 0 else 1)


if __name__ == "__main__":
    main()
