"""Fallbacks in another failure domain (runner.fallbacks='gateway') through a real `bentoml serve`: the fallbacks run
in the API worker, so when the runner process is SIGKILLed 'auto' requests are answered by the fallback at once
(none waits for the restart), 'primary' requests get 503 + Retry-After, readiness holds, and the primary is back
after BentoML restarts the runner."""
from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import NO_CAPACITY_LIMITS, Server

TEXTS = {"texts": ["book a table for two"], "deployment": "text"}


@pytest.fixture(scope="module")
def served(tiny_registry, tmp_path_factory):
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_RUNNER__FALLBACKS": "gateway", "TRISERVE_ROLLOUT__REFRESH_S": "0.2"}
    with Server(tiny_registry.root, env=env, log_path=tmp_path_factory.mktemp("fdomain") / "serve.log") as srv:
        srv.wait_ready()
        yield srv


def _classify(srv, model: str = "auto") -> httpx.Response:
    return httpx.post(f"{srv.url}/v1/classify", json={**TEXTS, "model": model}, timeout=30,
                      headers={"X-Request-Timeout-Ms": "10000"})


def test_fallbacks_are_hosted_by_the_api_worker_and_answer(served):
    deps = {d["name"]: d for d in httpx.get(f"{served.url}/v1/models", timeout=30).json()["deployments"]}
    assert deps["text"]["model"]["state"] == deps["text"]["fallback"]["state"] == "resident"
    auto, fallback = _classify(served), _classify(served, "fallback")
    assert auto.status_code == 200 and auto.json()["degraded"] is False
    assert fallback.status_code == 200 and fallback.json()["model"]["name"] == "minilm-intent-int8"


def test_a_killed_runner_leaves_auto_requests_to_the_fallback(served):
    assert _classify(served).json()["degraded"] is False
    for pid in served.runner_pids():
        os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: (time.monotonic(), _classify(served), time.monotonic()), range(16)))
    statuses = [r.status_code for _, r, _ in answers]
    assert statuses == [200] * 16, [r.text for _, r, _ in answers]
    reasons = {r.json()["degraded_reason"] for _, r, _ in answers}
    assert reasons <= {"primary_timeout", "primary_failed", "circuit_open"} and all(
        r.json()["degraded"] for _, r, _ in answers), reasons
    assert max(done - sent for sent, _, done in answers) < 5.0  # none waited for the restart (~seconds)
    primary = _classify(served, "primary")
    if primary.status_code != 200:  # unless the runner is already back
        assert primary.status_code == 503 and primary.json()["error"]["code"] in ("circuit_open", "runner_unavailable")
        assert int(primary.headers["retry-after"]) >= 1
    assert httpx.get(f"{served.url}/readyz", timeout=5).status_code == 200  # degraded, still in rotation
    deadline = started + 120
    while time.monotonic() < deadline:  # BentoML restarts the runner; the breaker lets the primary back in
        answer = _classify(served)
        if answer.status_code == 200 and not answer.json()["degraded"]:
            break
        time.sleep(1)
    else:
        pytest.fail("the primary never came back after the runner restart")
