"""End to end through the test server (`bentoml serve` with the tiny models, tests/conftest.py): /v1/segment against
the in-process serving path on the same artifact, uploads == JSON, typed gRPC Segment and OIP `segment` == REST,
bad input refused with the error model before the runner."""
from __future__ import annotations

import base64
import io
import json

import grpc
import httpx
import numpy as np
import pytest
from PIL import Image, ImageDraw

from triserve.families.segmentation import rle
from triserve.families.segmentation.postprocess import instances
from triserve.families.vision.letterbox import preprocess_image
from triserve.families.vision.nms import NMSParams
from triserve.models.importing.graphs import ort_session
from triserve.services.protocols.generated import triserve_pb2 as tpb
from triserve.services.protocols.generated import triserve_pb2_grpc as tpb_grpc

OPTS = {"conf_threshold": 0.3, "max_detections": 10}


def png(w: int = 96, h: int = 72, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 60, (h, w, 3), dtype=np.uint8))
    ImageDraw.Draw(img).rectangle([10, 10, 50, 40], fill=(220, 40, 40))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def segment(server, raw: bytes, **extra) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/segment", timeout=60,
                      json={"images": [{"data": base64.b64encode(raw).decode()}], **OPTS, **extra})


def test_segment_matches_the_in_process_pipeline(server, tiny_registry):
    raw = png()
    resp = segment(server, raw)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    directory, m = tiny_registry.load_verified("seg-tiny", "stable")
    assert body["model"] == {"name": "seg-tiny", "version": m.version} and body["deployment"] == "segmentation"
    image = np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"))
    x, meta = preprocess_image(image, m.preprocess.imgsz)
    row = ort_session(directory / m.model_file).run(None, {m.inputs[0].name: x[None]})[0][0]
    kept, boxes, masks, _ = instances(row, meta, m.preprocess, len(m.labels), NMSParams(**OPTS))
    got = body["results"][0]
    assert (got["width"], got["height"]) == (96, 72) and len(got["instances"]) == len(masks) > 0
    for inst, box, mask in zip(got["instances"], boxes, masks):
        assert mask is not None and np.allclose(inst["box"], box, atol=0.02)
        assert inst["rle"]["size"] == [72, 96] and inst["polygons"] is None
        decoded = rle.decode_counts(rle.string_to_counts(inst["rle"]["counts"]), 72, 96)
        assert (decoded == mask.full()).all() and inst["area"] == mask.area


def test_upload_equals_json_and_polygons_on_request(server):
    raw = png(seed=1)
    js = segment(server, raw, mask_format="both").json()["results"]
    up = httpx.post(f"{server.url}/v1/segment/upload", timeout=60, files=[("images", ("a.png", raw, "image/png"))],
                    data={**{k: str(v) for k, v in OPTS.items()}, "mask_format": "both"}).json()["results"]
    assert up == js and all(i["polygons"] is not None and i["rle"] for i in js[0]["instances"])
    assert any(i["polygons"] for i in js[0]["instances"])  # (a mask of a pixel or two has no 3-point contour)


def test_typed_grpc_and_oip_equal_rest(server):
    import tritonclient.grpc as tgrpc

    raw = png(seed=2)
    rest = segment(server, raw).json()["results"][0]
    with grpc.insecure_channel(server.grpc_target) as channel:
        proto = tpb_grpc.TriserveStub(channel).Segment(tpb.SegmentRequest(images=[raw], **OPTS), timeout=60)
    assert [i.rle.counts for i in proto.results[0].instances] == [i["rle"]["counts"] for i in rest["instances"]]
    client = tgrpc.InferenceServerClient(server.grpc_target)
    try:
        image = tgrpc.InferInput("IMAGE", [1], "BYTES")
        image.set_data_from_numpy(np.array([raw], dtype=object))
        oip = client.infer("segment", [image], parameters=OPTS)
    finally:
        client.close()
    assert json.loads(oip.as_numpy("INSTANCES")[0])["instances"] == [
        {k: v for k, v in i.items() if v is not None} for i in rest["instances"]]


@pytest.mark.parametrize("body, status, code", [
    ({"images": [{"data": "%%%"}]}, 422, "invalid_base64"),
    ({"images": [{"data": base64.b64encode(b"text").decode()}]}, 422, "invalid_image"),
    ({"images": [{"data": "eA=="}], "mask_format": "bitmap"}, 422, "validation_error"),
    ({"images": [{"data": "eA=="}] * 9}, 422, "too_many_images"),
])
def test_bad_input_gets_a_4xx_with_the_error_model(server, body, status, code):
    resp = httpx.post(f"{server.url}/v1/segment", json=body, timeout=60)
    assert resp.status_code == status and resp.json()["error"]["code"] == code, resp.text
