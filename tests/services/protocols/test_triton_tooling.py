"""The Triton extensions Triton's own tools ask for, through the session's real `bentoml serve` with stock
tritonclient: the model configuration (HTTP GET /v2/models/{name}[/versions/{v}]/config, gRPC ModelConfig) and the
repository index (HTTP POST /v2/repository/index, gRPC RepositoryIndex).

Like tests/services/test_protocols.py, this process must not import triserve.services.protocols.grpc_oip /
generated.grpc_predict_v2_pb2: tritonclient.grpc registers the same standard `inference.*` protobuf names.
"""
from __future__ import annotations

import grpc
import httpx
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
import yaml
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.conftest import TINY_MODELS
from triserve.configs.settings import get_settings

# deployments + family aliases (tiny repository)
PIPELINES = {"detection", "text", "forecast", "segmentation", "detect", "classify", "segment"}


@pytest.fixture(scope="module")
def http_client(server):
    return thttp.InferenceServerClient(server.url.removeprefix("http://"), network_timeout=60)


@pytest.fixture(scope="module")
def grpc_client(server):
    client = tgrpc.InferenceServerClient(server.grpc_target)
    yield client
    client.close()


@pytest.fixture(scope="module")
def tiny_repo() -> dict:
    return yaml.safe_load(TINY_MODELS.read_text())


@pytest.fixture(scope="module")
def slot_batch(tiny_repo) -> dict[str, int]:
    """Registry model -> its slot's batching.max_batch_size, as the test server's repository configures it."""
    return {dep[k]["name"]: dep[k]["batching"]["max_batch_size"]
            for dep in tiny_repo["deployments"] for k in ("model", "fallback")}


def manifest(registry, name):
    return registry.load_verified(name, "stable")[1]


def grpc_tensors(tensors) -> list[tuple[str, str, list[int]]]:
    return [(t.name, mc.DataType.Name(t.data_type), list(t.dims)) for t in tensors]


def http_tensors(tensors) -> list[tuple[str, str, list[int]]]:
    return [(t["name"], t["data_type"], t["dims"]) for t in tensors]


# --- model configuration ------------------------------------------------------------------------------------------
def test_tensor_model_config_http_and_grpc(http_client, grpc_client, tiny_registry, tiny_repo, slot_batch):
    text = manifest(tiny_registry, "minilm-intent")
    cfg = http_client.get_model_config("minilm-intent")
    assert (cfg["name"], cfg["platform"], cfg["backend"]) == ("minilm-intent", "onnxruntime_onnx", "onnxruntime")
    assert cfg["max_batch_size"] == slot_batch["minilm-intent"] == 64
    # Triton's convention: dims leave out the batch axis when max_batch_size > 0
    assert http_tensors(cfg["input"]) == [("input_ids", "TYPE_INT64", [-1]), ("attention_mask", "TYPE_INT64", [-1])]
    assert http_tensors(cfg["output"]) == [(text.outputs[0].name, "TYPE_FP32", [len(text.labels)])]
    assert cfg["version_policy"] == {"latest": {"num_versions": 1}}
    settings = get_settings()
    delay_us = round(settings.gateway.coalesce_wait_ms * 1000) if settings.runner.batching == "gateway" else 0
    assert cfg["dynamic_batching"] == {"preferred_batch_size": [], "max_queue_delay_microseconds": delay_us,
                                       "preserve_ordering": False}
    assert cfg["parameters"]["slot"] == {"string_value": "text"}
    assert cfg["default_model_filename"] == text.model_file
    assert http_client.get_model_config("minilm-intent", model_version=text.version)["name"] == "minilm-intent"

    det = manifest(tiny_registry, "yolo-shapes")
    size = det.preprocess.imgsz
    gcfg = grpc_client.get_model_config("yolo-shapes").config
    assert (gcfg.name, gcfg.platform, gcfg.backend) == ("yolo-shapes", "onnxruntime_onnx", "onnxruntime")
    assert gcfg.max_batch_size == slot_batch["yolo-shapes"] == 16
    assert grpc_tensors(gcfg.input) == [(det.inputs[0].name, "TYPE_FP32", [3, size, size])]
    assert gcfg.input[0].data_type == mc.TYPE_FP32
    assert gcfg.HasField("dynamic_batching") and gcfg.dynamic_batching.max_queue_delay_microseconds == delay_us
    assert gcfg.version_policy.WhichOneof("policy_choice") == "latest"
    assert gcfg.version_policy.latest.num_versions == 1
    assert grpc_client.get_model_config("yolo-shapes-lite").config.max_batch_size == slot_batch["yolo-shapes-lite"]
    assert grpc_client.get_model_config("yolo-shapes", model_version=det.version).config.name == "yolo-shapes"
    forecaster = next(d["model"]["name"] for d in tiny_repo["deployments"] if d["family"] == "forecast")
    as_json = grpc_client.get_model_config(forecaster, as_json=True)["config"]
    assert as_json["name"] == forecaster and as_json["max_batch_size"] == slot_batch[forecaster]


def test_pipeline_config_http_and_grpc(http_client, grpc_client):
    cfg = http_client.get_model_config("classify")
    assert (cfg["name"], cfg["platform"], cfg["backend"], cfg["max_batch_size"]) == \
        ("classify", "triserve_pipeline", "python", 0)
    assert "dynamic_batching" not in cfg  # no batch axis in Triton's sense: dims are the full shapes
    assert http_tensors(cfg["input"]) == [("TEXT", "TYPE_STRING", [-1])]
    assert http_tensors(cfg["output"]) == [("LABEL", "TYPE_STRING", [-1]), ("SCORE", "TYPE_FP32", [-1]),
                                           ("TOP_K_LABELS", "TYPE_STRING", [-1, -1]),
                                           ("TOP_K_SCORES", "TYPE_FP32", [-1, -1])]
    assert cfg["parameters"]["deployment"] == {"string_value": "text"}
    assert cfg["parameters"]["models"] == {"string_value": "minilm-intent,minilm-intent-int8"}
    gcfg = grpc_client.get_model_config("forecast").config
    assert (gcfg.platform, gcfg.backend, gcfg.max_batch_size) == ("triserve_pipeline", "python", 0)
    assert not gcfg.HasField("dynamic_batching")
    assert not {t.name: t for t in gcfg.input}["VALUES"].optional
    gcfg = grpc_client.get_model_config("detect", model_version="1").config
    assert grpc_tensors(gcfg.input) == [("IMAGE", "TYPE_STRING", [-1])]
    assert gcfg.parameters["deployment"].string_value == "detection"


def test_config_agrees_with_metadata_on_every_model(http_client, grpc_client):
    """Both transports give the same configuration, and its tensors are the metadata's (less the batch axis)."""
    names = {m["name"] for m in http_client.get_model_repository_index()}
    assert PIPELINES | {"minilm-intent", "yolo-shapes"} <= names
    for name in sorted(names):
        cfg = http_client.get_model_config(name)
        gcfg = grpc_client.get_model_config(name).config
        assert (gcfg.name, gcfg.platform, gcfg.backend, gcfg.max_batch_size) == \
            (cfg["name"], cfg["platform"], cfg["backend"], cfg["max_batch_size"]), name
        assert grpc_tensors(gcfg.input) == http_tensors(cfg["input"]), name
        assert grpc_tensors(gcfg.output) == http_tensors(cfg["output"]), name
        meta = http_client.get_model_metadata(name)
        assert cfg["platform"] == meta["platform"], name
        assert cfg["backend"] in ({"python"} if name in PIPELINES else {"onnxruntime", "python"}), name
        lead = [-1] if cfg["max_batch_size"] > 0 else []
        for tensors, metas in ((cfg["input"], meta["inputs"]), (cfg["output"], meta["outputs"])):
            assert [(t["name"], lead + t["dims"]) for t in tensors] == [(m["name"], m["shape"]) for m in metas], name
            assert [t["data_type"].removeprefix("TYPE_").replace("STRING", "BYTES") for t in tensors] == \
                [m["datatype"] for m in metas], name


def test_config_of_an_unknown_model_is_not_found(server, http_client, grpc_client):
    with pytest.raises(InferenceServerException) as err:
        http_client.get_model_config("no-such-model")
    assert err.value.status() == "404" and err.value.message().startswith("model_not_found:")
    with pytest.raises(InferenceServerException) as err:
        http_client.get_model_config("minilm-intent", model_version="0.0.0-nope")
    assert err.value.status() == "404" and err.value.message().startswith("model_version_not_found:")
    with pytest.raises(InferenceServerException) as err:
        grpc_client.get_model_config("no-such-model")
    assert err.value.status() == "StatusCode.NOT_FOUND" and err.value.message().startswith("model_not_found:")
    resp = httpx.get(f"{server.url}/v2/models/no-such-model/versions/1/config", timeout=30)
    assert resp.status_code == 404 and resp.json()["code"] == "model_not_found"


# --- repository index ---------------------------------------------------------------------------------------------
def test_repository_index_http_and_grpc(server, http_client, grpc_client, tiny_registry):
    index = http_client.get_model_repository_index()
    by_name = {m["name"]: m for m in index}
    text = manifest(tiny_registry, "minilm-intent")
    assert by_name["minilm-intent"] == {"name": "minilm-intent", "version": text.version, "state": "READY"}
    for name in PIPELINES:
        assert by_name[name] == {"name": name, "version": "1", "state": "READY"}  # no reason when ready
    assert {m["state"] for m in index} == {"READY"}

    gindex = grpc_client.get_model_repository_index().models
    assert sorted((m.name, m.version, m.state, m.reason) for m in gindex) == \
        sorted((m["name"], m["version"], m["state"], "") for m in index)

    # Triton's request body {"ready": true} (tritonclient sends none), and the same filter over gRPC
    ready = httpx.post(f"{server.url}/v2/repository/index", json={"ready": True}, timeout=30)
    assert ready.status_code == 200 and ready.json() == index
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        answer = stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True), timeout=30)
    assert sorted(m.name for m in answer.models) == sorted(m["name"] for m in index)
    bad = httpx.post(f"{server.url}/v2/repository/index", json={"ready": "yes"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_request"

    assert "model_configuration" in http_client.get_server_metadata()["extensions"]
    assert "model_configuration" in grpc_client.get_server_metadata().extensions


# --- the configuration a model entry gets (no server) -------------------------------------------------------------
def test_model_config_of_hand_built_entries():
    from types import SimpleNamespace

    from triserve.configs.deployments import ModelRepository
    from triserve.configs.settings import Settings
    from triserve.kernel.family import TensorMeta
    from triserve.services.protocols import oip

    repo = ModelRepository.model_validate(yaml.safe_load(TINY_MODELS.read_text()))
    settings = Settings()
    ctx = SimpleNamespace(settings=settings, repository=repo, slot_batch=repo.max_batch)
    dep = repo.deployments[0]
    onnx = SimpleNamespace(model_file="model.onnx", engine="onnxruntime")

    def entry(kind, inputs, outputs, manifest=None):
        return oip.ModelEntry(name="m", kind=kind, deployment=dep.name, family=dep.family, versions=("1",),
                              platform=oip.TENSOR_PLATFORM if kind == "tensor" else oip.PIPELINE_PLATFORM,
                              inputs=inputs, outputs=outputs, slot=dep.name if kind == "tensor" else None,
                              manifest=manifest)

    batched = oip.model_config(ctx, entry("tensor", (TensorMeta("x", "FP16", (-1, 3, 8)),),
                                          (TensorMeta("y", "BOOL", (-1,)),), onnx))
    assert batched["max_batch_size"] == dep.model.batching.max_batch_size
    assert (batched["input"][0]["dims"], batched["input"][0]["data_type"]) == ([3, 8], "TYPE_FP16")
    assert (batched["output"][0]["dims"], batched["output"][0]["data_type"]) == ([], "TYPE_BOOL")
    assert "dynamic_batching" in batched and batched["backend"] == "onnxruntime"
    # a fixed leading axis: no batching in Triton's sense, full shapes
    fixed = oip.model_config(ctx, entry("tensor", (TensorMeta("x", "INT32", (1, 4)),),
                                        (TensorMeta("y", "FP32", (-1, 4)),), onnx))
    assert fixed["max_batch_size"] == 0 and fixed["input"][0]["dims"] == [1, 4] and "dynamic_batching" not in fixed
    numpy_model = SimpleNamespace(model_file="method.json", engine="numpy")
    assert oip.model_config(ctx, entry("tensor", (TensorMeta("x", "FP32", (-1, 4)),), (TensorMeta("y", "FP32", (-1,)),),
                                       numpy_model))["backend"] == "python"
    pipeline = oip.model_config(ctx, entry("pipeline", (TensorMeta("A", "BYTES", (-1,)),
                                                        TensorMeta("B", "FP32", (-1,), optional=True)),
                                           (TensorMeta("C", "BYTES", (-1, -1)),)))
    assert [(i["name"], i["data_type"], i["dims"], i["optional"]) for i in pipeline["input"]] == \
        [("A", "TYPE_STRING", [-1], False), ("B", "TYPE_FP32", [-1], True)]
    assert pipeline["max_batch_size"] == 0 and pipeline["backend"] == "python"
    assert pipeline["parameters"]["models"]["string_value"] == ",".join(m.name for m in dep.slots.values())
    # runner.batching=runner: BentoML's dispatcher adapts its wait, so no fixed queue delay is claimed
    ctx.settings = settings.model_copy(update={"runner": settings.runner.model_copy(update={"batching": "runner"})})
    runner_side = oip.model_config(ctx, entry("tensor", (TensorMeta("x", "FP32", (-1,)),),
                                              (TensorMeta("y", "FP32", (-1,)),), onnx))
    assert runner_side["dynamic_batching"]["max_queue_delay_microseconds"] == 0
    assert runner_side["parameters"]["batching"] == {"string_value": "runner"}
