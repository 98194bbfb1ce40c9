"""End to end through a real `bentoml serve`: a tiny pose model (random-init yolo11n-pose at imgsz 64, imported with
pose-pt) behind a `people` deployment, asked over REST (JSON and multipart), typed gRPC and OIP v2 (HTTP): the same
people with the same named keypoints in the original image's pixels, and bad input refused with a 4xx code."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("ultralytics")

from tests.conftest import NO_CAPACITY_LIMITS, Server

pytestmark = pytest.mark.timeout(600)
ASK = {"conf_threshold": 0.001, "max_detections": 5}  # a random-init model scores ~1e-3


@pytest.fixture(scope="module")
def pose_server(tmp_path_factory):
    from tests.families.pose.importers.conftest import save_checkpoint
    from triserve.families.pose.importers.checkpoint import PosePtParams, import_pose_pt
    from triserve.models.registry import LocalRegistry

    root = tmp_path_factory.mktemp("pose-serve")
    pt = save_checkpoint("yolo11n-pose.yaml", root / "pose.pt", ["person"])
    art, _ = import_pose_pt(pt, "pose-tiny", "1.0.0", root / "work", imgsz=64, cache_dir=root / "cache",
                            verify_ultralytics=False, params=PosePtParams(parity_batches=(1,),
                                                                          parity_sizes=((64, 64),)))
    registry = LocalRegistry(root / "registry")
    registry.publish(art.staging, art.manifest)
    registry.set_alias("pose-tiny", "stable", "1.0.0", by="test")
    models = root / "models.yaml"
    models.write_text("deployments:\n  - name: people\n    family: pose\n"
                      "    model: {name: pose-tiny, ref: stable, batching: {max_batch_size: 4}}\n")
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_MODELS_FILE": str(models)}
    with Server(registry.root, env=env, log_path=root / "serve.log") as srv:
        srv.wait_ready()
        srv.models_file, srv.registry_dir = models, registry.root  # type: ignore[attr-defined] - for the batch test
        yield srv


@pytest.fixture(scope="module")
def photo() -> bytes:
    import ultralytics

    return (Path(ultralytics.__file__).parent / "assets" / "zidane.jpg").read_bytes()  # 1280x720


def test_rest_json_and_upload_answer_people_with_named_keypoints(pose_server, photo):
    body = {"images": [{"data": base64.b64encode(photo).decode()}], **ASK}
    resp = httpx.post(f"{pose_server.url}/v1/pose", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["deployment"] == "people" and out["model"]["name"] == "pose-tiny"
    assert out["keypoint_names"][:2] == ["nose", "left_eye"] and len(out["keypoint_names"]) == 17
    assert {"start": 15, "end": 13} in out["skeleton"] and len(out["skeleton"]) == 19
    (result,) = out["results"]
    assert (result["width"], result["height"]) == (1280, 720)
    assert 1 <= len(result["people"]) <= 5
    for person in result["people"]:
        assert [k["name"] for k in person["keypoints"]] == out["keypoint_names"]
        xs, ys = [k["x"] for k in person["keypoints"]], [k["y"] for k in person["keypoints"]]
        assert 0 <= min(xs) and max(xs) <= 1280 and 0 <= min(ys) and max(ys) <= 720  # original pixels
        assert all(0 <= k["confidence"] <= 1 and k["visible"] == (k["confidence"] >= 0.5)
                   for k in person["keypoints"])
    upload = httpx.post(f"{pose_server.url}/v1/pose/upload", files=[("images", ("z.jpg", photo, "image/jpeg"))],
                        data={k: str(v) for k, v in ASK.items()}, timeout=60)
    assert upload.status_code == 200, upload.text
    assert upload.json()["results"] == out["results"]


def test_typed_grpc_and_oip_give_the_same_people(pose_server, photo):
    import grpc
    import tritonclient.http as thttp

    from triserve.services.protocols.generated import triserve_pb2 as tpb
    from triserve.services.protocols.generated import triserve_pb2_grpc as tpb_grpc

    rest = httpx.post(f"{pose_server.url}/v1/pose/upload", files=[("images", ("z.jpg", photo, "image/jpeg"))],
                      data={k: str(v) for k, v in ASK.items()}, timeout=60).json()
    with grpc.insecure_channel(pose_server.grpc_target) as channel:
        proto = tpb_grpc.TriserveStub(channel).Pose(tpb.PoseRequest(images=[photo], **ASK), timeout=60)
    assert list(proto.keypoint_names) == rest["keypoint_names"] and len(proto.skeleton) == 19
    people = rest["results"][0]["people"]
    assert [list(p.box) for p in proto.results[0].people] == [p["box"] for p in people]
    assert [[k.x for k in p.keypoints] for p in proto.results[0].people] == \
        [[k["x"] for k in p["keypoints"]] for p in people]
    client = thttp.InferenceServerClient(pose_server.url.removeprefix("http://"), network_timeout=60)
    inp = thttp.InferInput("IMAGE", [1], "BYTES")
    inp.set_data_from_numpy(np.array([photo], dtype=object), binary_data=True)
    oip = client.infer("pose", [inp], parameters=ASK)
    assert json.loads(oip.as_numpy("POSES")[0]) == rest["results"][0]
    params = oip.get_response()["parameters"]
    assert json.loads(params["keypoint_names"]) == rest["keypoint_names"]


@pytest.mark.parametrize("body, status, code", [
    ({"images": [{"data": "aGVsbG8="}] * 9}, 422, "too_many_images"),
    ({"images": [{"data": "not base64!"}]}, 422, "invalid_base64"),
    ({"images": [{"data": "aGVsbG8="}]}, 422, "invalid_image"),
])
def test_bad_input_is_a_coded_4xx(pose_server, body, status, code):
    resp = httpx.post(f"{pose_server.url}/v1/pose", json=body, timeout=30)
    assert resp.status_code == status and resp.json()["error"]["code"] == code, resp.text


def test_schema_violations_are_422(pose_server):
    resp = httpx.post(f"{pose_server.url}/v1/pose", json={"images": [{"data": "eA=="}], "conf_threshold": 3},
                      timeout=30)
    assert resp.status_code == 422


def test_batch_rows_hold_the_people_the_service_answers(pose_server, photo, tmp_path):
    """`triserve batch pose` over the same deployment: each image's row has the boxes and keypoints /v1/pose answers
    for it (same thresholds), a corrupt file an error row with the service's code."""
    pytest.importorskip("pyarrow", reason="the batch extra (pyarrow) is not installed")
    from triserve.batch import cli
    from triserve.batch.sinks import read_rows

    images = tmp_path / "images"
    images.mkdir()
    (images / "zidane.jpg").write_bytes(photo)
    (images / "corrupt.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    args = cli._parser().parse_args(["pose", "--deployment", "people", "--input", str(images),
                                     "--output", str(tmp_path / "out"), "--registry", str(pose_server.registry_dir),
                                     "--models-file", str(pose_server.models_file), "--cache-dir",
                                     str(tmp_path / "cache"), "--quiet", "--workers", "0",
                                     "--conf-threshold", "0.001", "--max-detections", "5"])
    summary = cli.run(args)
    rows = {r["key"]: r for r in read_rows(tmp_path / "out")}
    assert summary["complete"] and summary["items"] == 2 and summary["errors"] == 1
    assert rows["corrupt.jpg"]["error_code"] == "invalid_image"
    body = {"images": [{"data": base64.b64encode(photo).decode()}], **ASK}
    [served] = httpx.post(f"{pose_server.url}/v1/pose", json=body, timeout=60).json()["results"]
    row = rows["zidane.jpg"]
    people = served["people"]
    assert len(people) > 0 and (row["width"], row["height"]) == (1280, 720)
    assert np.allclose(row["boxes"], [p["box"] for p in people], atol=0.02)
    assert row["scores"] == pytest.approx([p["score"] for p in people], abs=1e-4)
    for person, kpts in zip(people, row["keypoints"]):
        assert np.allclose([[k["x"], k["y"]] for k in person["keypoints"]], np.asarray(kpts)[:, :2], atol=0.02)
