"""The model repository end to end through a real `bentoml serve`: several deployments per family side by side by
name over REST, typed gRPC and OIP; unknown names; a fallback with another label set refused at startup; a deployment
added, replaced and removed at run time under load with no failed request, and persisted across a restart."""
from __future__ import annotations

import base64
import hashlib
import json
import shutil
import threading
import time

import grpc
import httpx
import pytest
import yaml

from tests.conftest import NO_CAPACITY_LIMITS, Server
from tests.services.test_gateway import png_bytes
from triserve.models.registry import LocalRegistry
from triserve.services.protocols.generated import triserve_pb2 as tpb
from triserve.services.protocols.generated import triserve_pb2_grpc as tpb_grpc

ADMIN = "repository-admin"
HEADERS = {"X-API-Key": ADMIN}
SERIES = {"values": [340.0 + 0.1 * i + (i % 12) for i in range(60)], "start": "2000-01-01T00:00:00", "frequency": "MS",
          "horizon": 3}
REPOSITORY = {
    "defaults": {"text": "text"},
    "deployments": [
        {"name": "detection", "family": "detection", "model": {"name": "yolo-shapes"},
         "fallback": {"name": "yolo-shapes-lite"}},
        {"name": "shapes-lite", "family": "detection", "model": {"name": "yolo-shapes-lite"}},
        {"name": "text", "family": "text", "model": {"name": "minilm-intent"},
         "fallback": {"name": "minilm-intent-int8", "batching": {"per_item": True}}},
        {"name": "text-int8", "family": "text", "model": {"name": "minilm-intent-int8", "batching": {"per_item": True}},
         "limits": {"max_texts": 2}},
        {"name": "forecast", "family": "forecast", "model": {"name": "forecast-global"},
         "fallback": {"name": "forecast-theta"}},
        # a user's window forecaster (families/forecast/importers/onnx_graph.py) backed by the numpy Theta fallback
        {"name": "user-load", "family": "forecast", "model": {"name": "user-window"},
         "fallback": {"name": "forecast-theta"}},
    ]}


def _env(models_file, state_file) -> dict:
    return {**NO_CAPACITY_LIMITS, "TRISERVE_MODELS_FILE": str(models_file),
            "TRISERVE_DEPLOYMENTS_STATE_FILE": str(state_file), "TRISERVE_ROLLOUT__RETIRE_AFTER_S": "1",
            "TRISERVE_ROLLOUT__REFRESH_S": "0.2", "TRISERVE_ACCESS__RATE_PER_S": "100000",
            "TRISERVE_ACCESS__API_KEYS": json.dumps([{"name": "ops", "admin": True,
                                                      "sha256": hashlib.sha256(ADMIN.encode()).hexdigest()}])}


@pytest.fixture(scope="module")
def registry(tiny_registry, tmp_path_factory) -> LocalRegistry:
    """The tiny registry plus 'other-labels': the lite detector published with another label set."""
    root = tmp_path_factory.mktemp("repo") / "registry"
    shutil.copytree(tiny_registry.root, root)
    reg = LocalRegistry(root)
    src, manifest = reg.load_verified("yolo-shapes-lite", "stable")
    staging = root.parent / "staging-other"
    shutil.copytree(src, staging)
    reg.publish(staging, manifest.model_copy(update={"name": "other-labels", "labels": ["cat", "dog", "bus"]}))
    reg.set_alias("other-labels", "stable", manifest.version, by="test")
    from tests.families.forecast.importers.test_onnx_graph import window_graph
    from triserve.families.forecast.importers.onnx_graph import publish_forecast_onnx

    publish_forecast_onnx(window_graph(root.parent / "user-window.onnx", quantiles=3), "user-window", "1.0.0", reg,
                          frequencies=["h", "D"], quantiles=[0.1, 0.5, 0.9], alias="stable")
    return reg


@pytest.fixture(scope="module")
def served(registry, tmp_path_factory):
    d = tmp_path_factory.mktemp("repo-serve")
    models_file = d / "models.yaml"
    models_file.write_text(yaml.safe_dump(REPOSITORY))
    env = _env(models_file, d / "state" / "deployments.json")
    with Server(registry.root, env=env, log_path=d / "serve.log") as srv:
        srv.wait_ready()
        yield srv


def post(srv, path: str, **kw) -> httpx.Response:
    return httpx.post(f"{srv.url}{path}", timeout=60, **kw)


def admin(srv, method: str, path: str, body: dict | None = None) -> httpx.Response:
    return httpx.request(method, f"{srv.url}/admin/deployments{path}", json=body, headers=HEADERS, timeout=120)


def test_models_lists_every_deployment_with_family_default_and_versions(served, registry):
    body = httpx.get(f"{served.url}/v1/models", timeout=30).json()
    deps = {d["name"]: d for d in body["deployments"]}
    assert list(deps) == [d["name"] for d in REPOSITORY["deployments"]]
    assert {n for n, d in deps.items() if d["default"]} == {"detection", "text", "forecast"}
    lite = deps["shapes-lite"]
    assert lite["family"] == "detection" and lite["ready"] and "fallback" not in lite
    assert lite["model"]["name"] == "yolo-shapes-lite"
    assert lite["model"]["version"] == registry.resolve("yolo-shapes-lite", "stable")
    assert deps["text"]["fallback"]["name"] == "minilm-intent-int8" and deps["text"]["fallback"]["loaded_versions"]


IMAGE = {"images": [{"data": base64.b64encode(png_bytes()).decode()}]}


@pytest.mark.parametrize("path, body, asked, answered, model", [
    ("/v1/classify", {"texts": ["book a table for two"]}, "text-int8", "text-int8", "minilm-intent-int8"),
    ("/v1/classify", {"texts": ["book a table for two"]}, None, "text", "minilm-intent"),
    ("/v1/detect", IMAGE, "shapes-lite", "shapes-lite", "yolo-shapes-lite"),
    ("/v1/detect", IMAGE, None, "detection", "yolo-shapes"),
    ("/v1/forecast", SERIES, "forecast", "forecast", "forecast-global"),
])
def test_rest_routes_by_deployment_name_and_to_the_family_default(served, path, body, asked, answered, model):
    resp = post(served, path, json={**body, **({"deployment": asked} if asked else {})})
    assert resp.status_code == 200, resp.text
    got = resp.json()
    assert (got["deployment"], got["model"]["name"], got["degraded"]) == (answered, model, False)


def test_imported_window_forecaster_serves_its_contract_and_falls_back_to_theta(served):
    """The user's graph answers its declared frequencies (seasonal naive at period 12: the median repeats the value
    12 steps back) with its own quantile levels; another frequency or a short series is refused by its contract;
    model=fallback answers with the Theta method on the same deployment."""
    values = [float(100 + (i % 12)) for i in range(30)]
    body = {"values": values, "start": "2026-01-01T00:00:00", "frequency": "h", "deployment": "user-load"}
    resp = post(served, "/v1/forecast", json=body)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["model"]["name"] == "user-window" and len(out["forecast"]) == 6
    assert [p["point"] for p in out["forecast"]] == [values[30 - 12 + h] for h in range(6)]
    assert list(out["forecast"][0]["quantiles"]) == ["0.1", "0.5", "0.9"] and out["forecast"][0]["lower_90"] is None
    assert out["input"] == {"frequency": "h", "frequency_inferred": False, "sorted": False, "duplicates_merged": 0,
                            "imputed": 0, "points": 30, "used": 24, "padded": 0, "method": "model",
                            "method_weights": {"model": 1.0}, "backtest_mase": None, "backtest_origins": 0,
                            "interval_calibration": "model", "level_shift": None,
                            "covariates": None, "static": None}  # a user's window model answers alone
    refused = post(served, "/v1/forecast", json={**body, "frequency": "MS"}).json()["error"]
    assert refused["code"] == "unsupported_frequency" and refused["details"]["supported"] == ["h", "D"]
    short = post(served, "/v1/forecast", json={**body, "values": values[:10]}).json()["error"]
    assert short["code"] == "series_too_short" and short["details"]["required"] == 24
    fb = post(served, "/v1/forecast", json={**body, "model": "fallback"}).json()
    assert fb["degraded"] is True and fb["model"]["name"] == "forecast-theta" and len(fb["forecast"]) == 6
    assert fb["input"]["method"] == "theta" and fb["input"]["interval_calibration"] == "model"


def test_deployment_limits_override_the_family_limits(served):
    three = {"texts": ["a", "b", "c"]}
    assert post(served, "/v1/classify", json=three).status_code == 200
    resp = post(served, "/v1/classify", json={**three, "deployment": "text-int8"})
    assert resp.status_code == 422 and resp.json()["error"]["details"]["limit"] == 2


def test_unknown_deployment_is_404_with_the_known_names_on_every_protocol(served):
    resp = post(served, "/v1/classify", json={"texts": ["hi"], "deployment": "nope"})
    assert resp.status_code == 404
    err = resp.json()["error"]
    assert err["code"] == "unknown_deployment" and err["details"]["known"] == ["text", "text-int8"]
    other_family = post(served, "/v1/classify", json={"texts": ["hi"], "deployment": "shapes-lite"})
    assert other_family.status_code == 404  # a detection deployment is not a text one
    with grpc.insecure_channel(served.grpc_target) as ch:
        with pytest.raises(grpc.RpcError) as e:
            tpb_grpc.TriserveStub(ch).Classify(tpb.ClassifyRequest(texts=["hi"], deployment="nope"), timeout=30)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    oip = post(served, "/v2/models/nope/infer", json={"inputs": []})
    assert oip.status_code == 404 and "text-int8" in oip.json()["details"]["models"]


def test_no_fallback_deployment_refuses_model_fallback(served):
    resp = post(served, "/v1/classify", json={"texts": ["hi"], "deployment": "text-int8", "model": "fallback"})
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "no_fallback"


def test_typed_grpc_and_oip_route_by_deployment_name(served):
    with grpc.insecure_channel(served.grpc_target) as ch:
        stub = tpb_grpc.TriserveStub(ch)
        named = stub.Classify(tpb.ClassifyRequest(texts=["what is my balance"], deployment="text-int8"), timeout=30)
        default = stub.Classify(tpb.ClassifyRequest(texts=["what is my balance"]), timeout=30)
        det = stub.Detect(tpb.DetectRequest(images=[png_bytes()], deployment="shapes-lite"), timeout=30)
        fc = stub.Forecast(tpb.ForecastRequest(values=SERIES["values"], start=SERIES["start"], frequency="MS",
                                                   horizon=3),
                           timeout=30)
    assert (named.deployment, named.model.name) == ("text-int8", "minilm-intent-int8")
    assert (default.deployment, default.model.name) == ("text", "minilm-intent")
    assert (det.deployment, det.model.name) == ("shapes-lite", "yolo-shapes-lite")
    assert fc.deployment == "forecast" and len(fc.forecast) == 3
    text_input = {"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["what is my balance"]}
    for name, model in (("text-int8", "minilm-intent-int8"), ("classify", "minilm-intent"), ("text", "minilm-intent")):
        resp = post(served, f"/v2/models/{name}/infer", json={"inputs": [text_input]})
        assert resp.status_code == 200, resp.text
        params = resp.json()["parameters"]
        assert params["served_model"] == model and params["deployment"] == ("text-int8" if name == "text-int8"
                                                                            else "text")
    index = {m["name"] for m in post(served, "/v2/repository/index").json()}
    assert {"detection", "shapes-lite", "text", "text-int8", "forecast", "detect", "classify"} <= index


def test_fallback_with_another_label_set_is_refused_at_startup(registry, tmp_path):
    bad = {"deployments": [{"name": "detection", "family": "detection", "model": {"name": "yolo-shapes"},
                            "fallback": {"name": "other-labels"}}] + REPOSITORY["deployments"][2:]}
    models_file = tmp_path / "models.yaml"
    models_file.write_text(yaml.safe_dump(bad))
    with Server(registry.root, env=_env(models_file, tmp_path / "state.json"), log_path=tmp_path / "serve.log") as srv:
        deadline = time.monotonic() + 120
        status = {}
        while time.monotonic() < deadline:
            try:
                status = httpx.get(f"{srv.url}/v1/models", timeout=5).json()
                if status.get("errors"):
                    break
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(1)
        assert "labels" in status["errors"]["detection"] and "other-labels" in status["errors"]["detection"]
        assert httpx.get(f"{srv.url}/readyz", timeout=5).status_code == 503
        refused = post(srv, "/v1/detect", json={"images": [{"data": base64.b64encode(png_bytes()).decode()}]})
        assert refused.status_code == 503
    assert "REFUSED" in (tmp_path / "serve.log").read_text()


class Load:
    """Closed-loop text requests from a few threads until stopped; every status is kept."""

    def __init__(self, srv, deployment: str | None = None, threads: int = 4):
        self.srv, self.deployment, self.statuses, self.errors = srv, deployment, [], []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        body = {"texts": ["what is my balance"], **({"deployment": self.deployment} if self.deployment else {})}
        with httpx.Client(timeout=30) as client:
            for _ in range(5000):  # bounded
                if self._stop.is_set():
                    return
                r = client.post(f"{self.srv.url}/v1/classify", json=body)
                self.statuses.append(r.status_code)
                if r.status_code != 200:
                    self.errors.append(r.text[:300])

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)


def test_add_replace_remove_at_run_time_under_load_and_persist_across_restart(registry, tmp_path):
    models_file = tmp_path / "models.yaml"
    models_file.write_text(yaml.safe_dump(REPOSITORY))
    state = tmp_path / "state" / "deployments.json"
    env = _env(models_file, state)
    with Server(registry.root, env=env, log_path=tmp_path / "serve.log") as srv:
        srv.wait_ready()
        with Load(srv) as steady:
            time.sleep(1.0)
            added = admin(srv, "PUT", "/intent-b", {"family": "text", "model": {"name": "minilm-intent-int8"},
                                                   "fallback": {"name": "minilm-intent"}})
            assert added.status_code == 200, added.text
            assert added.json()["action"] == "added"
            with Load(srv, "intent-b") as newcomer:
                time.sleep(1.0)
                replaced = admin(srv, "PUT", "/intent-b", {"family": "text", "model": {"name": "minilm-intent"}})
                assert replaced.status_code == 200 and replaced.json()["action"] == "updated", replaced.text
                time.sleep(2.0)  # past retire_after_s: the replaced model and the dropped fallback are unloaded
            refused = admin(srv, "PUT", "/intent-c", {"family": "text", "model": {"name": "yolo-shapes"}})
            assert refused.status_code == 409 and "detection model" in refused.json()["error"]["message"]
            time.sleep(0.5)
        assert steady.statuses and set(steady.statuses) == {200}, steady.errors[:3]
        assert newcomer.statuses and set(newcomer.statuses) == {200}, newcomer.errors[:3]
        after = post(srv, "/v1/classify", json={"texts": ["hi"], "deployment": "intent-b"}).json()
        assert after["model"]["name"] == "minilm-intent"
        assert post(srv, "/v1/classify", json={"texts": ["hi"], "deployment": "intent-b",
                                                "model": "fallback"}).status_code == 422  # its fallback is gone
        assert admin(srv, "DELETE", "/nope").status_code == 404
        assert admin(srv, "DELETE", "/text").status_code == 409  # the configured default of its family
    saved = json.loads(state.read_text())
    assert [d["name"] for d in saved["deployments"]][-1] == "intent-b"
    with Server(registry.root, env=env, log_path=tmp_path / "serve-again.log") as srv:  # the same set after restart
        srv.wait_ready()
        assert "intent-b" in {d["name"] for d in httpx.get(f"{srv.url}/v1/models", timeout=30).json()["deployments"]}
        assert post(srv, "/v1/classify", json={"texts": ["hi"], "deployment": "intent-b"}).status_code == 200
        removed = admin(srv, "DELETE", "/intent-b")
        assert removed.status_code == 200 and removed.json()["action"] == "removed"
        gone = post(srv, "/v1/classify", json={"texts": ["hi"], "deployment": "intent-b"})
        assert gone.status_code == 404
