"""The client's Open Inference Protocol v2 over REST: tensors from plain Python lists (no numpy), against the real
session server, with exact checks against the REST answers for the same inputs; errors in the protocol's format read
into TriserveAPIError with the service's code; the tensor codec on its own."""
from __future__ import annotations

import asyncio
import json
import math
import struct

import pytest

from tests.services.test_gateway import png_bytes
from triserve_client import (
    AsyncTriserveClient,
    OipInferResponse,
    OipInput,
    TriserveAPIError,
    TriserveClient,
)
from triserve_client._oip import datatype_of, decode_response, encode_request, shape_of
from triserve_client.models import ImageResult
from triserve_client.oip_models import nest

SERIES = [round(340 + 3 * math.sin(i * math.pi / 6) + 0.1 * i, 3) for i in range(48)]
TEXTS = ["what is my balance", "book a flight to paris", "cancel my reservation"]


def fp32(x: float) -> float:
    """x as an FP32 tensor element holds it (the text pipeline's scores: REST's, rounded to 6 digits, as FP32)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


@pytest.fixture(scope="module")
def ts(server):
    with TriserveClient(server.url, timeout=60) as client:
        yield client


def test_server_and_model_metadata_and_readiness(ts):
    assert ts.oip_server_ready() is True and ts.oip_model_ready("classify") is True
    assert ts.oip_model_ready("nope") is False
    meta = ts.oip_server_metadata()
    assert meta.name == "triserve" and "binary_tensor_data" in meta.extensions
    text = ts.oip_model_metadata("text")
    assert (text.name, text.platform, text.versions) == ("text", "triserve_pipeline", ["1"])
    assert [(t.name, t.datatype, t.shape) for t in text.inputs] == [("TEXT", "BYTES", [-1])]
    assert [t.name for t in text.outputs] == ["LABEL", "SCORE", "TOP_K_LABELS", "TOP_K_SCORES"]
    tensor = ts.oip_model_metadata("minilm-intent")
    assert tensor.platform == "onnxruntime_onnx" and {t.name: t.datatype for t in tensor.inputs} == {
        "input_ids": "INT64", "attention_mask": "INT64"}
    listing = ts.models().deployment("text")
    assert ts.oip_model_metadata("minilm-intent", version=listing.model.version).versions == [listing.model.version]


def test_classify_pipeline_equals_rest(ts):
    rest = ts.classify(TEXTS, top_k=2)
    r = ts.oip_infer("text", {"TEXT": TEXTS}, parameters={"top_k": 2}, infer_id="oip-1", request_id="oip-req-1")
    assert isinstance(r, OipInferResponse) and (r.model_name, r.model_version, r.id) == ("text", "1", "oip-1")
    assert r.request_id == "oip-req-1" and r.parameters["served_model"] == rest.model.name
    assert r.parameters["served_version"] == rest.model.version and r.parameters["degraded"] is False
    assert r.output("LABEL").data == [x.label for x in rest.results]
    assert r.output("SCORE").data == [fp32(x.score) for x in rest.results]
    labels = r.output("TOP_K_LABELS")
    assert labels.shape == [3, 2] and labels.nested() == [[k.label for k in x.top_k] for x in rest.results]
    assert r.output("TOP_K_SCORES").nested() == [[fp32(k.score) for k in x.top_k] for x in rest.results]
    # the family alias, asked outputs only, and the outputs as binary tensor data: the same values
    alias = ts.oip_infer("classify", [OipInput("TEXT", TEXTS, "BYTES", shape=[3])], outputs=["SCORE", "LABEL"],
                         parameters={"top_k": 2}, binary_outputs=True)
    assert [t.name for t in alias.outputs] == ["SCORE", "LABEL"]
    assert alias.output("SCORE").data == r.output("SCORE").data and alias.output("LABEL").data == r.output(
        "LABEL").data
    with pytest.raises(KeyError):
        alias.output("TOP_K_LABELS")


def test_forecast_pipeline_equals_rest(ts):
    opts = {"start": "1990-01-01T00:00:00", "frequency": "MS", "horizon": 6}
    rest = ts.forecast(SERIES, **opts)
    r = ts.oip_infer("forecast", {"VALUES": SERIES}, parameters=opts)
    assert r.output("POINT").datatype == "FP64"
    assert r.output("POINT").data == [p.point for p in rest.forecast]
    assert r.output("TIMESTAMPS").data == [p.model_dump(mode="json")["timestamp"] for p in rest.forecast]
    levels = json.loads(r.parameters["quantile_levels"])
    assert r.output("QUANTILES").nested() == [[p.quantiles[k] for k in levels] for p in rest.forecast]
    for band in ("lower_50", "upper_50", "lower_90", "upper_90"):
        assert r.output(band.upper()).data == [getattr(p, band) for p in rest.forecast]
    assert json.loads(r.parameters["input"])["method"] == rest.input.method
    as_fp32 = ts.oip_infer("forecast", [OipInput("VALUES", SERIES, "FP32")], parameters=opts)
    assert len(as_fp32.output("POINT").data) == 6


def test_detect_pipeline_takes_raw_image_bytes_and_equals_rest(ts):
    raw = png_bytes(seed=9)
    rest = ts.detect(raw, conf_threshold=0.001, max_detections=10)
    r = ts.oip_infer("detection", {"IMAGE": [raw]}, parameters={"conf_threshold": 0.001, "max_detections": 10})
    (doc,) = r.output("DETECTIONS").data
    assert [ImageResult.model_validate_json(doc)] == rest.results and rest.results[0].detections


def test_tensor_model_from_nested_and_flat_lists(ts):
    nested = ts.oip_infer("minilm-intent", {"input_ids": [[1, 2, 3, 4], [5, 6, 7, 0]],
                                            "attention_mask": [[1, 1, 1, 1], [1, 1, 1, 0]]})
    (probs,) = nested.outputs
    assert probs.datatype == "FP32" and probs.shape[0] == 2
    assert all(abs(sum(row) - 1) < 1e-4 for row in probs.nested())
    flat = ts.oip_infer("minilm-intent", [OipInput("input_ids", [1, 2, 3, 4, 5, 6, 7, 0], "INT64", shape=[2, 4]),
                                          OipInput("attention_mask", [1, 1, 1, 1, 1, 1, 1, 0], shape=[2, 4])])
    assert flat.outputs[0].data == probs.data and nested.parameters["served_model"] == "minilm-intent"


def test_oip_errors_carry_the_services_code(ts):
    with pytest.raises(TriserveAPIError) as err:
        ts.oip_infer("text", {"TEXT": [1, 2]}, request_id="oip-bad-1")  # INT64 where BYTES is declared
    e = err.value
    assert (e.status, e.code, e.request_id) == (400, "datatype_mismatch", "oip-bad-1")
    assert e.details["expected"] == ["BYTES"] and not e.message.startswith("datatype_mismatch")
    with pytest.raises(TriserveAPIError) as err:
        ts.oip_infer("nope", {"TEXT": ["hi"]})
    assert (err.value.status, err.value.code) == (404, "model_not_found") and "text" in err.value.details["models"]
    with pytest.raises(TriserveAPIError) as err:
        ts.oip_infer("text", {"TEXT": ["hi"]}, outputs=["NOPE"])
    assert err.value.code == "unknown_output"
    with pytest.raises(TriserveAPIError) as err:
        ts.oip_model_metadata("text", version="9")
    assert err.value.code == "model_version_not_found"


def test_async_oip(server, ts):
    async def go():
        async with AsyncTriserveClient(server.url, timeout=60) as a:
            return (await a.oip_server_ready(), await a.oip_model_metadata("forecast"),
                    await a.oip_infer("text", {"TEXT": TEXTS[:1]}, request_id="oip-async-1"),
                    await a.oip_server_metadata(), await a.oip_model_ready("text"))

    ready, meta, r, server_meta, model_ready = asyncio.run(go())
    assert ready and model_ready and meta.inputs[0].name == "VALUES" and server_meta.name == "triserve"
    assert r.request_id == "oip-async-1" and r.output("LABEL").data == [ts.classify(TEXTS[:1]).results[0].label]


# --- the codec on its own ----------------------------------------------------------------------------------------
def test_shapes_and_datatypes_are_read_from_the_values():
    assert shape_of([[1, 2, 3], [4, 5, 6]]) == [2, 3] and shape_of(7) == [] and shape_of([]) == [0]
    assert shape_of((("a",), ("b",))) == [2, 1]
    with pytest.raises(ValueError, match="ragged"):
        shape_of([[1, 2], [3]])
    assert [datatype_of(v) for v in ([1, 2], [1, 2.5], [True], ["a", b"b"])] == ["INT64", "FP64", "BOOL", "BYTES"]
    with pytest.raises(TypeError):
        datatype_of([1, "a"])
    assert nest([1, 2, 3, 4, 5, 6], [2, 3]) == [[1, 2, 3], [4, 5, 6]] and nest([5], []) == 5


def test_requests_are_json_unless_raw_bytes_are_sent():
    body, headers = encode_request({"X": [[1.5, float("nan")]], "Y": "word"}, outputs=["Z"], parameters={"k": 1},
                                   infer_id="7")
    assert headers == {"Content-Type": "application/json"}
    doc = json.loads(body)
    assert doc["id"] == "7" and doc["parameters"] == {"k": 1} and doc["outputs"] == [{"name": "Z"}]
    x, y = doc["inputs"]
    assert (x["shape"], x["datatype"], math.isnan(x["data"][1])) == ([1, 2], "FP64", True)
    assert (y["shape"], y["datatype"], y["data"]) == ([], "BYTES", ["word"])
    body, headers = encode_request([OipInput("IMAGE", [b"\x89PNG", "ok"])], binary_outputs=True)
    n = int(headers["Inference-Header-Content-Length"])
    doc = json.loads(body[:n])
    assert headers["Content-Type"] == "application/octet-stream" and doc["parameters"] == {"binary_data_output": True}
    assert doc["inputs"][0]["parameters"] == {"binary_data_size": 14} and "data" not in doc["inputs"][0]
    assert body[n:] == b"\x04\x00\x00\x00\x89PNG\x02\x00\x00\x00ok"
    with pytest.raises(ValueError, match="3 values for shape"):
        encode_request([OipInput("X", [1, 2, 3], shape=[2, 2])])
    with pytest.raises(TypeError):
        encode_request([OipInput("X", ["a"], "FP32")])
    with pytest.raises(ValueError, match="datatype"):
        encode_request([OipInput("X", [1], "FLOAT")])
    with pytest.raises(ValueError, match="named 'Y'"):
        encode_request({"X": OipInput("Y", [1])})
    body, _ = encode_request({"X": OipInput("X", [1, 2], "FP32", shape=[1, 2])})
    assert json.loads(body)["inputs"] == [{"name": "X", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]


def test_binary_outputs_are_decoded():
    header = json.dumps({"model_name": "m", "outputs": [
        {"name": "A", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}},
        {"name": "B", "datatype": "BYTES", "shape": [2], "parameters": {"binary_data_size": 11}},
        {"name": "C", "datatype": "INT64", "shape": [1], "data": [3]}]}).encode()
    raw = b"\x00\x00\x80\x3f\x00\x00\x00\xc0" + b"\x02\x00\x00\x00hi\x01\x00\x00\x00\xff"
    r = decode_response(header + raw, str(len(header)))
    assert r.output("A").data == [1.0, -2.0] and r.output("B").data == ["hi", b"\xff"] and r.output("C").data == [3]
