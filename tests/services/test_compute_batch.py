"""A slot computed in chunks (batching.compute_batch) through a real `bentoml serve`: the gateway still batches
concurrent requests for the hop, the runner runs them two items per ONNX Runtime call, the answers equal those of the
server that computes whole batches, a request larger than the chunk is answered (the chunk is no per-request cap),
and /v1/models shows the slot's batching."""
from __future__ import annotations

import base64
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import NO_CAPACITY_LIMITS, Server
from tests.services.test_gateway import png_bytes

CHUNK = 2


@pytest.fixture(scope="module")
def chunked_server(tiny_registry, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("compute-batch") / "serve.log"
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_SLOTS__DETECTION__BATCHING__COMPUTE_BATCH": str(CHUNK),
           "TRISERVE_RUNNER__INTRA_OP_THREADS": "1"}
    with Server(tiny_registry.root, env=env, log_path=log_path) as srv:
        srv.wait_ready()
        yield srv


def detect(srv, seeds: list[int]) -> list[list[dict]]:
    body = {"images": [{"data": base64.b64encode(png_bytes(seed=s)).decode()} for s in seeds],
            "conf_threshold": 0.001, "model": "primary"}
    resp = httpx.post(f"{srv.url}/v1/detect", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    assert resp.json()["degraded"] is False
    return [r["detections"] for r in resp.json()["results"]]


def test_models_show_the_slot_batching(chunked_server, server):
    def batching(srv) -> dict:
        deployments = httpx.get(f"{srv.url}/v1/models", timeout=30).json()["deployments"]
        return next(d for d in deployments if d["name"] == "detection")["model"]["batching"]

    assert batching(chunked_server) == {"max_batch_size": 16, "compute_batch": CHUNK, "memory_batch_cap": None}
    whole = batching(server)
    assert whole["max_batch_size"] == 16 and whole["compute_batch"] == whole["memory_batch_cap"] == 16


def test_models_show_the_runners_thread_layout(chunked_server, server):
    """/v1/models says how many threads a session computes with: the setting, and ONNX Runtime's default (one per
    physical core) in effect where the setting is 0."""
    from triserve.runners.pool import physical_cores

    pinned = httpx.get(f"{chunked_server.url}/v1/models", timeout=30).json()["runner_threads"]
    assert pinned["intra_op_threads"] == pinned["intra_op_in_effect"] == 1
    default = httpx.get(f"{server.url}/v1/models", timeout=30).json()["runner_threads"]
    assert default["intra_op_threads"] == 0 and default["intra_op_in_effect"] == physical_cores() >= 1
    assert default["cpus_usable"] >= 1 and default["runner_workers"] == 1


def test_chunked_answers_equal_whole_batches(chunked_server, server):
    requests = [[i, i + 20, i + 40] for i in range(8)]  # 24 images in concurrent requests of 3: batches above 2
    start = threading.Barrier(len(requests))

    def together(srv, seeds):
        start.wait(timeout=30)
        return detect(srv, seeds)

    with ThreadPoolExecutor(len(requests)) as pool:
        got = list(pool.map(lambda s: together(chunked_server, s), requests))
    want = [detect(server, seeds) for seeds in requests]
    for mine, theirs in zip(got, want):
        for a_image, b_image in zip(mine, theirs):
            assert [d["label"] for d in a_image] == [d["label"] for d in b_image] and a_image
            for a, b in zip(a_image, b_image):
                assert a["box"] == pytest.approx(b["box"], abs=0.05)
                assert a["score"] == pytest.approx(b["score"], abs=1e-4)
    assert len(detect(chunked_server, list(range(8)))) == 8  # more than a chunk in one request: answered
    batches = [json.loads(line) for line in chunked_server.log_path.read_text().splitlines()
               if line.startswith("{") and '"event": "batch"' in line]
    ours = [b for b in batches if b.get("slot") == "detection"]
    assert ours and all(b["calls"] == -(-b["size"] // CHUNK) for b in ours), ours
    assert any(b["size"] > CHUNK for b in ours), [b["size"] for b in ours]  # the gateway still batched the hop
