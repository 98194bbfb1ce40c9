"""A slow, held or unreachable registry (registry_uri over HTTP) under a real `bentoml serve` (issue 42, the soak):

1. a hot add waiting on the registry holds back nothing else: REST, OIP REST, OIP gRPC, /v1/models and the repository
   index answer while the add's pull is held; once the runner has pulled, no API worker asks the registry again (its
   catalog loads the version from the verified cache, off the event loop);
2. a hot add refused while the registry was down succeeds once it is back, without a restart;
3. a restart while the registry holds every request starts from the verified cache and serves.

The registry is the soak drill's HTTP registry (scripts/drills/soak_faults.RegistryHttp) held and released with events,
never a clock: each check runs while a request is provably held there.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc

from scripts.drills.soak_faults import RegistryHttp
from tests.conftest import NO_CAPACITY_LIMITS, Server
from triserve.models.registry import LocalRegistry

ADMIN = "registry-admin"
HEADERS = {"X-API-Key": ADMIN}
HANG_GUARD_S = 90  # only a failing run waits this long: every wait below ends on an event


@pytest.fixture(scope="module")
def registry_root(tiny_registry, tmp_path_factory):
    """The tiny registry plus two text models no process has pulled yet (copies of the int8 intent model)."""
    root = tmp_path_factory.mktemp("outage") / "registry"
    shutil.copytree(tiny_registry.root, root)
    reg = LocalRegistry(root)
    src, manifest = reg.load_verified("minilm-intent-int8", "stable")
    for name in ("intent-hot", "intent-back"):
        reg.publish(src, manifest.model_copy(update={"name": name}))
        reg.set_alias(name, "stable", manifest.version, by="test")
    return root


def _admin(srv, method: str, path: str, body: dict | None = None) -> httpx.Response:
    return httpx.request(method, f"{srv.url}/admin/deployments{path}", json=body, headers=HEADERS,
                         timeout=HANG_GUARD_S)


def _others_answer(srv) -> None:
    """Requests that touch deployments other than the one being added, over every transport."""
    text = httpx.post(f"{srv.url}/v1/classify", json={"texts": ["hello"], "deployment": "text"}, timeout=HANG_GUARD_S)
    assert text.status_code == 200, text.text
    oip = httpx.post(f"{srv.url}/v2/models/forecast/infer", timeout=HANG_GUARD_S, json={"inputs": [
        {"name": "VALUES", "datatype": "FP64", "shape": [36], "data": [10.0 + (i % 12) for i in range(36)]}],
        "parameters": {"horizon": 2, "frequency": "MS", "start": "2000-01-01T00:00:00"}})
    assert oip.status_code == 200, oip.text
    client = tgrpc.InferenceServerClient(srv.grpc_target)
    try:
        inp = tgrpc.InferInput("TEXT", [1], "BYTES")
        inp.set_data_from_numpy(np.array([b"hello"], dtype=object))
        answer = client.infer("text", [inp], client_timeout=HANG_GUARD_S)
        assert answer.as_numpy("LABEL") is not None
        assert {m.name for m in client.get_model_repository_index(client_timeout=HANG_GUARD_S).models} >= {"text"}
    finally:
        client.close()
    models = httpx.get(f"{srv.url}/v1/models", timeout=HANG_GUARD_S)
    assert models.status_code == 200 and models.json()["ready"] is True, models.text
    index = httpx.post(f"{srv.url}/v2/repository/index", json={}, timeout=HANG_GUARD_S)
    assert index.status_code == 200, index.text


def test_registry_slow_down_and_back_under_a_real_server(registry_root, tmp_path):
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_MODEL_CACHE_DIR": str(tmp_path / "cache"),
           "TRISERVE_DEPLOYMENTS_STATE_FILE": str(tmp_path / "state" / "deployments.json"),
           "TRISERVE_REGISTRY_RETRIES": "1", "TRISERVE_REGISTRY_BACKOFF_S": "0.05",
           "TRISERVE_REGISTRY_STARTUP_WAIT_S": "0", "TRISERVE_ROLLOUT__REFRESH_S": "0.2",
           "TRISERVE_ROLLOUT__RETIRE_AFTER_S": "1", "TRISERVE_ACCESS__RATE_PER_S": "100000",
           "TRISERVE_ACCESS__API_KEYS": json.dumps([{"name": "ops", "admin": True,
                                                     "sha256": hashlib.sha256(ADMIN.encode()).hexdigest()}])}
    hot = {"family": "text", "model": {"name": "intent-hot", "batching": {"per_item": True}}}
    back = {"family": "text", "model": {"name": "intent-back", "batching": {"per_item": True}}}
    manifest = LocalRegistry(registry_root).manifest("intent-hot", LocalRegistry(registry_root).resolve(
        "intent-hot", "stable"))
    last_file = f"intent-hot/versions/{manifest.version}/{manifest.files[-1].path}"
    with RegistryHttp(registry_root) as registry, ThreadPoolExecutor(1) as pool:
        env["TRISERVE_REGISTRY_URI"] = registry.url
        with Server(registry_root, env=env, log_path=tmp_path / "serve.log") as srv:
            srv.wait_ready()
            # 1. the add's pull is held at the registry: everything else answers meanwhile
            registry.set("held")
            put = pool.submit(_admin, srv, "PUT", "/hot", hot)
            assert registry.holding.wait(HANG_GUARD_S), "the hot add never asked the registry"
            _others_answer(srv)
            assert not put.done() and registry.mode == "held"  # all of the above answered while the add waited
            # ... then the pull goes through and the registry holds again: nobody may ask it any more
            mark = len(registry.requests)
            registry.hold_after(last_file)
            added = put.result(timeout=HANG_GUARD_S)
            assert added.status_code == 200, added.text
            assert registry.mode == "held"
            answer = httpx.post(f"{srv.url}/v1/classify", json={"texts": ["hi"], "deployment": "hot"},
                                timeout=HANG_GUARD_S)
            assert answer.status_code == 200 and answer.json()["model"]["name"] == "intent-hot", answer.text
            _others_answer(srv)
            # (the startup's background refresh of the other, cached models may still be asking for their aliases:
            # not a request path, and not what this checks)
            held = [r for r in registry.requests[mark:] if r[0] == "held" and r[2].startswith("/intent-hot/")]
            assert held == [], f"a request path or the gateway's catalog asked the registry: {held}"

            # 2. refused while the registry is down, added once it is back (no restart)
            registry.set("down")
            refused = _admin(srv, "PUT", "/back", back)
            assert refused.status_code == 409 and refused.json()["error"]["code"] == "deployment_refused", \
                refused.text
            registry.set("ok")
            again = _admin(srv, "PUT", "/back", back)
            assert again.status_code == 200, again.text

        # 3. a restart while the registry holds every request: served from the verified cache
        registry.set("held")
        with Server(registry_root, env=env, log_path=tmp_path / "serve-again.log") as srv:
            srv.wait_ready(timeout=HANG_GUARD_S)
            for deployment in ("text", "hot", "back"):
                answer = httpx.post(f"{srv.url}/v1/classify", json={"texts": ["hi"], "deployment": deployment},
                                    timeout=HANG_GUARD_S)
                assert answer.status_code == 200, answer.text
            _others_answer(srv)
            assert registry.mode == "held"
        registry.set("ok")
