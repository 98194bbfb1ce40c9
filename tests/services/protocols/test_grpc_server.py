"""The gRPC listener owns its port (services/protocols/grpc_server.py): a second bind on a port in use is a start-up
error naming the port, whoever holds it, and nobody can join the port once ours listens (no SO_REUSEPORT); one API
worker serves gRPC. GrpcServer without a gateway (its health answers NOT_SERVING) on loopback ports, and one real
`bentoml serve` that stops in its arbiter, before any worker or model.

Like tests/services/test_protocols.py, this process must not import triserve.services.protocols.grpc_oip (grpc_server
imports it): tritonclient.grpc, imported by other test modules of the session, registers the same `inference.*`
protobuf names. GrpcServer runs in a child process (CHILD), which prints what it saw as JSON.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from scripts.drills.ports import ReservedPort
from tests.conftest import NO_CAPACITY_LIMITS, Server
from tests.services.test_ports import listening
from triserve.configs.settings import GrpcSettings
from triserve.services.ports import PortInUse, ensure_free, ensure_grpc_free

ROOT = Path(__file__).resolve().parents[3]
CHILD = textwrap.dedent("""
    import asyncio, json, os, sys
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from triserve.configs.settings import GrpcSettings
    from triserve.services.ports import PortInUse
    from triserve.services.protocols.grpc_server import GrpcServer, serves_grpc, start_grpc

    def on(port):
        return GrpcSettings(host="127.0.0.1", port=port, reflection=False, shutdown_grace_s=0)

    async def refusal(port, worker_index=None):
        # start_grpc's PortInUse message, or None when it started (then stopped: no server outlives its scenario)
        try:
            server = await start_grpc(None, on(port), worker_index)
        except PortInUse as exc:
            return str(exc)
        if server is not None:
            await server.stop()
        return None

    async def second(port):
        # a second server on the port of a running one, then a stranger with gRPC's default options
        first = GrpcServer(None, on(port))
        await first.start()
        try:
            refused = await refusal(port)
            stranger = grpc.aio.server()  # SO_REUSEPORT on: what let a second server join the old bind
            try:
                joined = stranger.add_insecure_port(f"127.0.0.1:{port}") != 0
            except RuntimeError:  # grpcio >= 1.50 raises on a failed bind
                joined = False
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
            return {"refused": refused, "joined": joined,
                    "health": health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)}
        finally:
            await first.stop()

    async def workers(port):
        # which worker indexes serve gRPC at once, without a claim
        return {"serves": [serves_grpc(on(port), i) for i in (None, 1, 2, 3)],
                "disabled": serves_grpc(on(port).model_copy(update={"enabled": False}), 1)}

    async def health(port):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
            except grpc.aio.AioRpcError as exc:
                return exc.code().name
        return health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)

    async def takeover(port):
        # two API workers of one arbiter: the first to claim serves, the other stands by; the first gone, the
        # standby serves within its poll. Another arbiter's worker claims its own name (and finds the port taken).
        cfg = on(port).model_copy(update={"standby_poll_s": 0.05})
        arbiter = os.getpid()
        first = await start_grpc(None, cfg, 1, arbiter_pid=arbiter)
        second = await start_grpc(None, cfg, 2, arbiter_pid=arbiter)
        seen = {"first_serves": first.server is not None, "second_serves": second.server is not None,
                "health": await health(port)}
        first.claim.release()  # what the kernel does when the serving worker dies ...
        await first.server.stop()  # ... and its port closes
        first.server = None
        loop = asyncio.get_running_loop()
        started = loop.time()
        while second.server is None and loop.time() - started < 5:
            await asyncio.sleep(0.01)
        seen.update(took_over_s=round(loop.time() - started, 3), health_after=await health(port),
                    first_claims_again=first.claim.try_take())
        await second.stop()
        seen["claim_free_after_stop"] = first.claim.try_take()
        first.claim.release()
        return seen

    async def in_a_worker(port):
        os.getppid = lambda: int(sys.argv[3])  # the test's stand-in for the arbiter
        return {"refused": await refusal(port, worker_index=1)}

    scenario, port = sys.argv[1], int(sys.argv[2])
    scenarios = {"second": second, "refusal": refusal, "workers": workers, "in_a_worker": in_a_worker,
                 "takeover": takeover}
    print(json.dumps(asyncio.run(scenarios[scenario](port))))
""")


def child(scenario: str, port: int, *args: int) -> dict | str | None:
    done = subprocess.run([sys.executable, "-c", CHILD, scenario, str(port), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_second_grpc_server_on_the_port_fails_naming_it_and_the_first_keeps_it():
    """What a second `triserve serve` with the same grpc.port used to do silently: take part of the connections."""
    with ReservedPort() as held:  # the harness's hold (bound, never listening) does not keep gRPC off it
        seen = child("second", held.number)
    assert isinstance(seen, dict) and seen["refused"] is not None, seen
    assert seen["refused"].startswith(f"gRPC port {held.number} on 127.0.0.1 is already in use")
    assert "TRISERVE_GRPC__PORT" in seen["refused"] and "--grpc-port" in seen["refused"]
    assert seen["health"] == "NOT_SERVING"  # the first still answers (no gateway: not ready)
    assert seen["joined"] is False


def test_a_port_another_process_shares_with_so_reuseport_is_refused_not_joined():
    """The old bind (and any grpcio server's default) sets SO_REUSEPORT, and Linux lets a same-user SO_REUSEPORT bind
    join it; ours sets none, so the kernel refuses it: in the arbiter's check and in the worker's bind alike."""
    with listening(reuseport=True) as other:
        port = other.getsockname()[1]
        cfg = GrpcSettings(host="127.0.0.1", port=port)
        with pytest.raises(PortInUse, match=f"gRPC port {port} "):
            ensure_grpc_free(cfg)
        ensure_grpc_free(cfg.model_copy(update={"enabled": False}))  # no gRPC, nothing to own
        refused = child("refusal", port)
    assert isinstance(refused, str) and refused.startswith(f"gRPC port {port} on 127.0.0.1 is already in use")


def test_only_a_process_that_is_no_bentoml_worker_serves_grpc_without_a_claim():
    with ReservedPort() as held:
        seen = child("workers", held.number)
        ensure_free("127.0.0.1", held.number, "gRPC")  # nothing listens there
    assert seen == {"serves": [True, False, False, False], "disabled": False}


def test_one_api_worker_serves_grpc_and_another_takes_it_over_when_it_is_gone():
    with ReservedPort() as held:
        seen = child("takeover", held.number)
        ensure_free("127.0.0.1", held.number, "gRPC")  # stopped: nothing listens there
    assert isinstance(seen, dict)
    assert (seen["first_serves"], seen["second_serves"], seen["health"]) == (True, False, "NOT_SERVING"), seen
    # served again (NOT_SERVING: no gateway, not ready)
    assert seen["took_over_s"] < 2 and seen["health_after"] == "NOT_SERVING", seen
    assert seen["first_claims_again"] is False  # the standby holds the claim now
    assert seen["claim_free_after_stop"] is True


def test_a_taken_port_in_an_api_worker_stops_its_server():
    """In a BentoML worker the failure also sends SIGTERM to the parent (the arbiter): circus would otherwise restart
    the worker, failing the same way, for ever. Here the 'arbiter' is a sleep of our own."""
    arbiter = subprocess.Popen(["sleep", "60"])
    try:
        with listening() as other:
            seen = child("in_a_worker", other.getsockname()[1], arbiter.pid)
        assert isinstance(seen, dict) and seen["refused"] is not None
        assert arbiter.wait(timeout=10) == -signal.SIGTERM
    finally:
        arbiter.kill()
        arbiter.wait()


def test_bentoml_serve_on_a_taken_grpc_port_stops_before_its_workers_naming_it(tmp_path):
    """However the server is started (the Bento's container runs `bentoml serve`, not `triserve serve`), the arbiter
    checks the port before any worker starts (Gateway._own_grpc_port) and BentoML prints the error as one line. The
    arbiter reads no model: the registry may be absent."""
    with listening() as other:
        port = other.getsockname()[1]
        srv = Server(tmp_path / "registry", env={"TRISERVE_GRPC__PORT": str(port)}, log_path=tmp_path / "serve.log")
        try:
            code = srv.proc.wait(timeout=120)
            workers = srv.workers()
        finally:
            srv.stop()
    log = (tmp_path / "serve.log").read_text()
    assert code == 1 and not workers, log[-2000:]
    assert (f"Error: [serve] `serve` failed: gRPC port {port} on 127.0.0.1 is already in use (another triserve, or "
            f"another server); give this server another one: grpc.port") in log, log[-2000:]


def _listening_on(pids: list[int], port: int) -> list[int]:
    return [pid for pid in pids if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port
                                       for c in psutil.Process(pid).net_connections(kind="tcp"))]


def test_a_served_grpc_port_outlives_the_api_worker_serving_it(tiny_registry, tmp_path):
    """A real `bentoml serve` with two API workers: SIGKILL the one serving gRPC and the other serves it within a
    second, long before the killed one is started again (~10 s here); a call made meanwhile with wait-for-ready is
    answered, not refused."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    env = {"TRISERVE_GATEWAY__WORKERS": "2", **NO_CAPACITY_LIMITS}
    with Server(tiny_registry.root, env=env, log_path=tmp_path / "serve.log") as srv:
        srv.wait_ready()
        workers = srv.entry_pids()
        serving = _listening_on(workers, srv.grpc_port)
        assert len(workers) == 2 and len(serving) == 1, (workers, serving)
        os.kill(serving[0], signal.SIGKILL)
        started = time.monotonic()
        with grpc.insecure_channel(srv.grpc_target) as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10,
                                                               wait_for_ready=True)
        took = time.monotonic() - started
        standby = [pid for pid in workers if pid != serving[0]]
        assert _listening_on(standby, srv.grpc_port) == standby  # the standby, not the killed worker started again
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        assert took < 3, took
