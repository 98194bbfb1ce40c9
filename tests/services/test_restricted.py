"""The same access rules on every transport (services/restricted.py, access.restricted_apis): with
require_key_for_inference on, a matrix over REST, multipart, typed gRPC, OIP REST and OIP gRPC where each cell (an API
category or an inference call, without a key / with a wrong key / with a user key / with an admin key) has the same
outcome on every transport, the status mapped to the transport's code; an unknown deployment is the same 404 too."""
from __future__ import annotations

import hashlib
import json

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc  # at collection, before anything loads the gateway's OIP stubs
from tritonclient.utils import InferenceServerException

from services.restricted import GRPC_CATEGORIES, rest_category
from tests.conftest import NO_CAPACITY_LIMITS, Server

USER, OPS = "user-key", "ops-key"
GRPC_CODES = {200: "OK", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}


@pytest.mark.parametrize("path, category", [
    ("/livez", "health"), ("/readyz", "health"), ("/v2/health/ready", "health"), ("/v2/models/text/ready", "health"),
    ("/v2/models/text/versions/1/ready", "health"), ("/metrics", "metrics"), ("/console/api/summary", "metrics"),
    ("/console/static/app.js", None), ("/v2", "metadata"),
    ("/v2/models/text", "metadata"), ("/v1/models", "metadata"), ("/schema.json", "metadata"),
    ("/docs", "metadata"), ("/v2/models/text/config", "model-config"), ("/v2/repository/index", "model-repository"),
    ("/v2/models/stats", "statistics"), ("/v2/models/text/versions/1/stats", "statistics"),
    ("/v1/classify", None), ("/v2/models/text/infer", None), ("/admin/models", None), ("/v2/models/stats/x", None)])
def test_every_rest_path_has_its_category(path, category):
    assert rest_category(path) == category


def test_every_oip_rpc_but_inference_has_a_category():
    """Read from the served proto (its generated module would clash with tritonclient's in one process)."""
    import re
    from pathlib import Path

    proto = (Path(__file__).resolve().parents[2] / "services/protocols/protos/grpc_predict_v2.proto").read_text()
    methods = {f"/inference.GRPCInferenceService/{m}" for m in re.findall(r"^\s*rpc (\w+)\(", proto, re.M)}
    assert len(methods) == 9
    assert methods - set(GRPC_CATEGORIES) == {"/inference.GRPCInferenceService/ModelInfer"}


@pytest.fixture(scope="module")
def locked(tiny_registry, tmp_path_factory):
    keys = [{"name": "user", "sha256": hashlib.sha256(USER.encode()).hexdigest()},
            {"name": "ops", "admin": True, "sha256": hashlib.sha256(OPS.encode()).hexdigest()}]
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_ACCESS__REQUIRE_KEY_FOR_INFERENCE": "true",
           "TRISERVE_ACCESS__API_KEYS": json.dumps(keys),
           "TRISERVE_ACCESS__RESTRICTED_APIS": json.dumps({"statistics": "admin"})}
    with Server(tiny_registry.root, env=env, log_path=tmp_path_factory.mktemp("logs") / "locked.log") as srv:
        srv.wait_ready()
        yield srv


def _headers(key: str | None) -> dict[str, str]:
    return {} if key is None else {"x-api-key": key}  # lower case: gRPC metadata keys must be


def _rest(srv, key, method, path, **kw) -> int:
    return httpx.request(method, srv.url + path, headers=_headers(key), timeout=30, **kw).status_code


def _grpc(call) -> int:
    try:
        call()
        return 200
    except InferenceServerException as exc:
        code = str(exc.status()).removeprefix("StatusCode.")
    except grpc.RpcError as exc:
        code = exc.code().name
    statuses = {v: k for k, v in GRPC_CODES.items()}
    assert code in statuses, f"unexpected gRPC status {code}"
    return statuses[code]


def _typed_status(srv, key, deployment=None) -> int:
    from triserve_client.errors import TriserveAPIError
    from triserve_client.grpc import TriserveGrpcClient

    with TriserveGrpcClient(srv.grpc_target, api_key=key, timeout=30) as typed:
        try:
            typed.classify("book a flight", deployment=deployment)
            return 200
        except TriserveAPIError as exc:
            return exc.status


def _cells(srv, key: str | None) -> dict[str, dict[str, int]]:
    """category or call -> transport -> status (gRPC codes read back as HTTP statuses)."""
    triton = tgrpc.InferenceServerClient(srv.grpc_target)
    h = _headers(key)
    text = tgrpc.InferInput("TEXT", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"book a flight"], dtype=object))
    png = httpx.get(srv.url + "/livez").content  # any bytes: refused before they are read when no key is given
    try:
        return {
            "health": {"rest": _rest(srv, key, "GET", "/v2/health/ready"),
                       "oip-grpc": _grpc(lambda: triton.is_server_ready(headers=h) or (_ for _ in ()).throw(
                           AssertionError("not ready")))},
            "metadata": {"rest": _rest(srv, key, "GET", "/v1/models"),
                         "oip-rest": _rest(srv, key, "GET", "/v2/models/classify"),
                         "oip-grpc": _grpc(lambda: triton.get_model_metadata("classify", headers=h))},
            "model-config": {"oip-rest": _rest(srv, key, "GET", "/v2/models/classify/config"),
                             "oip-grpc": _grpc(lambda: triton.get_model_config("classify", headers=h))},
            "model-repository": {"oip-rest": _rest(srv, key, "POST", "/v2/repository/index", json={}),
                                 "oip-grpc": _grpc(lambda: triton.get_model_repository_index(headers=h))},
            "statistics": {"oip-rest": _rest(srv, key, "GET", "/v2/models/stats"),
                           "oip-grpc": _grpc(lambda: triton.get_inference_statistics(headers=h))},
            "metrics": {"rest": _rest(srv, key, "GET", "/metrics")},
            "inference": {"rest": _rest(srv, key, "POST", "/v1/classify", json={"texts": ["book a flight"]}),
                          "multipart": _rest(srv, key, "POST", "/v1/detect/upload", files={"images": ("a.png", png)})
                          if key is None else _rest(srv, key, "POST", "/v1/classify", json={"texts": ["hi"]}),
                          "typed-grpc": _typed_status(srv, key),
                          "oip-rest": _rest(srv, key, "POST", "/v2/models/classify/infer", json={"inputs": [
                              {"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["book a flight"]}]}),
                          "oip-grpc": _grpc(lambda: triton.infer("classify", [text], headers=h))},
            "unknown deployment": {"rest": _rest(srv, key, "POST", "/v1/classify",
                                                 json={"texts": ["x"], "deployment": "nope"}),
                                   "typed-grpc": _typed_status(srv, key, deployment="nope"),
                                   "oip-rest": _rest(srv, key, "GET", "/v2/models/nope"),
                                   "oip-grpc": _grpc(lambda: triton.get_model_metadata("nope", headers=h))},
            "admin": {"rest": _rest(srv, key, "GET", "/admin/models")},
        }
    finally:
        triton.close()


@pytest.mark.parametrize("key, expected", [
    (None, {"health": 200, "metadata": 401, "model-config": 401, "model-repository": 401, "statistics": 401,
            "metrics": 401, "inference": 401, "unknown deployment": 401, "admin": 401}),
    ("wrong", {"health": 200, "metadata": 401, "model-config": 401, "model-repository": 401, "statistics": 401,
               "metrics": 401, "inference": 401, "unknown deployment": 401, "admin": 401}),
    (USER, {"health": 200, "metadata": 200, "model-config": 200, "model-repository": 200, "statistics": 403,
            "metrics": 200, "inference": 200, "unknown deployment": 404, "admin": 403}),
    (OPS, {"health": 200, "metadata": 200, "model-config": 200, "model-repository": 200, "statistics": 200,
           "metrics": 200, "inference": 200, "unknown deployment": 404, "admin": 200}),
], ids=["no key", "wrong key", "user key", "admin key"])
def test_every_transport_gives_the_same_answer(locked, key, expected):
    cells = _cells(locked, key)
    got = {row: sorted(set(by_transport.values())) for row, by_transport in cells.items()}
    assert got == {row: [status] for row, status in expected.items()}, cells
