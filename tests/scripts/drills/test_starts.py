"""The drills' start checks (scripts/drills/starts.py) without a real server: the loop counts every start, failed or
not, and the bind retries the harness marked in the logs; the answer check refuses wrong answers; Server starts again
after a lost bind only, on its held ports; every drill that starts servers has a start phase."""
from __future__ import annotations

import argparse
import contextlib
import http.server
import importlib
import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from scripts.drills import overload, starts
from scripts.drills.ports import BIND_RETRY_MARK
from scripts.drills.server import ROOT, Server
from scripts.drills.starts import Attempt, StartCheckFailed, check_answer, run_starts

DRILLS_DIR = Path(starts.__file__).parent
EADDRINUSE = "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:45321')"


def _quiet(text: str) -> None:
    pass


# --------------------------------------------------------------------------------------------------- the loop

def test_a_start_that_fails_once_is_counted_and_the_next_starts_still_run(tmp_path):
    seen: list[int] = []

    def once(attempt: Attempt) -> None:
        seen.append(attempt.number)
        attempt.ready_s["serve"] = 1.5
        if attempt.number == 2:
            attempt.log("serve").write_text("Traceback (most recent call last):\nRuntimeError: boom\n")
            raise RuntimeError("server exited with 1; log: serve.log")
        attempt.checks.append("POST /v1/classify -> 200")

    res = run_starts("fake", 5, once, tmp_path, say=_quiet)
    assert seen == [1, 2, 3, 4, 5]
    assert (res["times"], res["started"], res["failed"], res["bind_retries"]) == (5, 4, 1, 0)
    assert res["failures"] == [{"start": 2, "error": "RuntimeError: server exited with 1; log: serve.log",
                                "address_in_use": False}]
    failed = res["starts"][1]
    assert not failed["ok"] and failed["log_tails"] == {"serve.log": ["Traceback (most recent call last):",
                                                                        "RuntimeError: boom"]}
    assert [r["ok"] for r in res["starts"]] == [True, False, True, True, True]
    assert res["starts"][0]["checks"] == ["POST /v1/classify -> 200"] and res["starts"][0]["ready_s"] == {"serve": 1.5}
    assert res["seconds_per_start"]["of"] == "successful starts"


def test_bind_retries_are_counted_from_the_marks_in_every_log_of_a_start(tmp_path):
    def once(attempt: Attempt) -> None:
        if attempt.number == 1:  # one server of the start lost a bind, was started again and came up
            attempt.log("serve").write_text(f"{EADDRINUSE}\n{BIND_RETRY_MARK} server ... starting it again\nup\n")
        if attempt.number == 2:  # two processes of a tiers start, in a subdirectory, each retried; then it failed
            (attempt.log_dir / "tiers").mkdir()
            for name in ("runner-1", "gateway-1"):
                (attempt.log_dir / "tiers" / f"{name}.log").write_text(f"{EADDRINUSE}\n{BIND_RETRY_MARK} again\n")
            raise RuntimeError("gateway-1 exited")

    res = run_starts("fake", 3, once, tmp_path, say=_quiet)
    assert [r["bind_retries"] for r in res["starts"]] == [1, 2, 0]
    assert res["bind_retries"] == 3 and res["started"] == 2
    assert res["failures"] == [{"start": 2, "error": "RuntimeError: gateway-1 exited", "address_in_use": True}]


def test_each_start_gets_a_fresh_log_dir(tmp_path):
    stale = tmp_path / "start-1" / "serve.log"
    stale.parent.mkdir(parents=True)
    stale.write_text(f"{BIND_RETRY_MARK} from an earlier run\n")
    dirs = []
    res = run_starts("fake", 2, lambda a: dirs.append(a.log_dir), tmp_path, say=_quiet)
    assert dirs == [tmp_path / "start-1", tmp_path / "start-2"] and all(d.is_dir() for d in dirs)
    assert not stale.exists() and res["bind_retries"] == 0


def test_a_keyboard_interrupt_is_not_a_start_failure(tmp_path):
    def once(attempt: Attempt) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_starts("fake", 3, once, tmp_path, say=_quiet)


def test_starts_of_tells_a_missing_prerequisite_and_a_failed_preparation_apart(tmp_path):
    @contextlib.contextmanager
    def unavailable(args):
        raise starts.Unavailable("haproxy is not installed")
        yield

    @contextlib.contextmanager
    def broken(args):
        raise OSError("no space left on device")
        yield

    args = argparse.Namespace()
    assert starts.starts_of("a", args, unavailable, 5, tmp_path) == {"drill": "a",
                                                                     "not_run": "haproxy is not installed"}
    res = starts.starts_of("b", args, broken, 5, tmp_path)
    assert res["started"] == 0 and res["failed"] == 5 and res["error"] == "OSError: no space left on device"
    md = starts.to_markdown({"started_utc": "now", "command": "python -m scripts.drills.starts", "host": "2 CPUs",
                             "what": {}, "no_server": starts.NO_SERVER,
                             "drills": {"a": {"drill": "a", "not_run": "haproxy is not installed"}, "b": res,
                                        "c": starts.summarise("c", 2, [
                                            {"start": 1, "ok": True, "seconds": 3.0, "ready_s": {}, "checks": ["x"],
                                             "bind_retries": 1},
                                            {"start": 2, "ok": False, "seconds": 1.0, "ready_s": {}, "checks": [],
                                             "bind_retries": 0, "error": "RuntimeError: exited",
                                             "address_in_use": True}])}})
    assert "| a |  | not run | haproxy is not installed |" in md
    assert "| b |  | 0 / 5 | preparation failed: OSError: no space left on device |" in md
    assert "| c |  | 1 / 2 | start 2: RuntimeError: exited (EADDRINUSE in a log) | 1 | 3.0 [3.0-3.0] |" in md


# ------------------------------------------------------------------------------------------ the answer check

class _Answers(http.server.BaseHTTPRequestHandler):
    """POST <path>: the JSON body and status registered for that path."""

    routes: dict[str, tuple[int, dict]] = {}

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, body = self.routes[self.path]
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture()
def answers():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Answers.routes
    finally:
        server.shutdown()
        server.server_close()


def test_check_answer_wants_one_result_per_input_from_the_primary(answers):
    url, routes = answers
    two = {"texts": ["a", "b"], "top_k": 1}
    routes["/ok"] = (200, {"results": [{"label": "x"}, {"label": "y"}], "degraded": False, "model": {"name": "m"}})
    assert check_answer(url, "/ok", two) == "POST /ok -> 200 (m)"
    routes["/short"] = (200, {"results": [{"label": "x"}], "degraded": False})
    with pytest.raises(StartCheckFailed, match="2 inputs sent, answer has 1 results"):
        check_answer(url, "/short", two)
    routes["/fallback"] = (200, {"results": [{"label": "x"}, {"label": "y"}], "degraded": True})
    with pytest.raises(StartCheckFailed, match="fallback"):
        check_answer(url, "/fallback", two)
    assert check_answer(url, "/fallback", two, primary=False) == "POST /fallback -> 200"
    routes["/busy"] = (503, {"error": {"code": "not_ready", "message": "service is not ready"}})
    with pytest.raises(StartCheckFailed, match="answered 503, expected 200"):
        check_answer(url, "/busy", two)
    assert check_answer(url, "/busy", two, want=503) == "POST /busy -> 503 not_ready"
    routes["/bare"] = (503, {"detail": "oops"})
    with pytest.raises(StartCheckFailed, match="without the error model"):
        check_answer(url, "/bare", two, want=503)


# ------------------------------------------------------------------------------ Server: a lost bind, retried

_FAKE_SERVE = r'''
import http.server, pathlib, sys
marker, fail, message = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
port = int(sys.argv[sys.argv.index("--port") + 1])
lives = int(marker.read_text()) if marker.exists() else 0
marker.write_text(str(lives + 1))
if lives < fail:
    print(message, flush=True)
    sys.exit(1)
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Ready).serve_forever()  # SO_REUSEADDR: binds the held port
'''


def _fake_server(tmp_path: Path, fail: int, message: str = EADDRINUSE) -> Server:
    return Server(tmp_path, log_path=tmp_path / "serve.log",
                  command=[sys.executable, "-c", _FAKE_SERVE, str(tmp_path / "lives"), str(fail), message])


def test_server_starts_again_on_its_held_port_after_a_lost_bind(tmp_path):
    with _fake_server(tmp_path, fail=1) as srv:
        port = srv.port
        assert srv.wait_ready(timeout=30) > 0
        assert srv.bind_retries == 1 and (tmp_path / "lives").read_text() == "2" and srv.port == port
        log = (tmp_path / "serve.log").read_text()
        assert EADDRINUSE in log and log.count(BIND_RETRY_MARK) == 1
    assert srv.ports.ports == []


def test_server_gives_up_after_its_retries_and_never_retries_another_failure(tmp_path):
    (tmp_path / "a").mkdir()
    with _fake_server(tmp_path / "a", fail=99) as always, pytest.raises(RuntimeError, match="server exited with 1"):
        always.wait_ready(timeout=30)
    assert always.bind_retries == 1 and (tmp_path / "a" / "lives").read_text() == "2"  # bounded: 1 + 1 starts
    (tmp_path / "b").mkdir()
    with _fake_server(tmp_path / "b", fail=1, message="ValueError: no such deployment") as other, \
            pytest.raises(RuntimeError, match="server exited with 1"):
        other.wait_listening(timeout=30)
    assert other.bind_retries == 0 and (tmp_path / "b" / "lives").read_text() == "1"


# ---------------------------------------------------------------------------------------- the drills' phases

def test_every_drill_that_starts_a_server_has_a_start_phase_and_the_others_are_named():
    """A drill module that constructs Server or Tiers is in starts.DRILLS (and has parse_args, STARTS and
    start_phase, and takes --starts); every other drill module is in NO_SERVER with its reason."""
    modules = {p.stem for p in DRILLS_DIR.glob("*.py")} - {"__init__", "common", "server", "ports", "starts",
                                                           "loadgen"}
    starting = {m for m in modules if re.search(r"\b(Server|Tiers)\(", (DRILLS_DIR / f"{m}.py").read_text())}
    assert starting == set(starts.DRILLS)
    assert modules - starting == set(starts.NO_SERVER)
    for name in starts.DRILLS:
        mod = importlib.import_module(f"scripts.drills.{name}")
        args = mod.parse_args(["--registry", "/nowhere", "--starts", "3"])
        assert args.starts == 3 and str(args.registry) == "/nowhere", name
        assert mod.parse_args(["--registry", "/nowhere"]).starts == 0, name
        assert isinstance(mod.STARTS, str) and mod.STARTS and callable(mod.start_phase), name


def test_overload_starts_its_servers_in_the_drills_mode_order():
    assert overload.mode_order(["off", "on"], 3) == [(0, "off"), (0, "on"), (1, "on"), (1, "off"), (2, "off"),
                                                     (2, "on")]
    args = overload.parse_args(["--env", "A=1", "--pin"])
    assert overload.server_env(args) == {**overload.DEFAULT_ENV, "TRISERVE_RUNNER__INTRA_OP_THREADS": "1", "A": "1"}
    assert overload.server_env(overload.parse_args(["--no-default-env"])) == {}


def test_the_starts_cli_refuses_a_drill_that_starts_no_server(capsys):
    with pytest.raises(SystemExit):
        starts.main(["--drills", "batch_resume"])
    assert "not a drill that starts servers" in capsys.readouterr().err


def test_the_starts_cli_reports_a_drill_it_cannot_run_and_writes_both_files(tmp_path):
    """Through `python -m` (where starts.py is __main__ and the drills import it again by name): side_by_side without
    its trained text model or with an empty registry is not run, with the reason; no server is started."""
    out = tmp_path / "starts.json"
    res = subprocess.run([sys.executable, "-m", "scripts.drills.starts", "--times", "2", "--drills", "side_by_side",
                          "--registry", str(tmp_path), "--out", str(out), "--log-dir", str(tmp_path / "logs")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    result = json.loads(out.read_text())
    assert "not_run" in result["drills"]["side_by_side"], result["drills"]
    assert result["command"].startswith("python -m scripts.drills.starts --times 2 --drills side_by_side")
    assert "| side_by_side |" in out.with_suffix(".md").read_text() and "not run" in out.with_suffix(".md").read_text()
    assert str(ROOT) + "/" not in out.read_text() + out.with_suffix(".md").read_text()  # paths relative to the checkout
