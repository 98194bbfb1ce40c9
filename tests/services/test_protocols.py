"""gRPC and the Open Inference Protocol v2 through a real `bentoml serve` (tiny models), with stock tritonclient:
metadata and readiness, tensor-model inference against in-process ONNX Runtime, the same answer over typed REST,
typed gRPC and OIP v2 (HTTP and gRPC), the error mapping, health, reflection and deadlines.

This process must not import triserve.services.protocols.grpc_oip / generated.grpc_predict_v2_pb2: tritonclient.grpc
registers the same standard `inference.*` protobuf names.
"""
from __future__ import annotations

import base64
import json
from types import SimpleNamespace

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from tritonclient.utils import InferenceServerException

from scripts.common import ort_session
from tests.services.test_gateway import png_bytes
from triserve.families.text.preprocess import TextTokenizer
from triserve.services.protocols.generated import triserve_pb2 as tpb
from triserve.services.protocols.generated import triserve_pb2_grpc as tpb_grpc

TEXTS = ["what is my balance", "book a table for two at an italian restaurant tonight please", "hi"]
SERIES = [float(v) for v in (340 + np.sin(np.arange(48) / 12 * 2 * np.pi) * 3 + np.arange(48) * 0.1).round(3)]


@pytest.fixture(scope="module")
def http_client(server):
    return thttp.InferenceServerClient(server.url.removeprefix("http://"), network_timeout=60)


@pytest.fixture(scope="module")
def grpc_client(server):
    client = tgrpc.InferenceServerClient(server.grpc_target)
    yield client
    client.close()


@pytest.fixture(scope="module")
def channel(server):
    with grpc.insecure_channel(server.grpc_target) as ch:
        yield ch


@pytest.fixture(scope="module")
def typed(channel):
    return tpb_grpc.TriserveStub(channel)


def manifest(registry, name):
    return registry.load_verified(name, "stable")


def bytes_input(module, name, items, binary=True):
    inp = module.InferInput(name, [len(items)], "BYTES")
    data = np.array([i.encode() if isinstance(i, str) else i for i in items], dtype=object)
    if module is thttp:
        inp.set_data_from_numpy(data, binary_data=binary)
    else:
        inp.set_data_from_numpy(data)
    return inp


# --- metadata and readiness ---------------------------------------------------------------------------------------
def test_oip_metadata_and_readiness_http_and_grpc(http_client, grpc_client, tiny_registry):
    _, text = manifest(tiny_registry, "minilm-intent")
    _, det = manifest(tiny_registry, "yolo-shapes")
    assert http_client.is_server_live() and http_client.is_server_ready()
    assert grpc_client.is_server_live() and grpc_client.is_server_ready()
    assert http_client.get_server_metadata()["name"] == grpc_client.get_server_metadata().name == "triserve"
    meta = http_client.get_model_metadata("minilm-intent")
    assert meta["versions"] == [text.version] and meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"] == [{"name": "input_ids", "datatype": "INT64", "shape": [-1, -1]},
                              {"name": "attention_mask", "datatype": "INT64", "shape": [-1, -1]}]
    assert meta["outputs"] == [{"name": text.outputs[0].name, "datatype": "FP32", "shape": [-1, len(text.labels)]}]
    gmeta = grpc_client.get_model_metadata("yolo-shapes")
    size = det.preprocess.imgsz
    assert (gmeta.inputs[0].datatype, list(gmeta.inputs[0].shape)) == ("FP32", [-1, 3, size, size])
    assert list(gmeta.versions) == [det.version]
    assert [o["name"] for o in http_client.get_model_metadata("classify")["outputs"]] == \
        ["LABEL", "SCORE", "TOP_K_LABELS", "TOP_K_SCORES"]
    for model in ("forecast-theta", "detect", "forecast"):
        assert http_client.is_model_ready(model) and grpc_client.is_model_ready(model)
    assert http_client.is_model_ready("minilm-intent", model_version=text.version)
    with pytest.raises(InferenceServerException) as http_err:
        http_client.get_model_metadata("no-such-model")
    assert http_err.value.status() == "404" and http_err.value.message().startswith("model_not_found:")
    with pytest.raises(InferenceServerException) as grpc_err:
        grpc_client.get_model_metadata("minilm-intent", model_version="0.0.0-nope")
    assert grpc_err.value.status() == "StatusCode.NOT_FOUND"


# --- tensor models ------------------------------------------------------------------------------------------------
def test_tensor_model_inference_matches_onnxruntime(http_client, grpc_client, tiny_registry):
    directory, m = manifest(tiny_registry, "minilm-intent")
    tok = TextTokenizer(directory / m.preprocess.tokenizer_file, m.preprocess.max_length)
    ids, mask = tok.encode_padded(TEXTS)
    expected = ort_session(directory / m.model_file).run(None, {"input_ids": ids, "attention_mask": mask})[0]
    out = m.outputs[0].name
    for binary in (True, False):  # binary tensor extension (tritonclient's default) and plain JSON
        inputs = [thttp.InferInput("input_ids", list(ids.shape), "INT64"),
                  thttp.InferInput("attention_mask", list(mask.shape), "INT64")]
        inputs[0].set_data_from_numpy(ids, binary_data=binary)
        inputs[1].set_data_from_numpy(mask, binary_data=binary)
        result = http_client.infer("minilm-intent", inputs,
                                   outputs=[thttp.InferRequestedOutput(out, binary_data=binary)])
        assert np.allclose(result.as_numpy(out), expected, atol=1e-5)
        assert result.get_response()["parameters"]["served_version"] == m.version
    ginputs = [tgrpc.InferInput("input_ids", list(ids.shape), "INT64"),
               tgrpc.InferInput("attention_mask", list(mask.shape), "INT64")]
    ginputs[0].set_data_from_numpy(ids)
    ginputs[1].set_data_from_numpy(mask)
    assert np.allclose(grpc_client.infer("minilm-intent", ginputs).as_numpy(out), expected, atol=1e-5)

    fdir, fm = manifest(tiny_registry, "forecast-global")
    rng = np.random.default_rng(0)
    c = fm.preprocess.context
    feeds = {"context": rng.normal(size=(3, c)).astype(np.float32), "mask": np.ones((3, c), np.float32),
             "freq": np.array([0, 4, 8], np.int64), "features": rng.uniform(-1, 1, (3, 6)).astype(np.float32)}
    tensors = []
    for name, arr in feeds.items():
        tensors.append(tgrpc.InferInput(name, list(arr.shape), "INT64" if arr.dtype == np.int64 else "FP32"))
        tensors[-1].set_data_from_numpy(arr)
    got = grpc_client.infer("forecast-global", tensors).as_numpy(fm.outputs[0].name)
    assert np.allclose(got, ort_session(fdir / fm.model_file).run(None, feeds)[0], atol=1e-5)


# --- one answer whatever the protocol -----------------------------------------------------------------------------
def test_classify_same_answer_over_rest_typed_grpc_and_oip(server, http_client, grpc_client, typed):
    rest = httpx.post(f"{server.url}/v1/classify", json={"texts": TEXTS, "top_k": 3}, timeout=60).json()
    labels = [r["label"] for r in rest["results"]]
    scores = [r["score"] for r in rest["results"]]
    top = [[x["label"] for x in r["top_k"]] for r in rest["results"]]

    resp, call = typed.Classify.with_call(tpb.ClassifyRequest(texts=TEXTS, top_k=3),
                                          metadata=[("x-request-id", "proto-1")], timeout=60)
    assert [r.label for r in resp.results] == labels and [[x.label for x in r.top_k] for r in resp.results] == top
    assert np.allclose([r.score for r in resp.results], scores, atol=1e-6)
    assert resp.request_id == "proto-1" and ("x-request-id", "proto-1") in tuple(call.trailing_metadata())
    assert resp.model.name == rest["model"]["name"] and resp.timings.total_ms > 0 and not resp.degraded

    for name, result in (
            ("http", http_client.infer("classify", [bytes_input(thttp, "TEXT", TEXTS, binary=False)],
                                       parameters={"top_k": 3}, headers={"X-Request-ID": "oip-http-1"})),
            ("grpc", grpc_client.infer("classify", [bytes_input(tgrpc, "TEXT", TEXTS)], parameters={"top_k": 3}))):
        assert [b.decode() for b in result.as_numpy("LABEL")] == labels, name
        assert np.allclose(result.as_numpy("SCORE"), scores, atol=1e-6), name
        assert [[b.decode() for b in row] for row in result.as_numpy("TOP_K_LABELS")] == top, name
    params = result.get_response().parameters
    assert params["served_model"].string_param == rest["model"]["name"]
    assert params["degraded"].bool_param is False


@pytest.mark.parametrize("frequency", ["YS", "QS", "MS", "W", "D", "h", "30min", "15min", "min"])
def test_every_frequency_same_forecast_over_rest_typed_grpc_and_oip(server, grpc_client, typed, frequency):
    """Timestamps only (the frequency is inferred), a series at 1e12: the three protocols give the same forecast."""
    from triserve.families.forecast.features import MAX_HORIZON, step_timestamps

    n = 40
    stamps = [f"{t}Z" for t in step_timestamps(np.datetime64("2001-01-01T00:00:00", "s"), frequency, n)]
    values = [1e12 + 1e9 * np.sin(i / 3) for i in range(n)]
    rest = httpx.post(f"{server.url}/v1/forecast", json={"values": values, "timestamps": stamps}, timeout=60).json()
    assert rest["input"]["frequency"] == frequency and len(rest["forecast"]) == MAX_HORIZON[frequency]
    proto = typed.Forecast(tpb.ForecastRequest(values=values, timestamps=stamps), timeout=60)
    assert proto.input.frequency == frequency and proto.input.frequency_inferred
    assert [p.point for p in proto.forecast] == [p["point"] for p in rest["forecast"]]
    vin = tgrpc.InferInput("VALUES", [n], "FP64")
    vin.set_data_from_numpy(np.array(values))
    tin = bytes_input(tgrpc, "TIMESTAMPS", stamps)
    oip = grpc_client.infer("forecast", [vin, tin])
    assert oip.as_numpy("POINT").tolist() == [p["point"] for p in rest["forecast"]]
    assert [t.decode() for t in oip.as_numpy("TIMESTAMPS")] == [p["timestamp"] for p in rest["forecast"]]


def test_forecast_covariates_over_typed_grpc_match_rest(server, typed):
    rng = np.random.default_rng(1)
    promo = (rng.random(127) < 0.2).astype(float)
    values = (200 + 50 * promo + rng.normal(0, 3, 127))[:120].round(3).tolist()
    past, future = promo[:120].tolist(), promo[120:].tolist()
    rest = httpx.post(f"{server.url}/v1/forecast", timeout=60, json={
        "values": values, "start": "2024-01-01T00:00:00", "frequency": "D", "horizon": 7,
        "covariates": {"promo": past}, "future_covariates": {"promo": future}, "calendar": ["weekday"]}).json()
    proto = typed.Forecast(tpb.ForecastRequest(
        values=values, start="2024-01-01T00:00:00", frequency="D", horizon=7, calendar=["weekday"],
        covariates={"promo": tpb.Doubles(values=past)}, future_covariates={"promo": tpb.Doubles(values=future)}),
        timeout=60)
    assert [p.point for p in proto.forecast] == [p["point"] for p in rest["forecast"]]
    assert proto.input.covariates.used and rest["input"]["covariates"]["used"]
    effects = rest["input"]["covariates"]["effects"]
    assert [e.name for e in proto.input.covariates.effects] == [e["name"] for e in effects]


def test_detect_and_forecast_pipelines_match_rest(server, http_client, grpc_client, typed):
    raw = png_bytes(seed=3)
    rest = httpx.post(f"{server.url}/v1/detect", timeout=60, json={
        "images": [{"data": base64.b64encode(raw).decode()}], "conf_threshold": 0.001, "max_detections": 20}).json()
    oip = grpc_client.infer("detect", [bytes_input(tgrpc, "IMAGE", [raw])],
                            parameters={"conf_threshold": 0.001, "max_detections": 20})
    assert json.loads(oip.as_numpy("DETECTIONS")[0]) == rest["results"][0]
    proto = typed.Detect(tpb.DetectRequest(images=[raw], conf_threshold=0.001, max_detections=20), timeout=60)
    assert [list(d.box) for d in proto.results[0].detections] == [d["box"] for d in rest["results"][0]["detections"]]

    body = {"values": SERIES, "start": "1990-01-01T00:00:00", "frequency": "MS", "horizon": 6}
    rest = httpx.post(f"{server.url}/v1/forecast", json=body, timeout=60).json()
    values = thttp.InferInput("VALUES", [len(SERIES)], "FP64")
    values.set_data_from_numpy(np.array(SERIES, dtype=np.float64))
    oip = http_client.infer("forecast", [values],
                            parameters={"start": "1990-01-01T00:00:00", "frequency": "MS", "horizon": 6})
    assert oip.as_numpy("POINT").tolist() == [p["point"] for p in rest["forecast"]]  # FP64: exact
    assert oip.as_numpy("UPPER_90").tolist() == [p["upper_90"] for p in rest["forecast"]]
    levels = json.loads(oip.get_response()["parameters"]["quantile_levels"])
    assert levels == list(rest["forecast"][0]["quantiles"])
    assert oip.as_numpy("QUANTILES").tolist() == [[p["quantiles"][k] for k in levels] for p in rest["forecast"]]
    assert [t.decode() for t in oip.as_numpy("TIMESTAMPS")] == [p["timestamp"] for p in rest["forecast"]]
    # what was done (the method and its backtest error) reaches every protocol
    assert json.loads(oip.get_response()["parameters"]["input"]) == rest["input"]
    assert rest["input"]["method"] and rest["input"]["backtest_origins"] == 3
    proto = typed.Forecast(tpb.ForecastRequest(values=SERIES, start="1990-01-01T00:00:00", frequency="MS", horizon=6),
                           timeout=60)
    assert [p.point for p in proto.forecast] == [p["point"] for p in rest["forecast"]]
    assert [dict(p.quantiles) for p in proto.forecast] == [p["quantiles"] for p in rest["forecast"]]
    assert proto.input.used == rest["input"]["used"] and proto.input.frequency == "MS"
    assert proto.input.method == rest["input"]["method"] and dict(proto.input.method_weights) == pytest.approx(
        rest["input"]["method_weights"])
    assert proto.input.backtest_mase == pytest.approx(rest["input"]["backtest_mase"])
    assert proto.input.interval_calibration == "conformal"


# --- errors -------------------------------------------------------------------------------------------------------
def grpc_error(fn, request, **kw) -> tuple[grpc.StatusCode, str, dict]:
    with pytest.raises(grpc.RpcError) as info:
        fn(request, timeout=60, **kw)
    err = info.value
    return err.code(), err.details(), dict(err.trailing_metadata() or ())


def test_typed_grpc_error_mapping(typed):
    code, details, md = grpc_error(typed.Classify, tpb.ClassifyRequest(texts=[]), metadata=[("x-request-id", "e-1")])
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("validation_error:")
    assert md["triserve-error-code"] == "validation_error" and md["x-request-id"] == "e-1"
    assert md["triserve-http-status"] == "422" and json.loads(md["triserve-error-details"])[0]["loc"] == ["texts"]
    for call, request, expected in (
            (typed.Classify, tpb.ClassifyRequest(texts=["   \u200b "]), "empty_text"),
            (typed.Classify, tpb.ClassifyRequest(texts=["a"], model=7), "validation_error"),
            (typed.Detect, tpb.DetectRequest(images=[b"hello, not an image"]), "invalid_image"),
            (typed.Detect, tpb.DetectRequest(images=[png_bytes()], conf_threshold=2.0), "validation_error"),
            (typed.Forecast, tpb.ForecastRequest(values=[1.0, 2.0], start="2000-01-01T00:00:00", frequency="MS"),
             "series_too_short"),
            (typed.Forecast, tpb.ForecastRequest(values=[1.0] * 40), "validation_error")):
        code, details, md = grpc_error(call, request)
        assert (code, md["triserve-error-code"]) == (grpc.StatusCode.INVALID_ARGUMENT, expected), details


def test_oip_errors_http_and_grpc(server, http_client, grpc_client):
    with pytest.raises(InferenceServerException) as err:
        http_client.infer("classify", [bytes_input(thttp, "TEXT", ["   "])])
    assert err.value.status() == "422" and err.value.message().startswith("empty_text:")
    with pytest.raises(InferenceServerException) as err:
        grpc_client.infer("classify", [bytes_input(tgrpc, "TEXT", ["   "])])
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT" and err.value.message().startswith("empty_text:")
    lone = tgrpc.InferInput("context", [1, 5], "FP32")
    lone.set_data_from_numpy(np.zeros((1, 5), dtype=np.float32))
    with pytest.raises(InferenceServerException) as err:
        grpc_client.infer("forecast-global", [lone])
    assert err.value.message().startswith("missing_input:")
    wrong = []
    for name, arr in {"context": np.zeros((1, 5), np.float32), "mask": np.zeros((1, 5), np.float32),
                      "freq": np.zeros(1, np.int64), "features": np.zeros((1, 6), np.float32)}.items():
        wrong.append(tgrpc.InferInput(name, list(arr.shape), "INT64" if arr.dtype == np.int64 else "FP32"))
        wrong[-1].set_data_from_numpy(arr)
    with pytest.raises(InferenceServerException) as err:
        grpc_client.infer("forecast-global", wrong)
    assert err.value.message().startswith("shape_mismatch:")

    url = f"{server.url}/v2/models/classify/infer"
    good = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["hello"]}]}
    cases = [({"content": b"{not json"}, 400, "malformed_json"),
             ({"json": {**good, "inputs": [{**good["inputs"][0], "shape": [2]}]}}, 400, "shape_mismatch"),
             ({"json": {**good, "outputs": [{"name": "NOPE"}]}}, 400, "unknown_output"),
             ({"json": {**good, "parameters": {"top_k": 0}}}, 422, "validation_error"),
             ({"content": json.dumps(good).encode(), "headers": {"content-type": "text/plain"}}, 415,
              "unsupported_media_type")]
    for kwargs, status, code in cases:
        resp = httpx.post(url, timeout=60, **kwargs)
        body = resp.json()
        assert (resp.status_code, body["code"]) == (status, code), body
        assert body["error"].startswith(f"{code}: ") and body["request_id"] == resp.headers["x-request-id"]
    ok = httpx.post(url, json={**good, "id": "req-7"}, headers={"X-Request-ID": "oip-9"}, timeout=60).json()
    assert ok["id"] == "req-7" and ok["parameters"]["request_id"] == "oip-9" and ok["outputs"][0]["data"]


# --- health, reflection, deadlines --------------------------------------------------------------------------------
def test_grpc_health_and_reflection(channel):
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "triserve.v1.Triserve", "inference.GRPCInferenceService"):
        status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    answer = next(iter(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                 timeout=10)))
    services = {s.name for s in answer.list_services_response.service}
    assert {"triserve.v1.Triserve", "inference.GRPCInferenceService", "grpc.health.v1.Health"} <= services


def test_expired_deadline_is_deadline_exceeded(typed):
    with pytest.raises(grpc.RpcError) as err:
        typed.Classify(tpb.ClassifyRequest(texts=["hello"]), timeout=1e-6)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


class _Aborted(Exception):
    pass


class FakeContext:
    """Just enough of grpc.aio.ServicerContext for the handler wrapper."""

    def __init__(self, remaining):
        self.remaining, self.aborted, self.trailing = remaining, None, None

    def invocation_metadata(self):
        return (("x-request-id", "late-1"),)

    def time_remaining(self):
        return self.remaining

    def peer(self):
        return "ipv4:127.0.0.1:5000"

    async def abort(self, code, details, trailing_metadata=()):
        self.aborted = (code, details, dict(trailing_metadata))
        raise _Aborted()

    def set_trailing_metadata(self, md):
        self.trailing = md


def test_expired_deadline_is_refused_before_any_work():
    import asyncio

    from triserve.services.protocols.grpc_common import handle

    called = []

    async def work(scope):
        called.append(scope)

    context = FakeContext(remaining=0.0)
    with pytest.raises(_Aborted):
        asyncio.run(handle(context, SimpleNamespace(loaded=True), work, "test"))
    code, details, md = context.aborted
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED and details.startswith("deadline_exceeded:")
    assert md["triserve-error-code"] == "deadline_exceeded" and md["x-request-id"] == "late-1"
    assert called == []


# --- contracts ----------------------------------------------------------------------------------------------------
def test_typed_messages_mirror_the_rest_response_models():
    from triserve.families.detection.schemas import DetectResponse
    from triserve.families.forecast.schemas import ForecastResponse
    from triserve.families.text.schemas import ClassifyResponse

    for model, message in ((ClassifyResponse, tpb.ClassifyResponse), (DetectResponse, tpb.DetectResponse),
                           (ForecastResponse, tpb.ForecastResponse)):
        assert set(model.model_fields) == set(message.DESCRIPTOR.fields_by_name), model.__name__


def test_tensor_codec():
    from triserve.kernel.errors import ApiError
    from triserve.services.protocols import oip_codec

    nested = oip_codec.array_from_values("x", "INT64", [2, 2], [[1, 2], [3, 4]])
    assert np.array_equal(nested, oip_codec.array_from_values("x", "INT64", [2, 2], [1, 2, 3, 4]))
    t = oip_codec.Tensor("x", "FP32", [2], np.array([1.5, -2.0], dtype=np.float32))
    assert np.array_equal(oip_codec.array_from_raw("x", "FP32", [2], oip_codec.raw_of(t)), t.data)
    words = oip_codec.bytes_tensor("w", ["héllo", "", "x"])
    assert list(oip_codec.array_from_raw("w", "BYTES", [3], oip_codec.raw_of(words))) == [
        w.encode() for w in ("héllo", "", "x")]
    assert oip_codec.json_data_of(words) == ["héllo", "", "x"]
    bad = [(("x", "INT64", [3], [1, 2]), "shape_mismatch"), (("x", "INT32", [1], [1.5]), "invalid_tensor_data"),
           (("x", "INT8", [1], [300]), "invalid_tensor_data"), (("x", "FP32", [1], ["a"]), "invalid_tensor_data"),
           (("x", "FP32", [2], [[1.0], [2.0, 3.0]]), "invalid_tensor_data"),
           (("x", "COMPLEX", [1], [1]), "unsupported_datatype"), (("x", "FP32", [-1], []), "invalid_shape")]
    for args, code in bad:
        with pytest.raises(ApiError) as err:
            oip_codec.array_from_values(*args)
        assert err.value.code == code, args
    with pytest.raises(ApiError):
        oip_codec.array_from_raw("w", "BYTES", [1], b"\x05\x00\x00\x00ab")  # truncated element


def test_generated_stubs_match_the_protos():
    from scripts.gen_protos import main

    assert main(["--check"]) == 0
