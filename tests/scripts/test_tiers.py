"""The tiers apart (scripts/tiers.py): two runner replicas behind haproxy, one gateway pointing at it by
BENTOML_SERVE_DEPENDS, on the tiny models. Requests through the gateway reach the runner tier (never a runner in the
gateway's own process), and when one runner replica dies under load every request still succeeds.

haproxy comes from Debian (`apt-get install haproxy`); .ci/run installs it, so in CI this test runs. Where it is
missing the live test skips with that reason; the static checks below never skip.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import http.server
import re
import socket
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from scripts.drills.loadgen import open_loop, phase
from scripts.drills.ports import ReservedPort
from scripts.tiers import (
    DEPENDS_ENV,
    Backend,
    BalancerConfig,
    HAProxy,
    ServiceExited,
    ServiceProcess,
    Tiers,
    TiersConfig,
    address_in_use,
    haproxy_binary,
    haproxy_config,
    subset_models_file,
)

ROOT = Path(__file__).resolve().parents[2]
needs_haproxy = pytest.mark.skipif(haproxy_binary() is None, reason="haproxy is not installed; install it with "
                                   "`apt-get install haproxy` (Debian; .ci/run does this)")
TEXTS = ["book a flight to paris", "what is my balance", "set a timer", "play some jazz", "tell me a joke"]


def test_ci_installs_haproxy():
    """The live test below must not silently skip in CI: .ci/run installs haproxy with the other system tools."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^system_tool haproxy >/dev/null \|\| missing\+=\(haproxy\)$", ci, re.M)


def test_haproxy_config_retries_connection_failures_and_checks_readiness(tmp_path):
    cfg = BalancerConfig()
    text = haproxy_config([Backend("runners", 4000, (("runner-1", 4001), ("runner-2", 4002)))], cfg, 4009)
    assert "bind 127.0.0.1:4000" in text and "bind 127.0.0.1:4009" in text
    assert re.search(r"^\s+bind (?!127\.0\.0\.1:)", text, re.M) is None  # loopback only
    assert "option httpchk GET /readyz" in text and "http-check expect status 200" in text
    assert "retry-on conn-failure empty-response junk-response" in text and "option redispatch 1" in text
    assert "server runner-1 127.0.0.1:4001 check" in text and "server runner-2 127.0.0.1:4002 check" in text
    binary = haproxy_binary()
    if binary is not None:  # haproxy's own parser accepts it
        import subprocess

        (tmp_path / "h.cfg").write_text(text)
        res = subprocess.run([binary, "-c", "-f", str(tmp_path / "h.cfg")], capture_output=True, text=True,
                             timeout=30)
        assert res.returncode == 0, res.stdout + res.stderr


class _SlowServer(http.server.BaseHTTPRequestHandler):
    """A stand-in gateway: /readyz 200 at once, anything else 200 after 0.5 s."""

    def do_GET(self):
        if self.path != "/readyz":
            time.sleep(0.5)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@needs_haproxy
def test_an_edge_limit_lets_maxconn_requests_through_and_refuses_the_rest_with_the_error_model(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    front = ReservedPort()  # held while haproxy binds and serves it (haproxy sets SO_REUSEADDR)
    backend = Backend("gateways", front.number, (("gateway-1", server.server_address[1]),), maxconn=2, queue_ms=50)
    proxy = HAProxy([backend], BalancerConfig(), tmp_path, tmp_path / "haproxy.log").start()
    try:
        proxy.wait_up("gateways", ["gateway-1"])
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda _: httpx.get(f"http://127.0.0.1:{backend.port}/v1/x", timeout=10),
                                    range(6)))
    finally:
        proxy.stop()
        front.release()
        server.shutdown()
    ok = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 503]
    assert len(ok) == 2 and len(refused) == 4  # two in flight; the rest waited 50 ms in haproxy's queue
    for a in refused:
        assert a.headers["retry-after"] == "1" and a.headers["content-type"] == "application/json"
        assert a.json()["error"]["code"] == "overloaded" and a.json()["error"]["details"]["reason"] == "edge_limit"


# A stand-in arbiter: each start appends a line to `starts`; the first `fail` starts exit 1 with `message` in the log
# (as BentoML's arbiter does when zmq cannot bind its circus endpoint), later ones spawn a "worker" (a child whose
# command line is a BentoML service worker's) and wait.
_ARBITER = """
import subprocess, sys, time
starts, fail, message = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(starts, "a") as f:
    f.write("start\\n")
if sum(1 for _ in open(starts)) <= fail:
    print(message, flush=True)
    sys.exit(1)
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "_bentoml_impl.worker.service",
                           "--service-name", "triserve-runner"])
time.sleep(60)
"""


class _FakeArbiter(ServiceProcess):
    def __init__(self, tmp_path: Path, fail: int, message: str):
        super().__init__("runner-x", "triserve-runner", 0, {}, tmp_path / "runner-x.log", tmp_path)
        self.args = [str(tmp_path / "starts"), str(fail), message]

    def command(self) -> list[str]:
        return [sys.executable, "-c", _ARBITER, *self.args]


EADDRINUSE_LOG = "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:45321')"


def test_address_in_use_reads_the_log_from_the_start_of_this_life(tmp_path):
    log = tmp_path / "a.log"
    assert not address_in_use(log)
    log.write_text(EADDRINUSE_LOG + "\n")
    size = log.stat().st_size
    assert address_in_use(log) and not address_in_use(log, size)  # an earlier life's failure is not this one's
    with open(log, "a") as f:
        f.write("OSError: [Errno 98] Address already in use\n")
    assert address_in_use(log, size)


def test_launch_starts_again_once_after_a_lost_circus_endpoint(tmp_path):
    p = _FakeArbiter(tmp_path, fail=1, message=EADDRINUSE_LOG)
    try:
        spawned = p.launch(timeout=30, retries=1)
        assert spawned > 0 and p.starts == 2 and p.bind_retries == 1 and p.alive()
        assert set(p.workers()) == {"triserve-runner"}
    finally:
        p.terminate(grace_s=1)  # SIGTERM reaches the fake arbiter only; its worker is killed by PID
    assert not p.alive() and p.pids() == []


def test_launch_gives_up_after_its_retries_and_never_retries_another_failure(tmp_path):
    always = _FakeArbiter(tmp_path / "a", fail=99, message=EADDRINUSE_LOG)
    with pytest.raises(ServiceExited, match="before it spawned a worker"):
        always.launch(timeout=30, retries=1)
    assert always.starts == 2 and always.bind_retries == 1  # bounded: 1 + retries starts
    other = _FakeArbiter(tmp_path / "b", fail=1, message="ValueError: no such deployment")
    with pytest.raises(ServiceExited):
        other.launch(timeout=30, retries=1)
    assert other.starts == 1 and other.bind_retries == 0


def test_subset_models_file(tmp_path):
    out = subset_models_file(ROOT / "configs" / "models.yaml", ["intent"], tmp_path / "m.yaml")
    import yaml

    raw = yaml.safe_load(out.read_text())
    assert [d["name"] for d in raw["deployments"]] == ["intent"] and raw["defaults"] == {"text": "intent"}
    with pytest.raises(ValueError, match="no deployment"):
        subset_models_file(ROOT / "configs" / "models.yaml", ["nope"], tmp_path / "m2.yaml")


@needs_haproxy
def test_split_tiers_survive_a_runner_replica_dying(tiny_registry, tmp_path):
    cfg = TiersConfig(registry_dir=tiny_registry.root, runners=2, gateways=1, deployments=("text",),
                      log_dir=tmp_path / "logs",
                      env={"TRISERVE_ACCESS__CAPACITY_LIMITS": "false", "TRISERVE_RUNNER__SPIN_WAIT": "false"})
    with Tiers(cfg) as tiers:
        # the gateway runs no runner of its own: its workers' runner map names the balancer (start() checked it)
        remote = tiers.check_remote()
        assert remote["gateway-1"]["runner_map"]["triserve-runner"] == tiers.runner_lb_url
        assert tiers.gateways[0].env[DEPENDS_ENV] == f"triserve-runner={tiers.runner_lb_url}"
        before = tiers.runner_batches()
        with httpx.Client(base_url=tiers.url, timeout=30) as client:
            for i in range(12):
                r = client.post("/v1/classify", json={"texts": [TEXTS[i % len(TEXTS)]], "top_k": 1})
                assert r.status_code == 200, r.text
        after = tiers.runner_batches()
        served = sum(after[n].get("text:items", 0) - before[n].get("text:items", 0) for n in after)
        assert served == 12  # every item was computed by a runner replica, none in the gateway

        # open-loop load through the gateway; SIGKILL runner-1 (arbiter and workers) in the middle of it
        victim = tiers.runners[0]
        t0 = time.monotonic()
        kill_at = {}

        async def scenario():
            bodies = [{"texts": [t], "top_k": 1} for t in TEXTS]
            load = asyncio.create_task(open_loop([tiers.url], "/v1/classify", bodies, rate=20, max_seconds=9,
                                                 max_requests=180, t0=t0))
            await asyncio.sleep(3)
            kill_at["t"] = time.monotonic() - t0
            await asyncio.to_thread(victim.kill)
            return await load

        res = asyncio.run(scenario())
        statuses = phase(res.rows, None, None)["status"]
        assert res.rows and statuses == {"200": len(res.rows)}, (statuses, tiers.describe()["logs"])
        after_kill = phase(res.rows, kill_at["t"], None)
        assert after_kill["requests"] >= 60 and after_kill["failed"] == 0
        servers = tiers.haproxy.servers(Tiers.RUNNER_BACKEND)
        assert servers["runner-1"]["status"].startswith("DOWN") and servers["runner-2"]["status"] == "UP"
        assert not victim.alive()


@needs_haproxy
def test_the_tiers_start_every_time_one_arbiter_at_a_time_on_held_ports(tiny_registry, tmp_path):
    """Issue 32: a runner replica once exited at start (zmq EADDRINUSE on BentoML's circus control endpoint, picked
    by bind(0), released, bound later, while the replicas started together). Start and stop the tiers twice in a
    row: every start is up; each process was started only after the one before had spawned its workers (its circus
    endpoints bound); every port of the tiers stays reserved while they run and is released by stop()."""
    for i in range(2):
        cfg = TiersConfig(registry_dir=tiny_registry.root, runners=2, gateways=1, deployments=("text",),
                          log_dir=tmp_path / f"logs-{i}", env={"TRISERVE_RUNNER__SPIN_WAIT": "false"})
        tiers = Tiers(cfg)
        held = tiers.ports.ports
        with tiers:
            order = [*tiers.runners, *tiers.gateways]
            assert all(p.spawned for p in order)
            for before, after in zip(order, order[1:]):
                assert after.started >= before.spawned, (before.name, after.name)
            # the runner balancer, 2 runners, the gateway and its gRPC port (haproxy holds its stats port itself)
            assert len(held) == 5 and {tiers.runner_lb_port, *(p.port for p in order)} <= set(held)
            for port in held:  # the tiers' ports: no bind(0) elsewhere on the host can be handed them
                with socket.socket() as s, pytest.raises(OSError):
                    s.bind(("127.0.0.1", port))
            r = httpx.post(tiers.url + "/v1/classify", json={"texts": [TEXTS[i]], "top_k": 1}, timeout=30)
            assert r.status_code == 200, r.text
            # between our own processes there is no race left; a port taken by a program outside the harness is
            # the only retried failure, bounded and logged
            assert all(n <= cfg.bind_retries for n in tiers.describe()["bind_retries"].values())
        assert tiers.ports.ports == [] and not any(p.alive() for p in order)
