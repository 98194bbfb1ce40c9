"""scripts/bench/grpc_loop.py: the closed loop counts primary, degraded and failed calls as wrk.summarise does, over
gRPC (typed and OIP answers) and HTTP, stays within its count bound, and refuses non-loopback targets."""
from __future__ import annotations

import asyncio
import itertools
import threading
from concurrent import futures

import grpc
import pytest

from scripts.bench import grpc_loop
from triserve.services.protocols.generated import triserve_pb2 as tpb

CLASSIFY = "/triserve.v1.Triserve/Classify"
INFER = "/inference.GRPCInferenceService/ModelInfer"


def verdict(n: int) -> str:
    """The n-th call's answer (1-based, in arrival order): every 5th fails, every 7th other one is degraded."""
    return "failed" if n % 5 == 0 else "degraded" if n % 7 == 0 else "ok"


def expected(calls: int) -> dict[str, int]:
    kinds = [verdict(n) for n in range(1, calls + 1)]
    return {k: kinds.count(k) for k in ("ok", "degraded", "failed")}


@pytest.fixture()
def fake_server():
    """A gRPC server on 127.0.0.1 answering the typed Classify and OIP ModelInfer with raw bytes, by verdict();
    yields (address, calls so far)."""
    from tritonclient.grpc import service_pb2 as tpb_oip  # the standard OIP messages (same wire format)

    counter = itertools.count(1)
    lock = threading.Lock()
    seen = {"calls": 0}

    def answer(degraded: bool, method: str) -> bytes:
        if method == "Classify":
            return tpb.ClassifyResponse(degraded=degraded).SerializeToString()
        out = tpb_oip.ModelInferResponse(model_name="classify")
        out.parameters["degraded"].bool_param = degraded
        return out.SerializeToString()

    def handler(method: str):
        def call(request: bytes, context) -> bytes:
            with lock:
                n = next(counter)
                seen["calls"] = n
            kind = verdict(n)
            if kind == "failed":
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy")
            return answer(kind == "degraded", method)
        return grpc.unary_unary_rpc_method_handler(call)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((
        grpc.method_handlers_generic_handler("triserve.v1.Triserve", {"Classify": handler("Classify")}),
        grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {"ModelInfer": handler("Infer")})))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", seen
    server.stop(grace=None)


async def _noop() -> None:
    return None


def test_grpc_window_counts_like_wrk(fake_server):
    address, seen = fake_server
    target = grpc_loop.Target("grpc", address, CLASSIFY, tpb.ClassifyRequest(texts=["hi"]).SerializeToString(),
                              "typed:Classify")
    cell = asyncio.run(grpc_loop._serve_windows(target, 4, 0, 30, 50, _noop))
    want = expected(50)
    assert seen["calls"] == cell["sent_total"] == 50 and cell["capped"]  # the count bound, before the time bound
    assert (cell["ok"], cell["degraded"], cell["non_200"]) == (want["ok"], want["degraded"], want["failed"])
    assert cell["errors"] == {"RESOURCE_EXHAUSTED": want["failed"]}
    assert cell["status"]["OK"] == want["ok"] + want["degraded"] and cell["latency_of"] == "primary answers"
    assert set(cell) >= {"concurrency", "seconds", "ok", "texts_per_s", "latency_ms", "degraded", "non_200",
                         "sent_total", "generator"}


def test_child_process_loop_reads_oip_answers_and_calls_start_before_the_window(fake_server):
    """The loop as cpu_split runs it: a child process (warm-up, READY, then the window once started)."""
    address, seen = fake_server
    started: list[int] = []
    target = grpc_loop.Target("grpc", address, INFER, b"", "oip")
    cell = grpc_loop.closed_loop(target, 2, 0.3, 30, 40, start=lambda: started.append(seen["calls"]))
    assert len(started) == 1 and cell["sent_total"] == 40
    first = started[0]  # the warm-up's calls came first: the window's verdicts follow on from them
    kinds = [verdict(n) for n in range(first + 1, first + 41)]
    assert (cell["ok"], cell["degraded"], cell["non_200"]) == (kinds.count("ok"), kinds.count("degraded"),
                                                               kinds.count("failed"))


def test_http_window_counts_statuses_and_degraded_bodies(json_server):
    calls = itertools.count(1)

    def answer(path: str, body: dict) -> tuple[int, dict, float]:
        n = next(calls)
        return (503, {"error": "busy"}, 0.0) if n % 5 == 0 else (200, {"degraded": n % 7 == 0}, 0.0)
    url = json_server(answer)
    target = grpc_loop.Target("http", url, "/v2/models/detect/infer", b"{}", "json",
                              {"Content-Type": "application/json"})
    cell = asyncio.run(grpc_loop._serve_windows(target, 3, 0, 30, 30, _noop))
    want = expected(30)
    assert (cell["ok"], cell["degraded"], cell["non_200"], cell["sent_total"]) == (
        want["ok"], want["degraded"], want["failed"], 30)
    assert cell["errors"] == {"503": want["failed"]} and cell["generator"] == "aiohttp"


def test_time_bound_stops_an_unbounded_count(fake_server):
    address, _ = fake_server
    target = grpc_loop.Target("grpc", address, CLASSIFY, b"", "typed:Classify")
    cell = asyncio.run(grpc_loop._serve_windows(target, 2, 0, 0.3, 10**9, _noop))
    assert 0 < cell["sent_total"] < 10**9 and not cell["capped"] and cell["seconds"] < 5


@pytest.mark.parametrize("target", [grpc_loop.Target("grpc", "10.1.2.3:3001", CLASSIFY, b"", "typed:Classify"),
                                    grpc_loop.Target("http", "http://example.com", "/v1/detect", b"{}", "json")])
def test_refuses_non_loopback_targets(target):
    with pytest.raises(SystemExit):
        grpc_loop.closed_loop(target, 1, 0, 1, 1)
