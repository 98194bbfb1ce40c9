"""scripts/bench/cpu_split.py: each family's request, over each transport, is one the product's own request schemas and
protocol parsers take (what the server would run), and the forecast floor runs the family's hooks on a tiny model."""
from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from scripts.bench import cost_table, cpu_split
from triserve import families

ROOT = Path(__file__).resolve().parents[3]
PATHS = {"text": "/v1/classify", "detect": "/v1/detect", "pose": "/v1/pose", "segment": "/v1/segment",
         "forecast": "/v1/forecast"}


@pytest.fixture(scope="module")
def jpeg() -> bytes:
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (480, 640, 3), dtype=np.uint8)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def body_of(family: str, jpeg: bytes) -> tuple[str, dict]:
    return cpu_split.request(family, jpeg=jpeg)


def pipeline_request(family: str, req):
    """An OIP request -> the family's request model, as services/protocols/oip._infer_pipeline builds it."""
    from triserve.services.protocols import oip
    from triserve.services.protocols.oip_codec import request_field

    api = families.family(cpu_split.FAMILIES[family]).api
    tensors = oip._inputs(req, api.oip.inputs)  # the server's check of names, datatypes and required inputs
    fields = {m.field: request_field(m, tensors[m.name]) for m in api.oip.inputs if m.name in tensors}
    fields.update(oip.pick_params(req.parameters, api.oip.parameters))
    fields = api.oip.request_fields(fields, {n: t.data for n, t in tensors.items()}, req.parameters)
    return api.request_model.model_validate(fields)


def expected_fields(family: str, body: dict, jpeg: bytes) -> dict:
    """What every transport must carry: the REST body's fields, images as their bytes."""
    fields = {k: v for k, v in body.items() if k != "images"}
    return {**fields, "images": [jpeg]} if "images" in body else fields


def carried(family: str, model) -> dict:
    dumped = model.model_dump(exclude_unset=True)
    if family == "forecast":
        dumped["start"] = model.start.isoformat()
    return dumped


def test_models_are_the_default_deployments_primaries():
    repo = yaml.safe_load((ROOT / "configs" / "models.yaml").read_text())
    primary = {d["name"]: d["model"]["name"] for d in repo["deployments"]}
    assert {f: primary[repo["defaults"][name]] for f, name in cpu_split.FAMILIES.items()} == cpu_split.MODELS


@pytest.mark.parametrize("family", list(cpu_split.FAMILIES))
def test_rest_body_validates_against_the_route_schema(family, jpeg):
    path, body = body_of(family, jpeg)
    assert path == PATHS[family]
    route = families.family(cpu_split.FAMILIES[family]).api.routes[0]
    request = route.body.model_validate(body)
    assert request.model == "primary"
    load = cpu_split.load_for(family, "rest", path, body)
    assert load.wrk and b"\n" not in load.body and json.loads(load.body) == body
    if family == "forecast":
        assert len(request.values) == 120 and request.frequency == "MS" and request.horizon == 12
    elif family != "text":
        assert base64.b64decode(request.images[0].data) == jpeg


@pytest.mark.parametrize("family", list(cpu_split.FAMILIES))
def test_typed_grpc_request_is_the_same_request(family, jpeg):
    from triserve.services.protocols.generated import triserve_pb2
    from triserve.services.protocols.grpc_typed import message_fields

    path, body = body_of(family, jpeg)
    load = cpu_split.load_for(family, "grpc", path, body)
    method = families.family(cpu_split.FAMILIES[family]).api.grpc_method
    assert load.path == f"/triserve.v1.Triserve/{method}" and load.answer == f"typed:{method}" and not load.wrk
    message = getattr(triserve_pb2, f"{method}Request").FromString(load.body)
    model = families.family(cpu_split.FAMILIES[family]).api.request_model.model_validate(message_fields(message))
    assert carried(family, model) == expected_fields(family, body, jpeg)


@pytest.mark.parametrize("family", list(cpu_split.FAMILIES))
def test_oip_rest_request_is_the_same_request(family, jpeg):
    from triserve.services.protocols.oip_rest import parse_infer_request

    path, body = body_of(family, jpeg)
    load = cpu_split.load_for(family, "oip-rest", path, body)
    alias = families.family(cpu_split.FAMILIES[family]).api.oip.alias
    assert load.path == f"/v2/models/{alias}/infer"
    assert load.wrk == (family in ("text", "forecast"))  # JSON where it can be; images as binary tensor data
    req = parse_infer_request(alias, "", load.body, load.headers.get("Inference-Header-Content-Length"))
    assert carried(family, pipeline_request(family, req)) == expected_fields(family, body, jpeg)


CHILD = """
import json, sys
from pathlib import Path
from scripts.bench import cpu_split
from tests.scripts.bench.test_cpu_split import carried, expected_fields, pipeline_request
from triserve.services.protocols.generated import grpc_predict_v2_pb2 as pb
from triserve.services.protocols.grpc_oip import request_from_pb

jpeg = Path(sys.argv[1]).read_bytes()
for family in cpu_split.FAMILIES:
    path, body = cpu_split.request(family, jpeg=jpeg)
    load = cpu_split.load_for(family, "oip-grpc", path, body)
    assert load.path == "/inference.GRPCInferenceService/ModelInfer" and load.answer == "oip", load
    req = request_from_pb(pb.ModelInferRequest.FromString(load.body))
    assert req.model_name == cpu_split.oip_alias(family)
    assert carried(family, pipeline_request(family, req)) == expected_fields(family, body, jpeg), family
print("OIP-GRPC OK")
"""


def test_oip_grpc_request_is_the_same_request(jpeg, tmp_path):
    """In a child process: the product's OIP stubs and tritonclient.grpc (other test modules) cannot share one."""
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(jpeg)
    done = subprocess.run([sys.executable, "-c", CHILD, str(photo)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "OIP-GRPC OK" in done.stdout, done.stderr[-2000:]


def test_cells_take_an_optional_transport():
    assert cost_table.parse_cell("text:32:remote") == ("text", "32", "remote", "rest")
    assert cost_table.parse_cell("pose:4:local:oip-grpc") == ("pose", "4", "local", "oip-grpc")
    for bad in ("text:32", "text:32:remote:soap", "image:4:remote", "text:x:remote", "text:4:nowhere:rest:1"):
        with pytest.raises(SystemExit):
            cost_table.parse_cell(bad)


def test_markdown_has_a_transport_column():
    row = {"family": "text", "concurrency": 4, "placement": "remote", "transport": "grpc", "variant": "base",
           "env": "", "requests_per_s": [100.0], "failed": 0, "cpu_ms": {"triserve": [1.0], "triserve-runner": [3.0]},
           "total_ms": [4.0], "floor_ms": [5.0], "total_over_floor": [0.8], "rss_mb": [{"triserve-runner": 800.0}]}
    text = cost_table.to_markdown({"started_utc": "now", "command": "x", "rounds": 1, "table": [row]})
    header, _, line = text.split("\n")[6:9]
    assert "| transport |" in header and "| grpc |" in line and header.count("|") == line.count("|")


def test_forecast_floor_runs_the_served_pipeline():
    """On the default forecaster (models/store, `make models`): the tiny recipe's build takes 20 s and more here,
    past this file's budget, so without the default models the test is skipped."""
    if not (cpu_split.STORE / cpu_split.MODELS["forecast"]).is_dir():
        pytest.skip(f"{cpu_split.MODELS['forecast']} is not in models/store (make models)")
    _, body = cpu_split.request("forecast")
    answer = cpu_split.floor_step("forecast", body)()
    assert isinstance(answer, dict) and len(answer["forecast"]) == body["horizon"]
    report = answer["input"]
    assert report.backtest_origins > 0 and report.frequency == "MS"  # the model weighed by the backtest: as served


def test_wait_idle_returns_once_the_server_is_quiet():
    class Quiet:  # a "server" whose one worker is this (idle, sleeping) test process
        def pids(self):
            return {"triserve": [os.getpid()]}

    assert cpu_split.wait_idle(Quiet(), quiet_s=0.2, timeout_s=5) < 1.5
