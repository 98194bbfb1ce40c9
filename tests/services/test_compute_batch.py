"""The runner computes gateway batches in chunks (runner.compute_batch; runners/pool.compute_batch measures the size
at warm-up): through a real `bentoml serve`, concurrent requests batched by the gateway and computed two items per
ONNX Runtime call answer exactly what the server computing whole batches answers, and /v1/models shows the chunk and
the warm-up timings it was chosen from."""
from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from runners.pool import compute_batch
from tests.conftest import NO_CAPACITY_LIMITS, Server
from tests.services.test_gateway import TEXTS, png_bytes


@pytest.fixture(scope="module")
def chunked_server(tiny_registry, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("compute-batch") / "serve.log"
    with Server(tiny_registry.root, env={**NO_CAPACITY_LIMITS, "TRISERVE_RUNNER__COMPUTE_BATCH": "2"},
                log_path=log_path) as srv:
        srv.wait_ready()
        yield srv


def _batching(srv) -> dict[str, dict]:
    deployments = httpx.get(f"{srv.url}/v1/models", timeout=30).json()["deployments"]
    return {d["name"]: d["model"]["batching"] for d in deployments if d["model"]["batching"]}


def test_models_show_the_chunk_and_the_warm_up_timings(chunked_server, server):
    chunked, measured = _batching(chunked_server), _batching(server)
    assert chunked and all(b["compute_batch"] == 2 for b in chunked.values())
    assert measured.keys() == chunked.keys()
    for b in measured.values():  # the chunk the runner uses is the one its shown timings choose
        timed = {int(size): ms for size, ms in b["warmup_ms_per_item"].items()}
        assert {1, 8} <= set(timed) and b["compute_batch"] == compute_batch(timed)


def _detect(srv, seed: int) -> list[dict]:
    body = {"images": [{"data": base64.b64encode(png_bytes(seed=seed)).decode()}], "conf_threshold": 0.001}
    resp = httpx.post(f"{srv.url}/v1/detect", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    assert resp.json()["degraded"] is False
    return resp.json()["results"][0]["detections"]


def test_chunked_answers_equal_whole_batches(chunked_server, server):
    seeds = list(range(12))
    with ThreadPoolExecutor(12) as pool:
        got = list(pool.map(lambda s: _detect(chunked_server, s), seeds))
        want = list(pool.map(lambda s: _detect(server, s), seeds))
    for mine, theirs in zip(got, want):
        assert [d["label"] for d in mine] == [d["label"] for d in theirs] and mine
        for a, b in zip(mine, theirs):
            assert a["box"] == pytest.approx(b["box"], abs=0.05) and a["score"] == pytest.approx(b["score"], abs=1e-4)
    chunked = httpx.post(f"{chunked_server.url}/v1/classify", json={"texts": TEXTS}, timeout=60)
    whole = httpx.post(f"{server.url}/v1/classify", json={"texts": TEXTS}, timeout=60)
    assert chunked.status_code == whole.status_code == 200
    assert [r["label"] for r in chunked.json()["results"]] == [r["label"] for r in whole.json()["results"]]
