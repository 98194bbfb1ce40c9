"""A runner whose models were measured not to pay for batches (runners/pool.batch_pays) still serves concurrent
requests in gateway batches, computes them one item at a time, answers exactly what the batching server answers, and
says so in /v1/models. Forced here with runner.item_by_item_above near 0 (no device needed for the decision)."""
from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import NO_CAPACITY_LIMITS, Server
from tests.services.test_gateway import TEXTS, png_bytes


@pytest.fixture(scope="module")
def item_by_item_server(tiny_registry, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("item-by-item") / "serve.log"
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_RUNNER__ITEM_BY_ITEM_ABOVE": "0.000001"}
    with Server(tiny_registry.root, env=env, log_path=log_path) as srv:
        srv.wait_ready()
        yield srv


def _detect(server, seed: int) -> dict:
    body = {"images": [{"data": base64.b64encode(png_bytes(seed=seed)).decode()}], "conf_threshold": 0.001}
    resp = httpx.post(f"{server.url}/v1/detect", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_models_report_item_by_item(item_by_item_server, server):
    def batching(srv) -> dict:
        models = httpx.get(f"{srv.url}/v1/models", timeout=30).json()["deployments"]
        return {d["name"]: d["model"]["batching"] for d in models if d["model"]["batching"]}

    forced, normal = batching(item_by_item_server), batching(server)
    assert forced and all(b["item_by_item"] for b in forced.values())
    assert all(set(b["warmup_ms_per_item"]) == {"1", "8"} for b in forced.values())
    assert not any(b["item_by_item"] for b in normal.values())  # the tiny models' batches pay on this CPU


def test_concurrent_answers_equal_the_batching_server(item_by_item_server, server):
    seeds = list(range(12))
    with ThreadPoolExecutor(12) as pool:
        got = list(pool.map(lambda s: _detect(item_by_item_server, s), seeds))
        want = list(pool.map(lambda s: _detect(server, s), seeds))
    for g, w in zip(got, want):
        assert g["degraded"] is False and g["model"] == w["model"]
        mine, theirs = g["results"][0]["detections"], w["results"][0]["detections"]
        assert [d["label"] for d in mine] == [d["label"] for d in theirs]
        for a, b in zip(mine, theirs):
            assert a["box"] == pytest.approx(b["box"], abs=0.05) and a["score"] == pytest.approx(b["score"], abs=1e-4)
    texts = httpx.post(f"{item_by_item_server.url}/v1/classify", json={"texts": TEXTS}, timeout=60)
    batched = httpx.post(f"{server.url}/v1/classify", json={"texts": TEXTS}, timeout=60)
    assert texts.status_code == batched.status_code == 200
    assert [r["label"] for r in texts.json()["results"]] == [r["label"] for r in batched.json()["results"]]
