"""End to end through the test server (`bentoml serve` with the tiny models, tests/conftest.py; the colour classifier
of scripts/classification/build.py): a solid colour is that label over /v1/classify-image, uploads == JSON, typed gRPC
ClassifyImage and OIP `classify-image` == REST, the fallback answers the same, bad input is a 4xx with the error
model."""
from __future__ import annotations

import base64
import io

import grpc
import httpx
import numpy as np
import pytest
from PIL import Image

from triserve.services.protocols.generated import triserve_pb2 as tpb
from triserve.services.protocols.generated import triserve_pb2_grpc as tpb_grpc

COLOURS = {"red": (230, 10, 10), "green": (10, 200, 20), "blue": (20, 20, 220), "black": (5, 5, 5)}


def png(rgb, w: int = 80, h: int = 60) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), rgb).save(buf, format="PNG")
    return buf.getvalue()


def classify(server, images: list[bytes], **extra) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/classify-image", timeout=60,
                      json={"images": [{"data": base64.b64encode(raw).decode()} for raw in images], **extra})


def test_a_solid_colour_is_its_label(server, tiny_registry):
    resp = classify(server, [png(rgb) for rgb in COLOURS.values()], top_k=2)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    version = tiny_registry.resolve("colors-tiny", "stable")
    assert body["model"] == {"name": "colors-tiny", "version": version} and body["deployment"] == "classification"
    assert [r["label"] for r in body["results"]] == list(COLOURS)
    for r in body["results"]:
        assert (r["width"], r["height"]) == (80, 60) and len(r["top_k"]) == 2 and r["score"] > 0.99
        assert r["top_k"][0] == {"class_id": list(COLOURS).index(r["label"]), "label": r["label"], "score": r["score"]}
        assert r["top_k"][0]["score"] >= r["top_k"][1]["score"]


def test_upload_equals_json_and_the_fallback_agrees(server):
    raw = [png(COLOURS["green"], 33, 90), png(COLOURS["blue"], 120, 40)]
    js = classify(server, raw).json()["results"]
    up = httpx.post(f"{server.url}/v1/classify-image/upload", timeout=60, data={"top_k": "5"},
                    files=[("images", (f"{i}.png", r, "image/png")) for i, r in enumerate(raw)]).json()["results"]
    assert up == js and [r["label"] for r in js] == ["green", "blue"] and len(js[0]["top_k"]) == 4
    resp = classify(server, raw, model="fallback")
    degraded = resp.json()
    assert resp.status_code == 200, resp.text
    assert degraded["degraded"] is True and degraded["model"]["name"] == "colors-tiny-int8"
    assert [r["label"] for r in degraded["results"]] == ["green", "blue"]


def test_typed_grpc_and_oip_equal_rest(server):
    import tritonclient.grpc as tgrpc

    raw = png(COLOURS["red"])
    rest = classify(server, [raw], top_k=3).json()["results"][0]
    with grpc.insecure_channel(server.grpc_target) as channel:
        proto = tpb_grpc.TriserveStub(channel).ClassifyImage(tpb.ClassifyImageRequest(images=[raw], top_k=3),
                                                             timeout=60)
    got = proto.results[0]
    assert (got.label, got.width, got.height) == ("red", 80, 60)
    assert [(t.label, t.class_id) for t in got.top_k] == [(t["label"], t["class_id"]) for t in rest["top_k"]]
    assert [t.score for t in got.top_k] == pytest.approx([t["score"] for t in rest["top_k"]])
    client = tgrpc.InferenceServerClient(server.grpc_target)
    try:
        image = tgrpc.InferInput("IMAGE", [1], "BYTES")
        image.set_data_from_numpy(np.array([raw], dtype=object))
        oip = client.infer("classify-image", [image], parameters={"top_k": 3})
    finally:
        client.close()
    assert [x.decode() for x in oip.as_numpy("LABEL")] == ["red"]
    assert [x.decode() for x in oip.as_numpy("TOP_K_LABELS")[0]] == [t["label"] for t in rest["top_k"]]
    assert oip.as_numpy("TOP_K_SCORES")[0] == pytest.approx([t["score"] for t in rest["top_k"]], abs=1e-6)


@pytest.mark.parametrize("body, status, code", [
    ({"images": [{"data": "%%%"}]}, 422, "invalid_base64"),
    ({"images": [{"data": base64.b64encode(b"text").decode()}]}, 422, "invalid_image"),
    ({"images": [{"data": "eA=="}], "top_k": 0}, 422, "validation_error"),
    ({"images": [{"data": "eA=="}], "top_k": 21}, 422, "top_k_too_large"),
    ({"images": [{"data": "eA=="}] * 17}, 422, "too_many_images"),
])
def test_bad_input_gets_a_4xx_with_the_error_model(server, body, status, code):
    resp = httpx.post(f"{server.url}/v1/classify-image", json=body, timeout=60)
    assert resp.status_code == status and resp.json()["error"]["code"] == code, resp.text
