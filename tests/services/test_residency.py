"""On-demand residency and memory caps through a real `bentoml serve`: an on-demand deployment is not loaded at start
(the service is ready without it), loads on its first requests (which wait and are answered), is evicted and loaded
by the admin API, a deployment that cannot fit its budget is refused with the reason while the rest serves, and a
request larger than a slot's batch cap gets 413 (never a silent split)."""
from __future__ import annotations

import base64
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import yaml

from tests.conftest import NO_CAPACITY_LIMITS, Server
from tests.services.test_gateway import png_bytes

ADMIN = "residency-admin"
HEADERS = {"X-API-Key": ADMIN}
REPOSITORY = {
    "defaults": {"text": "text"},
    "deployments": [
        {"name": "text", "family": "text", "model": {"name": "minilm-intent"}},
        {"name": "lazy", "family": "text", "residency": "on_demand", "model": {"name": "minilm-intent"},
         "fallback": {"name": "minilm-intent-int8", "batching": {"per_item": True}}},
        {"name": "lazy-det", "family": "detection", "residency": "on_demand", "model": {"name": "yolo-shapes"}},
        {"name": "tight", "family": "text", "residency": "on_demand", "memory_mb": 0.5,
         "model": {"name": "minilm-intent"}},
        {"name": "small-batch", "family": "text",
         "model": {"name": "minilm-intent", "batching": {"max_batch_size": 2}}},
    ]}
TEXTS = {"texts": ["book a table for two"]}


@pytest.fixture(scope="module")
def served(tiny_registry, tmp_path_factory):
    d = tmp_path_factory.mktemp("residency")
    models_file = d / "models.yaml"
    models_file.write_text(yaml.safe_dump(REPOSITORY))
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_MODELS_FILE": str(models_file),
           "TRISERVE_DEPLOYMENTS_STATE_FILE": str(d / "state.json"), "TRISERVE_ROLLOUT__REFRESH_S": "0.2",
           "TRISERVE_ACCESS__API_KEYS": json.dumps([{"name": "ops", "admin": True,
                                                     "sha256": hashlib.sha256(ADMIN.encode()).hexdigest()}])}
    with Server(tiny_registry.root, env=env, log_path=d / "serve.log") as srv:
        srv.wait_ready()
        yield srv


def _deployments(srv) -> dict:
    return {d["name"]: d for d in httpx.get(f"{srv.url}/v1/models", timeout=30).json()["deployments"]}


def _post(srv, path: str, body: dict, timeout_ms: int = 30_000) -> httpx.Response:
    return httpx.post(f"{srv.url}{path}", json=body, headers={"X-Request-Timeout-Ms": str(timeout_ms)}, timeout=60)


def _metric(srv, line_start: str) -> float:
    for line in httpx.get(f"{srv.url}/metrics", timeout=30).text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_ready_without_on_demand_deployments_and_they_start_unloaded(served):
    assert httpx.get(f"{served.url}/readyz", timeout=10).status_code == 200
    deps = _deployments(served)
    assert deps["text"]["model"]["state"] == "resident" and deps["text"]["residency"] == "always"
    lazy = deps["lazy-det"]
    assert (lazy["residency"], lazy["model"]["state"], lazy["ready"]) == ("on_demand", "unloaded", True)
    assert lazy["model"]["version"] is None  # nothing loaded, nothing measured yet


def test_first_requests_wait_for_the_load_and_are_answered(served):
    image = {"images": [{"data": base64.b64encode(png_bytes()).decode()}], "deployment": "lazy-det"}
    with ThreadPoolExecutor(4) as pool:  # concurrent first requests: one load, all answered
        answers = list(pool.map(lambda _: _post(served, "/v1/detect", image), range(4)))
    assert [r.status_code for r in answers] == [200] * 4, [r.text for r in answers]
    assert {r.json()["model"]["name"] for r in answers} == {"yolo-shapes"}
    deps = _deployments(served)
    assert deps["lazy-det"]["model"]["state"] == "resident" and deps["lazy-det"]["model"]["memory"]["batch_cap"] >= 1
    assert _metric(served, 'triserve_model_loads_total{outcome="ok",slot="lazy-det",trigger="on_demand"}') == 1
    assert _metric(served, 'triserve_model_resident{slot="lazy-det"}') == 1


def test_admin_unload_evicts_and_the_next_request_loads_it_again(served):
    admin = f"{served.url}/admin/deployments"
    loaded = httpx.post(f"{admin}/lazy/load", headers=HEADERS, timeout=120)
    assert loaded.status_code == 200 and loaded.json()["state"] == "resident", loaded.text
    assert {s["state"] for k, s in _deployments(served)["lazy"].items() if k in ("model", "fallback")} == {"resident"}
    gone = httpx.post(f"{admin}/lazy/unload", headers=HEADERS, timeout=30)
    assert gone.status_code == 200 and gone.json()["evicted"] is True
    assert _deployments(served)["lazy"]["model"]["state"] == "unloaded"
    assert _metric(served, 'triserve_model_evictions_total{slot="lazy"}') == 1
    assert _metric(served, 'triserve_model_resident{slot="lazy"}') == 0
    answer = _post(served, "/v1/classify", {**TEXTS, "deployment": "lazy"})
    assert answer.status_code == 200 and answer.json()["degraded"] is False, answer.text
    assert _deployments(served)["lazy"]["model"]["state"] == "resident"
    always = httpx.post(f"{admin}/text/unload", headers=HEADERS, timeout=30)
    assert always.status_code == 409 and always.json()["error"]["code"] == "not_on_demand"
    assert httpx.post(f"{admin}/nope/load", headers=HEADERS, timeout=30).status_code == 404


def test_a_deployment_over_its_own_budget_is_refused_with_the_reason_and_the_rest_serves(served):
    answer = _post(served, "/v1/classify", {**TEXTS, "deployment": "tight"})
    for _ in range(50):  # the first request may still see "loading" until the refusal is recorded
        if answer.json()["error"]["code"] == "model_unavailable":
            break
        answer = _post(served, "/v1/classify", {**TEXTS, "deployment": "tight"})
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["code"] == "model_unavailable" and "memory_mb" in error["details"]["reason"]
    assert answer.headers["Retry-After"] == "10"
    tight = _deployments(served)["tight"]
    assert tight["ready"] is False and "MemoryRefused" in tight["error"]
    assert httpx.get(f"{served.url}/readyz", timeout=10).status_code == 200
    assert _post(served, "/v1/classify", TEXTS).status_code == 200


def test_a_request_larger_than_the_batch_cap_gets_413_not_a_split(served):
    body = {"texts": ["a", "b", "c"], "deployment": "small-batch"}
    answer = _post(served, "/v1/classify", body)
    assert answer.status_code == 413, answer.text
    error = answer.json()["error"]
    assert error["code"] == "exceeds_memory_cap" and error["details"]["memory_batch_cap"] == 2
    assert _post(served, "/v1/classify", {**body, "texts": ["a", "b"]}).status_code == 200
