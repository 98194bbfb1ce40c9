"""gRPC health agrees with /readyz at every moment (what a Kubernetes gRPC probe and `make smoke-image` read): Check
asks the gateway's readiness when it is called, so no probe sees /readyz 200 and NOT_SERVING together."""
from __future__ import annotations

import time

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import NO_CAPACITY_LIMITS, Server


def test_grpc_health_matches_readyz_while_loading_and_the_moment_it_turns_ready(tiny_registry, tmp_path):
    srv = Server(tiny_registry.root, env={**NO_CAPACITY_LIMITS, "TRISERVE_RUNNER__STARTUP_DELAY_S": "6",
                                          "TRISERVE_GRPC__HEALTH_INTERVAL_S": "30"},  # the watcher cannot help
                 log_path=tmp_path / "health.log")
    seen = []
    try:
        deadline = time.monotonic() + 150
        with grpc.insecure_channel(srv.grpc_target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                try:
                    ready = httpx.get(f"{srv.url}/readyz", timeout=5).status_code
                    status = stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status
                except (httpx.HTTPError, grpc.RpcError):
                    time.sleep(0.2)
                    continue
                seen.append((ready, health_pb2.HealthCheckResponse.ServingStatus.Name(status)))
                if ready == 200:
                    break
                time.sleep(0.3)
        assert seen and seen[-1] == (200, "SERVING"), seen[-5:]
        assert (503, "NOT_SERVING") in seen, seen[:5]  # observed while the runner was still loading
        # /readyz is asked first, then Check: readiness only grows while starting, so a 200 followed by NOT_SERVING
        # is the disagreement (503 then SERVING is the runner turning ready between the two calls)
        assert (200, "NOT_SERVING") not in seen, seen
    finally:
        srv.stop()
