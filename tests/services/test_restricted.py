"""The same access rules on every transport (services/restricted.py, access.restricted_apis): with
require_key_for_inference on, a matrix over REST, multipart, typed gRPC, OIP REST and OIP gRPC where each cell (an API
category or an inference call, without a key / with a wrong key / with a user key / with an admin key) has the same
outcome on every transport, the status mapped to the transport's code; an unknown deployment is the same 404 too."""
from __future__ import annotations

import hashlib
import http.client
import json
import socket
import threading
import time

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc  # at collection, before anything loads the gateway's OIP stubs
from tritonclient.utils import InferenceServerException

from tests.conftest import NO_CAPACITY_LIMITS, Server
from triserve.services.protocols.grpc_common import grpc_status
from triserve.services.restricted import GRPC_CATEGORIES, rest_category

USER, OPS, SLOW, EDGE = "user-key", "ops-key", "slow-key", "edge-key"
MAX_BYTES = 64 * 1024  # gateway.max_body_bytes and grpc.max_message_bytes of the locked server
SLOW_TEXT_MS = 200  # injected runner latency of the text deployment's primary: a 20 ms budget cannot be met
HOLD_MS = 5000  # ... and of its fallback: a request for it holds its in-flight place that long
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
            {"name": "ops", "admin": True, "sha256": hashlib.sha256(OPS.encode()).hexdigest()},
            {"name": "slow", "sha256": hashlib.sha256(SLOW.encode()).hexdigest(), "rate_per_s": 0.001, "burst": 1},
            {"name": "edge", "sha256": hashlib.sha256(EDGE.encode()).hexdigest(), "rate_per_s": 0.001, "burst": 3}]
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_ACCESS__REQUIRE_KEY_FOR_INFERENCE": "true",
           "TRISERVE_ACCESS__API_KEYS": json.dumps(keys),
           "TRISERVE_ACCESS__RESTRICTED_APIS": json.dumps({"statistics": "admin"}),
           # for the limits matrix below: the access matrix's sequential calls never meet them
           "TRISERVE_ADMISSION__MAX_INFLIGHT_REQUESTS": "1", "TRISERVE_GATEWAY__MAX_BODY_BYTES": str(MAX_BYTES),
           "TRISERVE_GRPC__MAX_MESSAGE_BYTES": str(MAX_BYTES),
           "TRISERVE_RUNNER__FAULTS__LATENCY_MS": json.dumps({"text": SLOW_TEXT_MS, "text_fallback": HOLD_MS})}
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


# ---- the limits matrix: rate, in-flight capacity, size caps, deadlines; one outcome per cell on every transport ----
def _code(status: int, code: str = "") -> str:
    """Every outcome as the gRPC code the project maps it to (services/protocols/grpc_common.grpc_status)."""
    return "OK" if status == 200 else grpc_status(status, code).name


def _rest_code(srv, key, method, path, headers=None, **kw) -> str:
    r = httpx.request(method, srv.url + path, headers={**_headers(key), **(headers or {})}, timeout=30, **kw)
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    error = body.get("error")  # the service's error model {error: {code, ...}}; OIP REST's {error: str, code}
    code = error.get("code", "") if isinstance(error, dict) else body.get("code", "")
    return f"{r.status_code}:{_code(r.status_code, code or '')}"


def _grpc_code(call) -> str:
    try:
        call()
        return "OK"
    except InferenceServerException as exc:
        return str(exc.status()).removeprefix("StatusCode.")
    except grpc.RpcError as exc:
        return exc.code().name


def _typed_code(srv, key, text="book a flight", metadata=()) -> str:
    from triserve_client.errors import TriserveAPIError, TriserveTimeoutError
    from triserve_client.grpc import TriserveGrpcClient

    with TriserveGrpcClient(srv.grpc_target, api_key=key, timeout=30, metadata=metadata) as typed:
        try:
            typed.classify(text, model="primary")
            return "OK"
        except TriserveAPIError as exc:
            return _code(exc.status, exc.code)
        except TriserveTimeoutError:
            return "DEADLINE_EXCEEDED"


def _row(srv, key, text="book a flight", upload=b"x", headers=None) -> dict[str, str]:
    """One inference call per transport (text; multipart: a detection upload), REST answers as 'status:gRPC code'."""
    triton = tgrpc.InferenceServerClient(srv.grpc_target)
    h = {**_headers(key), **(headers or {})}
    tensor = tgrpc.InferInput("TEXT", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([text.encode()], dtype=object))
    try:
        return {"rest": _rest_code(srv, key, "POST", "/v1/classify", headers,
                                   json={"texts": [text], "model": "primary"}),
                "multipart": _rest_code(srv, key, "POST", "/v1/detect/upload", headers,
                                        files={"images": ("a.png", upload)}),
                "typed-grpc": _typed_code(srv, key, text, tuple((headers or {}).items())),
                "oip-rest": _rest_code(srv, key, "POST", "/v2/models/classify/infer", headers, json={"inputs": [
                    {"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [text]}]}),
                "oip-grpc": _grpc_code(lambda: triton.infer("classify", [tensor], headers=h))}
    finally:
        triton.close()


def _same(row: dict[str, str], rest_status: int, grpc_code: str, skip=()) -> None:
    expected = {t: (f"{rest_status}:{grpc_code}" if t in ("rest", "multipart", "oip-rest") else grpc_code)
                for t in row if t not in skip}
    assert {t: v for t, v in row.items() if t not in skip} == expected, row


def test_a_rate_limit_is_one_bucket_for_every_transport(locked):
    """A key with burst 1 at 0.001/s: its one token spent over REST, every transport refuses it, REST included."""
    assert _rest_code(locked, SLOW, "POST", "/v1/classify", json={"texts": ["hi"]}) == "200:OK"
    _same(_row(locked, SLOW), 429, "RESOURCE_EXHAUSTED")


def _stalled(srv, key: str | None) -> tuple[int, dict, socket.socket]:
    """A task request whose headers announce a body that is never sent: the answer, and the open connection."""
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=30)  # a server that waits for the body: timeout
    head = ("POST /v1/classify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {MAX_BYTES - 1}\r\n" + (f"X-API-Key: {key}\r\n" if key else "") + "\r\n")
    sock.sendall(head.encode())
    resp = http.client.HTTPResponse(sock)
    resp.begin()
    return resp.status, json.loads(resp.read()), sock


def test_refusals_come_before_the_body_and_a_request_is_charged_once(locked):
    """The families' REST routes are admitted at the HTTP edge (services/http_edge.py), from the headers: a key with a
    burst of 3 has exactly 3 of 6 requests admitted (one token each, not one at the edge and one in the route), and a
    rate-limited or key-less request whose body never comes is refused all the same (the body is not awaited); the
    connection then serves the next request once the announced body has gone by."""
    codes = [_rest(locked, EDGE, "POST", "/v1/classify", json={"texts": ["hi"]}) for _ in range(6)]
    assert codes == [200, 200, 200, 429, 429, 429]
    for key, status, code in ((EDGE, 429, "rate_limited"), ("wrong", 401, "unauthorized"), (None, 401, "unauthorized")):
        got, body, sock = _stalled(locked, key)
        with sock:
            assert (got, body["error"]["code"]) == (status, code), body
            request = json.dumps({"texts": ["hi"]})
            sock.sendall(b" " * (MAX_BYTES - 1) + (  # the body it announced (discarded), then a request on the same
                "POST /v1/classify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"X-API-Key: {USER}\r\nContent-Length: {len(request)}\r\n\r\n{request}").encode())
            again = http.client.HTTPResponse(sock)
            again.begin()
            assert again.status == 200, again.read()


def test_body_and_message_size_caps(locked):
    _same(_row(locked, USER, text="x" * (2 * MAX_BYTES), upload=b"x" * (2 * MAX_BYTES)), 413, "RESOURCE_EXHAUSTED")


def test_the_in_flight_cap_counts_every_transport(locked):
    """admission.max_inflight_requests=1: a text request to the fallback (whose runner takes HOLD_MS) holds the
    place; text calls on every transport are refused 503 / UNAVAILABLE meanwhile (multipart: the detection family,
    which has its own count, is let through to its answer)."""
    held: dict[str, int] = {}
    sender = threading.Thread(target=lambda: held.setdefault("status", httpx.post(
        locked.url + "/v1/classify", json={"texts": ["book a flight"], "model": "fallback"}, headers=_headers(USER),
        timeout=60).status_code))
    sender.start()
    try:
        for _ in range(200):  # until the held request has its place (bounded: 10 s); /metrics takes none
            metrics = httpx.get(locked.url + "/metrics", headers=_headers(USER), timeout=30).text
            if 'triserve_inflight_requests{family="text"} 1.0' in metrics:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the held request never showed in flight")
        row = _row(locked, USER)
    finally:
        sender.join(60)
    assert not row["multipart"].startswith("503"), row
    _same(row, 503, "UNAVAILABLE", skip=("multipart",))
    assert held["status"] == 200
    assert _rest_code(locked, USER, "POST", "/v1/classify", json={"texts": ["x"]}) == "200:OK"  # free again


def test_a_deadline_that_cannot_be_met(locked):
    """A 20 ms budget on the text deployment's primary, whose runner takes 200 ms: refused for its deadline on every
    transport (REST 504, or 503 deadline_unattainable once admission has measured the runner; gRPC DEADLINE_EXCEEDED
    either way, as grpc_status maps them). Multipart is an image route: its deadline is the same header."""
    row = _row(locked, USER, headers={"x-request-timeout-ms": "20"})
    row.pop("multipart")  # an image route: its deadline is the same header
    assert all(v.endswith("DEADLINE_EXCEEDED") for v in row.values()), row
    assert all(v.split(":")[0] in ("504", "503") for k, v in row.items() if "rest" in k), row

