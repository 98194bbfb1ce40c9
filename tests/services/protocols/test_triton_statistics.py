"""Triton's statistics extension (HTTP GET /v2/models[/{name}[/versions/{v}]]/stats, gRPC ModelStatistics): the
mapping from metric samples (services/protocols/statistics.py) on hand-made samples and across processes, then stock
tritonclient's get_inference_statistics against the session's real `bentoml serve`, and against a server with two API
workers, each asked over a connection it holds itself (REST; gRPC is the first worker's alone).

Like test_triton_tooling.py, this process must not import triserve.services.protocols.grpc_oip /
generated.grpc_predict_v2_pb2:
tritonclient.grpc registers the same standard `inference.*` protobuf names (its messages check our JSON instead).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import grpc
import httpx
import numpy as np
import psutil
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from google.protobuf import json_format
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.conftest import NO_CAPACITY_LIMITS, Server
from triserve.services.protocols import statistics as stats

ROOT = Path(__file__).resolve().parents[3]
FIELDS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")
COMPUTE = ("queue", "compute_input", "compute_infer", "compute_output")


def triton_message(model_stats: list[dict]) -> service_pb2.ModelStatisticsResponse:
    """Triton's own message parses our JSON: every field name and type is Triton's."""
    return json_format.ParseDict({"model_stats": model_stats}, service_pb2.ModelStatisticsResponse())


# --- the mapping, on hand-made samples ----------------------------------------------------------------------------
def stage(dep: str, name: str, count: float, seconds: float) -> list[stats.Sample]:
    labels = {"deployment": dep, "stage": name}
    return [(f"{stats.STAGE}_count", labels, count), (f"{stats.STAGE}_sum", labels, seconds)]


def calls(slot: str, model: str, version: str, stat: str, count: float, seconds: float) -> list[stats.Sample]:
    labels = {"slot": slot, "model": model, "version": version, "stat": stat}
    return [(f"{stats.VERSION_CALLS}_count", labels, count), (f"{stats.VERSION_CALLS}_sum", labels, seconds)]


def executions(slot: str, model: str, version: str, size: int, count: float, seconds: float) -> list[stats.Sample]:
    labels = {"slot": slot, "model": model, "version": version, "size": str(size)}
    return [(f"{stats.EXECUTIONS}_count", labels, count), (f"{stats.EXECUTIONS}_sum", labels, seconds)]


def test_pipeline_statistics_from_samples():
    samples = stats.Samples([
        *stage("text", "total", 4, 0.4), *stage("text", "queue", 4, 0.05), *stage("text", "preprocess", 4, 0.02),
        *stage("text", "infer", 4, 0.1), *stage("text", "postprocess", 4, 0.01),
        *stage("detection", "total", 9, 9.0),  # another deployment
        (f"{stats.DEPLOYMENT_FAILED}_count", {"deployment": "text"}, 2), (f"{stats.DEPLOYMENT_FAILED}_sum",
                                                                           {"deployment": "text"}, 0.003),
        (stats.DEPLOYMENT_LAST, {"deployment": "text"}, 1_700_000_000.25),
        (stats.DEPLOYMENT_LAST, {"deployment": "detection"}, 1_800_000_000.0),
    ])
    doc = stats.pipeline_stats(samples, "classify", "1", "text")
    assert (doc["name"], doc["version"], doc["last_inference"]) == ("classify", "1", 1_700_000_000_250)
    assert doc["inference_count"] == doc["execution_count"] == 4
    s = doc["inference_stats"]
    assert s["success"] == {"count": 4, "ns": 400_000_000} and s["fail"] == {"count": 2, "ns": 3_000_000}
    assert s["queue"] == {"count": 4, "ns": 50_000_000} and s["compute_input"] == {"count": 4, "ns": 20_000_000}
    assert s["compute_infer"] == {"count": 4, "ns": 100_000_000}
    assert s["compute_output"] == {"count": 4, "ns": 10_000_000}
    assert s["cache_hit"] == s["cache_miss"] == {"count": 0, "ns": 0}
    assert doc["batch_stats"] == [{"batch_size": 1, "compute_input": s["compute_input"],
                                   "compute_infer": s["compute_infer"], "compute_output": s["compute_output"]}]
    triton_message([doc])

    empty = stats.pipeline_stats(stats.Samples([]), "forecast", "1", "forecast")
    assert empty["last_inference"] == empty["inference_count"] == empty["execution_count"] == 0
    assert all(empty["inference_stats"][k] == {"count": 0, "ns": 0} for k in FIELDS) and empty["batch_stats"] == []


def test_tensor_statistics_per_version_summed_over_slots():
    samples = stats.Samples([
        *calls("text", "minilm", "v1", "success", 5, 0.5), *calls("text", "minilm", "v1", "compute", 5, 0.2),
        *calls("text", "minilm", "v1", "fail", 1, 0.25),
        *calls("other", "minilm", "v1", "success", 1, 0.1), *calls("other", "minilm", "v1", "compute", 1, 0.05),
        *calls("text", "minilm", "v2", "success", 2, 0.3), *calls("text", "minilm", "v2", "compute", 2, 0.1),
        *calls("text", "other-model", "v1", "success", 7, 7.0),  # another model in the same slot (a redeploy)
        ("triserve_version_items_total", {"slot": "text", "model": "minilm", "version": "v1"}, 9),
        ("triserve_version_items_total", {"slot": "other", "model": "minilm", "version": "v1"}, 1),
        (stats.VERSION_LAST, {"slot": "text", "model": "minilm", "version": "v1"}, 1_700_000_000.0),
        (stats.VERSION_LAST, {"slot": "other", "model": "minilm", "version": "v1"}, 1_700_000_001.5),
        *executions("text", "minilm", "v1", 3, 2, 0.02), *executions("text", "minilm", "v1", 1, 1, 0.004),
        *executions("other", "minilm", "v1", 1, 1, 0.006), *executions("text", "minilm", "v2", 2, 1, 0.01),
        (f"{stats.EXECUTIONS}_count", {"slot": "text", "model": "minilm", "version": "v1", "size": "x"}, 5),
    ])
    assert stats.tensor_versions(samples, "minilm", ["v1"]) == ["v1", "v2"]
    assert stats.tensor_versions(samples, "minilm", ["v3"]) == ["v1", "v2", "v3"]  # served, no statistics yet
    doc = stats.tensor_stats(samples, "minilm", "v1")
    assert (doc["name"], doc["version"], doc["last_inference"]) == ("minilm", "v1", 1_700_000_001_500)
    assert doc["inference_count"] == 10 and doc["execution_count"] == 4
    s = doc["inference_stats"]
    assert s["success"] == {"count": 6, "ns": 600_000_000} and s["fail"] == {"count": 1, "ns": 250_000_000}
    assert s["compute_infer"] == {"count": 6, "ns": 250_000_000}
    assert s["queue"] == {"count": 6, "ns": 350_000_000}  # round trip less compute
    assert s["compute_input"] == s["compute_output"] == {"count": 6, "ns": 0}
    assert sum(s[k]["ns"] for k in COMPUTE) == s["success"]["ns"]
    assert doc["batch_stats"] == [
        {"batch_size": 1, "compute_input": {"count": 2, "ns": 0}, "compute_infer": {"count": 2, "ns": 10_000_000},
         "compute_output": {"count": 2, "ns": 0}},
        {"batch_size": 3, "compute_input": {"count": 2, "ns": 0}, "compute_infer": {"count": 2, "ns": 20_000_000},
         "compute_output": {"count": 2, "ns": 0}}]
    v2 = stats.tensor_stats(samples, "minilm", "v2")
    assert v2["inference_stats"]["success"]["count"] == 2 and v2["execution_count"] == 1
    assert v2["inference_count"] == 0 and v2["last_inference"] == 0  # no such samples: zeros
    fresh = stats.tensor_stats(samples, "minilm", "v3")
    assert fresh["execution_count"] == 0 and fresh["batch_stats"] == []
    assert all(fresh["inference_stats"][k]["count"] == 0 for k in FIELDS)
    message = triton_message([doc, v2, fresh])
    assert message.model_stats[0].inference_stats.queue.ns == 350_000_000


WRITER = textwrap.dedent("""
    import sys, types
    from triserve.observability import metrics
    from triserve.runners.metrics import EXECUTIONS
    n, ts = int(sys.argv[1]), float(sys.argv[2])
    for _ in range(n):
        metrics.observe_timings("text", types.SimpleNamespace(preprocess_ms=1.0, queue_ms=2.0, infer_ms=3.0,
                                                              postprocess_ms=1.0, total_ms=10.0))
        metrics.version_succeeded("text", "minilm", "v1", 2, 0.01, 0.004)
        EXECUTIONS.labels("text", "minilm", "v1", "2").observe(0.004)
    metrics.deployment_failed("text", 0.5)
    metrics.version_failed("text", "minilm", "v1", 0.25)
    metrics.DEPLOYMENT_LAST.labels("text").set(ts)
""")


def test_samples_are_summed_over_processes(tmp_path):
    """Two processes write their own multiprocess files (as two API workers, or an API worker and the runner, do);
    read_samples merges them: every reader gets the totals, and the latest time of the two."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for n, ts in ((3, 1_700_000_000.0), (2, 1_700_000_500.0)):
        subprocess.run([sys.executable, "-c", WRITER, str(n), str(ts)], cwd=ROOT, env=env, check=True, timeout=120)
    assert len(list(tmp_path.glob("*.db"))) >= 4  # counters, summaries, histograms, gauges of two processes
    samples = stats.Samples(stats.read_samples(str(tmp_path)))
    pipe = stats.pipeline_stats(samples, "text", "1", "text")
    assert pipe["inference_stats"]["success"] == {"count": 5, "ns": 50_000_000}
    assert pipe["inference_stats"]["compute_infer"] == {"count": 5, "ns": 15_000_000}
    assert pipe["inference_stats"]["fail"] == {"count": 2, "ns": 1_000_000_000}
    assert pipe["last_inference"] == 1_700_000_500_000
    tensor = stats.tensor_stats(samples, "minilm", "v1")
    assert tensor["inference_stats"]["success"] == {"count": 5, "ns": 50_000_000}
    assert tensor["inference_stats"]["fail"] == {"count": 2, "ns": 500_000_000}
    assert tensor["inference_count"] == 10 and tensor["execution_count"] == 5
    assert tensor["batch_stats"][0]["batch_size"] == 2 and tensor["batch_stats"][0]["compute_infer"]["count"] == 5


# --- live: the session server -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def http_client(server):
    return thttp.InferenceServerClient(server.url.removeprefix("http://"), network_timeout=60)


@pytest.fixture(scope="module")
def grpc_client(server):
    client = tgrpc.InferenceServerClient(server.grpc_target)
    yield client
    client.close()


def text_input(module, texts: list[str]):
    inp = module.InferInput("TEXT", [len(texts)], "BYTES")
    inp.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object))
    return inp


def token_inputs(module, rows: int):
    ids = np.array([[101, 2054, 2003, 102]] * rows, dtype=np.int64)
    inputs = [module.InferInput("input_ids", list(ids.shape), "INT64"),
              module.InferInput("attention_mask", list(ids.shape), "INT64")]
    inputs[0].set_data_from_numpy(ids)
    inputs[1].set_data_from_numpy(np.ones_like(ids))
    return inputs


def one(model_stats: list[dict], version: str) -> dict:
    (entry,) = [m for m in model_stats if m["version"] == version]
    return entry


def delta(after: dict, before: dict) -> dict:
    """Per-field differences of two statistics of one model version."""
    return {"inference_count": after["inference_count"] - before["inference_count"],
            "execution_count": after["execution_count"] - before["execution_count"],
            **{k: {f: after["inference_stats"][k][f] - before["inference_stats"][k][f] for f in ("count", "ns")}
               for k in FIELDS}}


def check_consistent(doc: dict) -> None:
    """What holds for any statistics: the stages lie inside the successful requests' time."""
    s = doc["inference_stats"]
    assert sum(s[k]["ns"] for k in COMPUTE) <= s["success"]["ns"] + 1000 * s["success"]["count"], doc  # us rounding
    assert all(s[k]["count"] == s["success"]["count"] for k in COMPUTE), doc
    assert sum(b["compute_infer"]["count"] for b in doc["batch_stats"]) == doc["execution_count"], doc


def test_statistics_count_what_was_served_http_and_grpc(server, http_client, grpc_client, tiny_registry):
    text_version = tiny_registry.load_verified("minilm-intent", "stable")[1].version
    before = {m: http_client.get_inference_statistics(m)["model_stats"] for m in ("classify", "text",
                                                                                  "minilm-intent")}
    started_ms = time.time() * 1000
    for i in range(3):
        http_client.infer("classify", [text_input(thttp, [f"what is my balance {i}"])])
    grpc_client.infer("classify", [text_input(tgrpc, ["book a table"])])
    http_client.infer("minilm-intent", token_inputs(thttp, 2))  # the tensor model: one call, two items
    grpc_client.infer("minilm-intent", token_inputs(tgrpc, 1))
    for client, module in ((http_client, thttp), (grpc_client, tgrpc)):  # refused by the text pipeline: empty text
        with pytest.raises(InferenceServerException) as err:
            client.infer("classify", [text_input(module, ["\x00\x01"])])
        assert "empty_text" in err.value.message()

    after = http_client.get_inference_statistics("classify")["model_stats"]
    assert len(after) == 1  # a pipeline has one version
    pipe = one(after, "1")
    assert pipe["name"] == "classify"
    d = delta(pipe, one(before["classify"], "1"))
    assert d["success"]["count"] == 4 and d["fail"]["count"] == 2
    assert d["inference_count"] == d["execution_count"] == 4
    assert d["success"]["ns"] > 0 and d["fail"]["ns"] > 0 and d["compute_infer"]["ns"] > 0
    assert d["cache_hit"] == d["cache_miss"] == {"count": 0, "ns": 0}
    assert started_ms <= pipe["last_inference"] <= time.time() * 1000
    check_consistent(pipe)
    alias = one(http_client.get_inference_statistics("text")["model_stats"], "1")
    assert {**alias, "name": "classify"} == pipe  # the deployment and its family alias: the same numbers

    # the tensor model: its own calls and the pipeline's (a composing model's statistics in Triton's terms)
    tensor = one(http_client.get_inference_statistics("minilm-intent")["model_stats"], text_version)
    t = delta(tensor, one(before["minilm-intent"], text_version))
    assert t["success"]["count"] == 6 and t["fail"]["count"] == 0
    assert t["inference_count"] == 7  # items: 4 texts, 2 + 1 rows
    assert 1 <= t["execution_count"] <= 6
    assert t["queue"]["ns"] + t["compute_infer"]["ns"] == pytest.approx(t["success"]["ns"], abs=10)
    assert t["compute_infer"]["ns"] > 0
    check_consistent(tensor)
    assert started_ms <= tensor["last_inference"] <= time.time() * 1000
    executed = sum(b["batch_size"] * b["compute_infer"]["count"] for b in tensor["batch_stats"])
    assert executed >= tensor["inference_count"] > 0  # warm-up runs are not in the runner's statistics' items
    same = http_client.get_inference_statistics("minilm-intent", model_version=text_version)["model_stats"]
    assert same == [tensor]

    # gRPC: the same numbers in Triton's message
    for name, version in (("classify", ""), ("minilm-intent", text_version)):
        http = http_client.get_inference_statistics(name, model_version=version)
        assert grpc_client.get_inference_statistics(name, model_version=version) == triton_message(
            http["model_stats"])
    g = grpc_client.get_inference_statistics("detect").model_stats[0]
    assert (g.name, g.version) == ("detect", "1")


def test_statistics_of_every_model_and_of_unknown_ones(server, http_client, grpc_client):
    every = http_client.get_inference_statistics()["model_stats"]
    names = {m["name"] for m in every}
    assert {"detection", "text", "forecast", "detect", "classify", "minilm-intent", "yolo-shapes"} <= names
    index = http_client.get_model_repository_index()
    assert {m["name"] for m in index if m["state"] == "READY"} <= names <= {m["name"] for m in index}
    for doc in every:
        check_consistent(doc)
    gnames = {m.name for m in grpc_client.get_inference_statistics().model_stats}
    assert gnames == names
    raw = httpx.get(f"{server.url}/v2/models/stats", timeout=30)
    assert raw.status_code == 200 and set(raw.json()) == {"model_stats"}

    with pytest.raises(InferenceServerException) as err:
        http_client.get_inference_statistics("no-such-model")
    assert err.value.status() == "404" and err.value.message().startswith("model_not_found:")
    with pytest.raises(InferenceServerException) as err:
        http_client.get_inference_statistics("minilm-intent", model_version="0.0.0-nope")
    assert err.value.status() == "404" and err.value.message().startswith("model_version_not_found:")
    with pytest.raises(InferenceServerException) as err:
        grpc_client.get_inference_statistics("no-such-model")
    assert err.value.status() == "StatusCode.NOT_FOUND" and err.value.message().startswith("model_not_found:")
    with pytest.raises(InferenceServerException) as err:
        grpc_client.get_inference_statistics("classify", model_version="2")
    assert err.value.status() == "StatusCode.NOT_FOUND"
    resp = httpx.get(f"{server.url}/v2/models/no-such-model/versions/1/stats", timeout=30)
    assert resp.status_code == 404 and resp.json()["code"] == "model_not_found"

    assert "statistics" in http_client.get_server_metadata()["extensions"]
    assert "statistics" in grpc_client.get_server_metadata().extensions


def test_statistics_metrics_are_exported(server):
    """The metric families the statistics are read from are on /metrics (tests/configs/test_monitoring.py
    STATISTICS lists them)."""
    from tests.configs.test_monitoring import STATISTICS

    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    assert {f for f in STATISTICS if f"\n{f}" not in text} == set()


# --- live: two API workers ----------------------------------------------------------------------------------------
SERIES = [float(v) for v in (340 + np.sin(np.arange(48) / 12 * 2 * np.pi) * 3 + np.arange(48) * 0.1).round(3)]


@pytest.fixture(scope="module")
def two_workers(tiny_registry, tmp_path_factory):
    """Two API workers; the forecast primary answers NaN (its fallback answers instead): failed runner calls."""
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_GATEWAY__WORKERS": "2",
           "TRISERVE_RUNNER__FAULTS__NAN_OUTPUT": json.dumps(["forecast"])}
    with Server(tiny_registry.root, env=env, log_path=tmp_path_factory.mktemp("logs") / "two_workers.log") as srv:
        srv.wait_ready()
        yield srv


def worker_holding(srv: Server, server_port: int, client_ports: set[int]) -> int | None:
    """The API worker whose socket on `server_port` is connected to one of our `client_ports`."""
    for pid in srv.entry_pids():
        try:
            conns = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.Error:
            continue
        if any(c.laddr and c.raddr and c.laddr.port == server_port and c.raddr.port in client_ports for c in conns):
            return pid
    return None


def on_fresh_connection(srv: Server, method: str, path: str, **kwargs) -> tuple[httpx.Response, int | None]:
    """One request on a new connection, and the API worker that answered it (the connection is still open)."""
    with httpx.Client(base_url=srv.url, timeout=60) as client:
        resp = client.request(method, path, **kwargs)
        port = resp.extensions["network_stream"].get_extra_info("client_addr")[1]
        return resp, worker_holding(srv, srv.port, {port})


def classify_body(text: str) -> dict:
    return {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [text]}]}


def grpc_stats_by_worker(srv: Server, name: str) -> dict[int, service_pb2.ModelStatisticsResponse]:
    """ModelStatistics asked over new channels (no shared subchannel: a TCP connection each), by the API worker that
    answered (only the first serves gRPC: services/protocols/grpc_server.py)."""
    answers: dict[int, service_pb2.ModelStatisticsResponse] = {}
    own = psutil.Process()
    for _ in range(6):
        before = {c.laddr.port for c in own.net_connections(kind="tcp") if c.raddr and c.raddr.port == srv.grpc_port}
        with grpc.insecure_channel(srv.grpc_target, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            answer = stub.ModelStatistics(service_pb2.ModelStatisticsRequest(name=name), timeout=30)
            ports = {c.laddr.port for c in own.net_connections(kind="tcp")
                     if c.raddr and c.raddr.port == srv.grpc_port} - before
            pid = worker_holding(srv, srv.grpc_port, ports)
        if pid is not None:
            answers.setdefault(pid, answer)
            assert answer == answers[pid]
    return answers


def test_two_api_workers_answer_the_same_totals(two_workers):
    srv = two_workers
    models = ("classify", "minilm-intent", "forecast", "forecast-global", "forecast-theta")

    def stats_of(name: str) -> dict[int, list[dict]]:
        """The statistics of `name` as each API worker answers them (asked until both have answered twice)."""
        answers: dict[int, list[list[dict]]] = {}
        for _ in range(60):
            resp, pid = on_fresh_connection(srv, "GET", f"/v2/models/{name}/stats")
            assert resp.status_code == 200, resp.text
            if pid is not None:
                answers.setdefault(pid, []).append(resp.json()["model_stats"])
            if len(answers) == 2 and all(len(a) >= 2 for a in answers.values()):
                break
        assert len(answers) == 2, f"only workers {sorted(answers)} answered (API workers: {srv.entry_pids()})"
        return {pid: a[0] for pid, a in answers.items() if all(x == a[0] for x in a)}

    before = {}
    for name in models:
        answers = stats_of(name)
        assert len(answers) == 2 and len({json.dumps(a, sort_keys=True) for a in answers.values()}) == 1, answers
        before[name] = next(iter(answers.values()))

    served: dict[int | None, int] = {}
    for i in range(40):  # until both workers have served at least 3
        resp, pid = on_fresh_connection(srv, "POST", "/v2/models/classify/infer", json=classify_body(f"hello {i}"))
        assert resp.status_code == 200, resp.text
        served[pid] = served.get(pid, 0) + 1
        if len([p for p, n in served.items() if p is not None and n >= 3]) == 2:
            break
    ok = sum(served.values())
    assert len([p for p in served if p is not None]) == 2, served
    refused = [on_fresh_connection(srv, "POST", "/v2/models/classify/infer", json=classify_body("\x00"))
               for _ in range(2)]
    assert [r.status_code for r, _ in refused] == [422, 422], [r.text for r, _ in refused]
    forecast = {"inputs": [{"name": "VALUES", "datatype": "FP64", "shape": [len(SERIES)], "data": SERIES}],
                "parameters": {"start": "1990-01-01T00:00:00", "frequency": "MS", "horizon": 6}}
    for _ in range(2):
        resp, _ = on_fresh_connection(srv, "POST", "/v2/models/forecast/infer", json=forecast)
        assert resp.status_code == 200 and resp.json()["parameters"]["degraded"] is True, resp.text

    after = {}
    for name in models:
        answers = stats_of(name)
        values = list(answers.values())
        assert len(answers) == 2 and values[0] == values[1], answers  # not per process: the server's totals
        after[name] = values[0]
    print("two workers, per worker requests:", served, json.dumps(after["classify"]))

    pipe = delta(one(after["classify"], "1"), one(before["classify"], "1"))
    assert (pipe["success"]["count"], pipe["fail"]["count"]) == (ok, 2)
    assert pipe["success"]["ns"] > 0 and pipe["compute_infer"]["ns"] > 0
    check_consistent(one(after["classify"], "1"))
    (text_version,) = [m["version"] for m in after["minilm-intent"]]
    tensor = delta(one(after["minilm-intent"], text_version), one(before["minilm-intent"], text_version))
    assert tensor["success"]["count"] == tensor["inference_count"] == ok
    assert 1 <= tensor["execution_count"] <= ok

    fc = delta(one(after["forecast"], "1"), one(before["forecast"], "1"))
    assert (fc["success"]["count"], fc["fail"]["count"]) == (2, 0)  # answered (degraded) by the fallback
    (primary_version,) = [m["version"] for m in after["forecast-global"]]
    primary = delta(one(after["forecast-global"], primary_version),
                    one(before["forecast-global"], primary_version))
    assert primary["success"]["count"] == 0 and 1 <= primary["fail"]["count"] <= 2  # NaN (then maybe its breaker)
    assert primary["fail"]["ns"] > 0
    (fallback_version,) = [m["version"] for m in after["forecast-theta"]]
    fallback = delta(one(after["forecast-theta"], fallback_version), one(before["forecast-theta"], fallback_version))
    assert fallback["success"]["count"] == 2 and fallback["fail"]["count"] == 0

    grpc_answers = grpc_stats_by_worker(srv, "classify")
    assert len(grpc_answers) == 1, f"gRPC: workers {sorted(grpc_answers)} answered"
    assert next(iter(grpc_answers.values())) == triton_message(after["classify"])  # the server's totals, as REST's
