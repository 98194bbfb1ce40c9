"""A third-party family served end to end without a line of the product changed: a distribution installed next to
triserve (a dist-info with an entry point in the `triserve.families` group, and its own package, on the path of
every process) declares `vecsum`, a family that sums each vector of a request (its values as text, "1 2 3") with
the weights of its model (a tiny ONNX MatMul published in a throw-away registry). A real `bentoml serve` discovers
it, routes REST and OIP (REST and gRPC) to it through the kernel's lifecycle (limits refused before the runner, the
envelope, the fallback), and `triserve batch` gets its command from the registry. It has no typed gRPC method (its
messages would be in triserve.proto, this distribution's own).

The family and the registry are made in subprocesses (the registry and the manifest's preprocess union are read once
per process: this test's process has read them without the distribution)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from tests.conftest import NO_CAPACITY_LIMITS, Server

ROOT = Path(__file__).resolve().parents[2]
WEIGHTS = (1.0, 2.0, 3.0)  # the primary's; the fallback's are halved (a degraded answer is told apart)

PACKAGE = {
    "__init__.py": '"""acme\'s vecsum family for triserve: vectors in, their weighted sums out."""\n',
    "limits.py": """
        from pydantic import BaseModel, ConfigDict, Field


        class Limits(BaseModel):
            model_config = ConfigDict(extra="forbid")
            max_vectors: int = Field(4, ge=1, description="Vectors per request.")
        """,
    "manifest.py": """
        from typing import Literal

        from pydantic import BaseModel, ConfigDict, Field


        class Preprocess(BaseModel):
            model_config = ConfigDict(extra="forbid", frozen=True)
            kind: Literal["vecsum"] = "vecsum"
            width: int = Field(gt=0, description="Values per vector.")
        """,
    "runtime.py": """
        import numpy as np


        def feeds(manifest, input_names, xs):
            return {input_names[0]: np.stack(xs).astype(np.float32)}


        def warmup_sizes(manifest):
            return {}
        """,
    "family.py": """
        import numpy as np
        from pydantic import BaseModel, ConfigDict, Field

        from triserve.kernel.errors import ApiError
        from triserve.kernel.family import Family, FamilyApi, OipSurface, RestRoute
        from triserve.kernel.schemas import ModelChoice, ServedBy, deployment_field
        from triserve.kernel.tensors import TensorMeta, check_batch


        class SumRequest(BaseModel):
            model_config = ConfigDict(extra="forbid")
            vectors: list[str] = Field(min_length=1, description="Each vector's values, separated by spaces.")
            model: ModelChoice = "auto"
            deployment: str | None = deployment_field()


        class SumResponse(ServedBy):
            sums: list[float]


        class VecSumOip(OipSurface):
            def tensor_items(self, view, served, arrays, batch_cap):
                arr = arrays[served.manifest.inputs[0].name]
                check_batch(arr.shape[0], batch_cap, served.manifest.inputs[0].name)
                return [np.asarray(x, dtype=np.float32) for x in arr]


        class VecSumFamily(Family):
            name = "vecsum"
            api = FamilyApi(request_model=SumRequest, response_model=SumResponse, grpc_method="VecSum",
                            routes=(RestRoute("/v1/vecsum", "application/json", SumRequest,
                                              "Weighted sums of vectors"),),
                            oip=VecSumOip(alias="vecsum", parameters=("model",),
                                          inputs=(TensorMeta("VECTORS", "BYTES", (-1,), field="vectors"),),
                                          outputs=(TensorMeta("SUMS", "FP32", (-1,), value=lambda r: r.sums),)))

            def validate(self, view, request):
                if len(request.vectors) > view.limits.max_vectors:
                    raise ApiError(422, "too_many_vectors", f"{len(request.vectors)} vectors exceed "
                                   f"{view.limits.max_vectors}", {"limit": view.limits.max_vectors})
                try:
                    return [np.asarray([float(x) for x in v.split()], dtype=np.float32) for v in request.vectors]
                except ValueError as exc:
                    raise ApiError(422, "invalid_vector", str(exc)) from exc

            def items(self, view, work, model):
                width = model.manifest.preprocess.width
                for i, v in enumerate(work):
                    if v.shape != (width,):
                        raise ApiError(422, "wrong_width", f"vector {i} has {v.size} values, not {width}",
                                       {"index": i, "width": width})
                return list(work), None

            def respond(self, view, request, work, answers):
                return {"sums": [round(float(y[0]), 4) for a in answers for y in a.result.outputs]}

            def check_outputs(self, manifest, outputs):
                pass

            def agreement(self, manifest, served, shadow):
                return float(np.allclose(served, shadow))


        FAMILY = VecSumFamily()
        """,
    "batch.py": """
        import numpy as np

        from triserve.kernel.batch import Prepared


        class Adapter:
            FAMILY = "vecsum"
            COMMAND = "vecsum"
            CHUNK_SIZE, SHARD_SIZE = 4, 8
            OPTIONS = ()
            COLUMNS = {"sum": "f64"}
            SOURCE = "texts"  # each text: the vector's values, separated by spaces
            HEAVY_FINISH = False

            def __init__(self, directory, manifest, limits, options):
                self.width = manifest.preprocess.width

            def prepare(self, records):
                out = Prepared(keys=[str(r["key"]) for r in records], states=[None] * len(records))
                for i, record in enumerate(records):
                    values = str(record.get("text") or "").split()
                    if len(values) != self.width:
                        out.errors[i] = ("wrong_width", f"{len(values)} values, not {self.width}")
                        continue
                    out.items.append(np.asarray([float(v) for v in values], dtype=np.float32))
                    out.owners.append(i)
                return out

            def finish(self, prepared, outputs):
                return prepared.rows(outputs, self.COLUMNS, lambda outs, _: {"sum": round(float(outs[0][0]), 4)})
        """,
}

# Builds the registry in a process that sees the distribution: the primary and its fallback, aliases 'stable'.
BUILD = """
import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper, numpy_helper
import numpy as np

from triserve.models.manifest import Manifest, Source, TensorSpec, utcnow
from triserve.models.registry import LocalRegistry

root, work, weights = Path(sys.argv[1]), Path(sys.argv[2]), [float(w) for w in sys.argv[3].split(",")]
registry = LocalRegistry(root)
for name, scale, variant in (("vecsum-tiny", 1.0, "primary"), ("vecsum-tiny-half", 0.5, "fallback")):
    w = np.asarray(weights, dtype=np.float32).reshape(-1, 1) * scale
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", len(weights)])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    staging = work / name
    staging.mkdir(parents=True)
    onnx.save(model, str(staging / "model.onnx"))
    manifest = Manifest(name=name, version="1.0.0", task="vecsum", variant=variant,
                        fallback_for="vecsum-tiny" if variant == "fallback" else None, model_file="model.onnx",
                        files=[], opset=17, inputs=[TensorSpec(name="x", dtype="float32", shape=["batch", 3])],
                        outputs=[TensorSpec(name="y", dtype="float32", shape=["batch", 1])],
                        preprocess={"kind": "vecsum", "width": len(weights)},
                        source=Source(kind="recipe", license="Apache-2.0", description="a third-party test model"),
                        data_fingerprint="none", recipe_hash="none", created_at=utcnow(), git_commit="none")
    registry.publish(staging, manifest)
    registry.set_alias(name, "stable", "1.0.0", by="test")
"""

MODELS = """
deployments:
  - name: vecsum
    family: vecsum
    model:    {name: vecsum-tiny,      ref: stable, batching: {max_batch_size: 8}}
    fallback: {name: vecsum-tiny-half, ref: stable, batching: {max_batch_size: 8}}
"""


@pytest.fixture(scope="module")
def distribution(tmp_path_factory) -> dict[str, str]:
    """The installed distribution (on PYTHONPATH), the registry built with it and the models file naming it: the
    environment of every process of this test."""
    site = tmp_path_factory.mktemp("site")
    info = site / "acme_vecsum-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-vecsum\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[triserve.families]\nvecsum = acme_vecsum\n")
    (site / "acme_vecsum").mkdir()
    for name, text in PACKAGE.items():
        (site / "acme_vecsum" / name).write_text(textwrap.dedent(text).lstrip())
    models = site / "models.yaml"
    models.write_text(MODELS)
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "TRISERVE_MODELS_FILE": str(models)}
    registry = tmp_path_factory.mktemp("registry")
    done = subprocess.run([sys.executable, "-c", BUILD, str(registry), str(tmp_path_factory.mktemp("work")),
                           ",".join(map(str, WEIGHTS))], cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return {**env, "TRISERVE_REGISTRY_DIR": str(registry)}


@pytest.fixture(scope="module")
def vecsum_server(distribution, tmp_path_factory):
    log = tmp_path_factory.mktemp("logs") / "serve.log"
    with Server(Path(distribution["TRISERVE_REGISTRY_DIR"]), env={**NO_CAPACITY_LIMITS, **distribution},
                log_path=log) as srv:
        srv.wait_ready()
        yield srv


def test_rest_answers_through_the_kernel_lifecycle(vecsum_server):
    resp = httpx.post(f"{vecsum_server.url}/v1/vecsum", json={"vectors": ["1 1 1", "0 0 2"]}, timeout=60)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["sums"] == [6.0, 6.0] and body["deployment"] == "vecsum" and body["degraded"] is False
    assert body["model"] == {"name": "vecsum-tiny", "version": "1.0.0"} and body["request_id"]
    fallback = httpx.post(f"{vecsum_server.url}/v1/vecsum", json={"vectors": ["1 1 1"], "model": "fallback"},
                          timeout=60).json()
    assert fallback["sums"] == [3.0] and fallback["degraded"] is True
    assert fallback["model"]["name"] == "vecsum-tiny-half"


@pytest.mark.parametrize("body, status, code", [
    ({"vectors": ["1 2 3"] * 5}, 422, "too_many_vectors"),  # the family's limit, in validate
    ({"vectors": ["1 2 x"]}, 422, "invalid_vector"),
    ({"vectors": ["1 2"]}, 422, "wrong_width"),  # against the served version's manifest, in items
    ({"vectors": ["1 2 3"], "deployment": "nope"}, 404, None),  # the kernel's binding
])
def test_bad_input_is_a_machine_readable_4xx(vecsum_server, body, status, code):
    resp = httpx.post(f"{vecsum_server.url}/v1/vecsum", json=body, timeout=60)
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["code"] == code if code else error["code"]


def test_the_open_inference_protocol_serves_it(vecsum_server):
    models = httpx.get(f"{vecsum_server.url}/v1/models", timeout=30).json()
    assert "vecsum" in json.dumps(models)
    infer = {"inputs": [{"name": "VECTORS", "datatype": "BYTES", "shape": [2], "data": ["1 0 0", "0 1 1"]}]}
    resp = httpx.post(f"{vecsum_server.url}/v2/models/vecsum/infer", json=infer, timeout=60)
    assert resp.status_code == 200, resp.text
    [out] = resp.json()["outputs"]
    assert out["name"] == "SUMS" and out["data"] == [1.0, 5.0]
    import numpy as np
    import tritonclient.grpc as tgrpc

    client = tgrpc.InferenceServerClient(vecsum_server.grpc_target)
    try:
        vectors = tgrpc.InferInput("VECTORS", [1], "BYTES")
        vectors.set_data_from_numpy(np.array([b"2 0 1"], dtype=object))
        assert client.infer("vecsum", [vectors]).as_numpy("SUMS").tolist() == [5.0]
    finally:
        client.close()


def test_batch_has_its_command(distribution, tmp_path):
    """`triserve batch vecsum` in a process that sees the distribution: a row per text, an error row for a vector
    of the wrong width."""
    table = tmp_path / "vectors.jsonl"
    table.write_text("".join(json.dumps({"id": k, "text": t}) + "\n"
                             for k, t in (("a", "1 1 1"), ("b", "0 0 1"), ("c", "1 2"))))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "triserve.cli", "batch", "vecsum", "--deployment", "vecsum",
                           "--input", str(table), "--output", str(out), "--registry",
                           distribution["TRISERVE_REGISTRY_DIR"], "--cache-dir", str(tmp_path / "cache"),
                           "--format", "jsonl", "--workers", "0", "--quiet"],
                          cwd=ROOT, env={**os.environ, **distribution}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    from triserve.batch.sinks import read_rows

    rows = {r["key"]: r for r in read_rows(out)}
    assert (rows["a"]["sum"], rows["b"]["sum"]) == (6.0, 3.0) and rows["a"]["deployment"] == "vecsum"
    assert rows["c"]["error_code"] == "wrong_width" and rows["c"]["sum"] is None
