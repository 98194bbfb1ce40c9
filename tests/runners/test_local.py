"""runner.placement=local: the runner's code inside the API worker, through a real `bentoml serve`.

The same golden checks as the remote tier (tests/services/test_gateway.py), plus what only this placement must show:
no runner process, control calls still work, and a batch may mix the gateway's uint8 letterboxes with OIP clients'
float tensors.
"""
from __future__ import annotations

import base64
import io
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
from PIL import Image

from scripts.common import ort_session
from scripts.drills.server import RUNNER_SERVICE
from tests.conftest import NO_CAPACITY_LIMITS, Server
from tests.services import test_gateway as golden
from triserve.families.vision.letterbox import fit, letterbox, preprocess_image


@pytest.fixture(scope="module")
def local_server(tiny_registry, tmp_path_factory):
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_RUNNER__PLACEMENT": "local"}
    with Server(tiny_registry.root, env=env, log_path=tmp_path_factory.mktemp("logs") / "serve-local.log") as srv:
        srv.wait_ready()
        yield srv


def test_no_runner_process_and_the_models_answer_in_process(local_server):
    workers = local_server.workers()
    assert RUNNER_SERVICE not in workers and not local_server.runner_pids()
    status = httpx.get(f"{local_server.url}/v1/models", timeout=30).json()  # a control call on the runner's code
    assert status, status
    assert httpx.get(f"{local_server.url}/readyz", timeout=10).status_code == 200


@pytest.mark.parametrize("check", [golden.test_detection_matches_in_process_pipeline,
                                   golden.test_text_matches_in_process_pipeline,
                                   golden.test_forecast_matches_in_process_pipeline])
def test_answers_match_the_in_process_pipelines(local_server, tiny_registry, check):
    check(local_server, tiny_registry)


def test_concurrent_requests_batch_and_equal_single_ones(local_server):
    golden.test_batched_equals_unbatched_and_batches_form(local_server)


def test_oip_float_tensors_are_served_next_to_uint8_letterboxes(local_server, tiny_registry):
    """A client's [n, 3, S, S] float32 tensor (OIP) goes through the same slot the REST API fills with uint8 images."""
    directory, m = golden.artifact(tiny_registry, "yolo-shapes")
    image = np.asarray(Image.open(io.BytesIO(golden.png_bytes(seed=5))).convert("RGB"))
    tensor, _ = preprocess_image(image, m.preprocess.imgsz)
    expected = ort_session(directory / m.model_file).run(None, {m.inputs[0].name: tensor[None]})[0]
    body = {"inputs": [{"name": m.inputs[0].name, "shape": [1, *tensor.shape], "datatype": "FP32",
                        "data": tensor.ravel().tolist()}]}
    resp = httpx.post(f"{local_server.url}/v2/models/{m.name}/infer", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    got = np.asarray(resp.json()["outputs"][0]["data"], dtype=np.float32).reshape(expected.shape)
    assert np.allclose(got, expected, atol=1e-4)
    rest = golden.post(local_server, "/v1/detect", json={"images": [{"data": base64.b64encode(
        golden.png_bytes(seed=5)).decode()}], "conf_threshold": 0.001})
    assert rest.status_code == 200 and rest.json()["results"][0]["detections"]


def test_runner_feeds_mix_fitted_images_letterboxes_and_float_tensors():
    """One runner batch can hold every form (the gateway's fitted image, a whole letterbox as batch jobs send, an OIP
    client's float tensor); each row must be the tensor preprocess_image makes."""
    from triserve.runners.compute import feeds as runner_feeds

    img = np.random.default_rng(1).integers(0, 256, (40, 70, 3), dtype=np.uint8)
    tensor, _ = preprocess_image(img, 32)
    boxed, _ = letterbox(img, 32)
    fitted, _ = fit(img, 32)
    pre = SimpleNamespace(imgsz=32, pad_value=114, scale=1 / 255.0, color_order="RGB")
    model = SimpleNamespace(input_names=["images"], manifest=SimpleNamespace(task="detection", preprocess=pre))
    feeds = runner_feeds(model, [fitted, boxed, tensor, fitted])
    assert feeds["images"].shape == (4, 3, 32, 32) and feeds["images"].dtype == np.float32
    for row in feeds["images"]:
        assert np.array_equal(row, tensor)
