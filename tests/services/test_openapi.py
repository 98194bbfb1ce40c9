"""services/openapi.py: the gateway's OpenAPI document (issue 43), in-process and served: operationIds named by
operation (from the family registry's routes), the API key's security schemes, an example on every request body, the
health and metrics paths, a valid OpenAPI 3.1 document; and a client generated from the served /openapi.json by
openapi-python-client (its own environment: locks/tool-openapi-client.txt says why) that classifies texts."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from openapi_spec_validator import validate

from triserve import families
from triserve.services.openapi import camel, openapi_document
from triserve.services.protocols.rest import operation_name

ROOT = Path(__file__).resolve().parents[2]
TOOL_LOCK = ROOT / "locks" / "tool-openapi-client.txt"
TOOL_ENV = ROOT / ".cache" / "tools" / "openapi-python-client"
UV = Path(sys.executable).parent / "uv"  # the project environment's uv (dev extras)


@pytest.fixture(scope="module")
def app():
    from triserve.services.gateway import app

    return app


@pytest.fixture(scope="module")
def spec(app):
    return app.openapi()


def operations(spec: dict) -> dict[str, tuple[str, str, dict]]:
    return {op["operationId"]: (method, path, op) for path, ops in spec["paths"].items() for method, op in ops.items()}


def test_operation_ids_are_the_family_routes_names(spec):
    ops = operations(spec)
    assert len(ops) == sum(len(ops_) for ops_ in spec["paths"].values())  # unique
    for name in families.names():
        for route in families.family(name).api.routes:
            method, path, _ = ops[camel(operation_name(route.path))]
            assert (method, path) == ("post", route.path)
    assert {"classify", "detect", "detectUpload", "pose", "poseUpload", "segment", "segmentUpload", "forecast",
            "forecastPanel", "modelInfer", "listModels", "putDeployment", "promote", "livez", "readyz",
            "metrics"} <= set(ops)
    assert not [op for op in ops if "_" in op]  # none of FastAPI's classify_v1_classify_post


def test_admin_operations_need_the_key_and_inference_only_when_configured(app, spec):
    assert set(spec["components"]["securitySchemes"]) == {"apiKey", "bearer"}
    assert spec["components"]["securitySchemes"]["apiKey"] == {
        **spec["components"]["securitySchemes"]["apiKey"], "type": "apiKey", "in": "header", "name": "X-API-Key"}
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    inference = {camel(operation_name(r.path)) for n in families.names() for r in families.family(n).api.routes}
    inference |= {"modelInfer", "modelVersionInfer"}
    for keyed in (False, True):
        doc = openapi_document(app, require_key_for_inference=keyed)
        for op_id, (_, path, op) in operations(doc).items():
            secured = op.get("security") == [{"apiKey": []}, {"bearer": []}]
            assert secured == (path.startswith("/admin/") or (keyed and op_id in inference)), (keyed, op_id)
            assert "x-triserve-access" not in op


def test_every_request_body_has_an_example_and_health_paths_are_documented(spec):
    for op_id, (_, _, op) in operations(spec).items():
        for media_type, content in op.get("requestBody", {}).get("content", {}).items():
            assert content.get("example") not in (None, {}), (op_id, media_type)
    classify = spec["paths"]["/v1/classify"]["post"]["requestBody"]["content"]["application/json"]["example"]
    assert classify["texts"]
    for path in ("/livez", "/readyz", "/metrics"):
        assert "200" in spec["paths"][path]["get"]["responses"], path
    assert not [name for name in spec["components"]["schemas"] if "__" in name or name.startswith("Body_")]
    validate(spec)  # a valid OpenAPI document (openapi-spec-validator)


def test_description_names_every_family(spec):
    assert all(name in spec["info"]["description"] for name in families.names())


@pytest.fixture(scope="session")
def generator() -> Path:
    """openapi-python-client in its own environment, from its lock (created once under .cache/tools)."""
    exe = TOOL_ENV / "bin" / "openapi-python-client"
    if not exe.exists():
        try:
            subprocess.run([str(UV), "venv", "-q", "--python", sys.executable, str(TOOL_ENV)], check=True,
                           timeout=120)
            subprocess.run([str(UV), "pip", "install", "-q", "--system-certs", "--python",
                            str(TOOL_ENV / "bin" / "python"), "-r", str(TOOL_LOCK)], check=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as exc:
            pytest.skip(f"cannot create the generator's environment from {TOOL_LOCK.name} (PyPI unreachable?): {exc}")
    return exe


def test_a_generated_client_calls_classify_on_the_served_api(server, generator, tmp_path, monkeypatch):
    served = httpx.get(f"{server.url}/openapi.json", timeout=10)
    served.raise_for_status()
    (tmp_path / "openapi.json").write_bytes(served.content)
    (tmp_path / "config.yml").write_text("post_hooks: []\n")  # no formatter run: the code is compiled as generated
    out = subprocess.run([str(generator), "generate", "--path", str(tmp_path / "openapi.json"), "--meta", "none",
                          "--config", str(tmp_path / "config.yml"), "--output-path", str(tmp_path / "triserve_api")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Warning" not in out.stdout, out.stdout  # every schema and operation made it into the client
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tmp_path / "triserve_api")], check=True)

    monkeypatch.syspath_prepend(str(tmp_path))
    api = importlib.import_module("triserve_api")
    classify = importlib.import_module("triserve_api.api.text.classify")
    models = importlib.import_module("triserve_api.models")
    with api.Client(base_url=server.url) as client:
        answer = classify.sync_detailed(client=client, body=models.ClassifyRequest(texts=["what is my balance"],
                                                                                   top_k=2))
    assert answer.status_code == 200, answer.content
    parsed = answer.parsed
    assert isinstance(parsed, models.ClassifyResponse)
    assert parsed.deployment == "text" and len(parsed.results) == 1 and len(parsed.results[0].top_k) == 2
    assert parsed.results[0].label == parsed.results[0].top_k[0].label
