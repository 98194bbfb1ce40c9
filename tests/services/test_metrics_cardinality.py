"""/metrics cannot be grown by callers (issue 43): on a real `bentoml serve`, 10,000 HTTP requests with invented paths,
deployment names, model names and versions (refused: 401, 404, 415) and 1,000 typed gRPC calls naming
invented deployments leave the set of series as it was, and no label value carries what a caller sent. The process
and Python collectors are there too."""
from __future__ import annotations

import asyncio
import re

import grpc
import httpx
import psutil
import pytest

from tests.conftest import NO_CAPACITY_LIMITS, Server
from triserve.services.protocols.generated import triserve_pb2 as tpb
from triserve.services.protocols.generated import triserve_pb2_grpc as tpb_grpc

JUNK_REQUESTS = 2_000  # distinct junk names: a series per name would show at any count
JUNK_GRPC_CALLS = 300
CONCURRENCY = 8
# the request rate of this test would meet the per-client limit (429s: a status, so a series, that only appears
# under load); everything else is the default configuration
ENV = {**NO_CAPACITY_LIMITS, "TRISERVE_ACCESS__RATE_PER_S": "1000000"}
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? ")


@pytest.fixture(scope="module")
def junk_server(tiny_registry, tmp_path_factory):
    with Server(tiny_registry.root, env=ENV, log_path=tmp_path_factory.mktemp("logs") / "serve.log") as srv:
        srv.wait_ready()
        yield srv


def junk_request(i: int) -> tuple[str, str, dict]:
    """One of ten kinds of refused request, each naming a path segment, deployment, model or version never seen."""
    junk = f"junk{i}z"
    kind = i % 10
    if kind == 0:
        return "GET", f"/{junk}/{junk}", {}
    if kind == 1:
        return "GET", f"/__dict__/{junk}/load", {}
    if kind == 2:
        return "POST", f"/admin/deployments/{junk}/load", {}
    if kind == 3:
        return "PUT", f"/admin/deployments/{junk}", {"json": {"family": "text"}}
    if kind == 4:
        return "POST", f"/v2/models/{junk}/infer", {"json": {"inputs": []}}
    if kind == 5:
        return "GET", f"/v2/models/{junk}/versions/{junk}/stats", {}
    if kind == 6:
        return "POST", "/v1/classify", {"json": {"texts": ["hello"], "deployment": junk}}
    if kind == 7:
        return "POST", "/v1/classify", {"content": junk, "headers": {"content-type": f"text/{junk}"}}
    if kind == 8:
        return "DELETE", f"/admin/rollout/{junk}/canary", {}
    return "POST", f"/v1/{junk}", {"json": {}}


async def send_junk(url: str, indices: range) -> dict[int, int]:
    """Send the requests (CONCURRENCY at a time); statuses seen and how often."""
    statuses: dict[int, int] = {}
    queue = iter(indices)
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        async def worker() -> None:
            for i in queue:
                method, path, kwargs = junk_request(i)
                resp = await client.request(method, path, **kwargs)
                statuses[resp.status_code] = statuses.get(resp.status_code, 0) + 1

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return statuses


def send_junk_grpc(target: str, indices: range) -> dict[str, int]:
    """Typed gRPC Classify calls naming deployments that do not exist; status codes seen and how often."""
    codes: dict[str, int] = {}
    with grpc.insecure_channel(target) as channel:
        stub = tpb_grpc.TriserveStub(channel)
        for i in indices:
            try:
                stub.Classify(tpb.ClassifyRequest(texts=["hello"], deployment=f"junk{i}z"), timeout=10)
                code = "OK"
            except grpc.RpcError as err:
                code = err.code().name
            codes[code] = codes.get(code, 0) + 1
    return codes


def server_threads(server: Server) -> int:
    """Threads of every process of the server (arbiter, API and runner workers)."""
    root = psutil.Process(server.proc.pid)
    return sum(p.num_threads() for p in [root, *root.children(recursive=True)])


def series(url: str) -> set[str]:
    """Every series /metrics exports: name and labels."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {m.group(1) + (m.group(2) or "") for line in text.splitlines() if (m := SAMPLE.match(line))}


def test_junk_paths_and_names_add_no_series(junk_server):
    # every kind of refusal once, twice, so that each (route template, status) series exists
    warmup = asyncio.run(send_junk(junk_server.url, range(20)))
    assert set(warmup) <= {401, 404, 405, 415, 422}, warmup
    grpc_warmup = send_junk_grpc(junk_server.grpc_target, range(2))
    assert set(grpc_warmup) == {"NOT_FOUND"}, grpc_warmup
    before = series(junk_server.url)
    threads_before = server_threads(junk_server)
    statuses = asyncio.run(send_junk(junk_server.url, range(100, 100 + JUNK_REQUESTS)))
    codes = send_junk_grpc(junk_server.grpc_target, range(100, 100 + JUNK_GRPC_CALLS))
    after = series(junk_server.url)
    threads_after = server_threads(junk_server)
    assert sum(statuses.values()) == JUNK_REQUESTS and set(statuses) == set(warmup), statuses
    assert codes == {"NOT_FOUND": JUNK_GRPC_CALLS}, codes
    print(f"/metrics series: {len(before)} before, {len(after)} after; HTTP statuses {dict(sorted(statuses.items()))}"
          f"; gRPC {codes}; threads {threads_before} before, {threads_after} after")
    # nothing per request outlives it: a thread per audited refusal once slowed refusals twentyfold
    assert threads_after <= threads_before + 4, (threads_before, threads_after)
    assert after - before == set(), sorted(after - before)[:20]
    assert len(after) == len(before)
    assert not [s for s in after if "junk" in s or "__dict__" in s]
    endpoints = {m for s in after for m in re.findall(r'endpoint="([^"]*)"', s)}
    assert {"unmatched", "/admin/deployments/{name}/load", "/v2/models/{name}/infer", "/v1/classify"} <= endpoints
    requests = {s for s in after if s.startswith("bentoml_service_request_total{")}
    assert any('endpoint="unmatched"' in s and 'http_response_code="404"' in s for s in requests)
    assert any('endpoint="/admin/deployments/{name}"' in s and 'http_response_code="401"' in s for s in requests)


def test_process_and_python_collectors_are_exported(junk_server):
    found = series(junk_server.url)
    names = {re.sub(r"\{.*", "", s) for s in found}
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
            "process_start_time_seconds", "python_info", "python_gc_objects_collected_total"} <= names
    # one series per live process of the server: the arbiter, the gateway worker and the runner worker at least
    pids = {s for s in found if s.startswith("process_resident_memory_bytes{")}
    assert len(pids) >= 3, pids
