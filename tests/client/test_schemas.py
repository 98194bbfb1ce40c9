"""The client's own response models (client/triserve_client/models.py) against the server's, so they cannot drift.

Both sides are compared as JSON Schema: what the server may send (its models' serialization schema, and the response
schemas of its live /openapi.json) must validate under the client's models (their validation schema). Every field the
server declares must be in the client model, with a type that accepts every value the server's allows, and the client
must not require a field the server may omit. The client may be looser (plain strings for enumerations, optional
fields, unknown fields kept), never stricter.
"""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from typing import Any, Literal

import httpx
import pytest
from pydantic import BaseModel

import triserve_client.backtest as client_backtest
import triserve_client.models as client_models
from triserve.configs.deployments import ModelRepository
from triserve.families.classification.schemas import ClassifyImageResponse
from triserve.families.detection.schemas import DetectResponse
from triserve.families.forecast.schemas import BacktestResponse, ForecastResponse, InputReport, PanelForecastResponse
from triserve.families.pose.schemas import PoseResponse
from triserve.families.segmentation.schemas import SegmentResponse
from triserve.families.text.schemas import ClassifyResponse
from triserve.kernel.errors import ErrorResponse

Schema = dict[str, Any]
PAIRS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "ClassifyResponse": (ClassifyResponse, client_models.ClassifyResponse),
    "DetectResponse": (DetectResponse, client_models.DetectResponse),
    "ClassifyImageResponse": (ClassifyImageResponse, client_models.ClassifyImageResponse),
    "PoseResponse": (PoseResponse, client_models.PoseResponse),
    "SegmentResponse": (SegmentResponse, client_models.SegmentResponse),
    "ForecastResponse": (ForecastResponse, client_models.ForecastResponse),
    "PanelForecastResponse": (PanelForecastResponse, client_models.PanelForecastResponse),
    "BacktestResponse": (BacktestResponse, client_backtest.BacktestResponse),
    "ErrorResponse": (ErrorResponse, client_models.ErrorResponse),
    # GET /admin/deployments answers the repository's model_dump (services/repository_api.py)
    "ModelRepository": (ModelRepository, client_models.ModelRepository),
}
# (method, path, status) -> the client model that reads the answer; the answers the client parses
ROUTES = {("post", "/v1/classify", "200"): "ClassifyResponse", ("post", "/v1/detect", "200"): "DetectResponse",
          ("post", "/v1/detect/upload", "200"): "DetectResponse", ("post", "/v1/pose", "200"): "PoseResponse",
          ("post", "/v1/pose/upload", "200"): "PoseResponse", ("post", "/v1/segment", "200"): "SegmentResponse",
          ("post", "/v1/segment/upload", "200"): "SegmentResponse", ("post", "/v1/forecast", "200"): "ForecastResponse",
          ("post", "/v1/forecast/panel", "200"): "PanelForecastResponse",
          ("post", "/v1/forecast/backtest", "200"): "BacktestResponse",
          ("post", "/v1/classify-image", "200"): "ClassifyImageResponse",
          ("post", "/v1/classify-image/upload", "200"): "ClassifyImageResponse",
          ("post", "/v1/classify", "422"): "ErrorResponse", ("post", "/v1/forecast", "503"): "ErrorResponse"}
SERVER_PACKAGES = ("services", "families", "configs", "models", "runners", "observability", "scripts", "bentoml")


class Side:
    """One JSON schema and the definitions its $refs name (pydantic's #/$defs/X or OpenAPI's #/components/schemas/X)."""

    def __init__(self, schema: Schema, defs: dict[str, Schema]):
        self.schema, self.defs = schema, defs

    @classmethod
    def of_model(cls, model: type[BaseModel], mode: Literal["validation", "serialization"]) -> Side:
        schema = model.model_json_schema(mode=mode)
        return cls(schema, schema.get("$defs", {}))

    def resolve(self, schema: Schema) -> Schema:
        while "$ref" in schema:
            schema = self.defs[schema["$ref"].rsplit("/", 1)[-1]]
        return schema


def json_types(schema: Schema) -> set[str] | None:
    """The JSON types a schema admits (None: any)."""
    if "type" in schema:
        kind = schema["type"]
        return set(kind) if isinstance(kind, list) else {kind}
    values = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if values is None:
        return None
    names = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}
    return {names[type(v)] for v in values}


def mismatches(server: Side, client: Side, s: Schema | None = None, c: Schema | None = None,
               where: str = "$") -> list[str]:
    """Why a value valid under the server's schema may fail the client's ([] when every one passes)."""
    s = server.resolve(server.schema if s is None else s)
    c = client.resolve(client.schema if c is None else c)
    if "anyOf" in s or "oneOf" in s:  # every shape the server may send
        return [m for branch in s.get("anyOf", s.get("oneOf")) for m in mismatches(server, client, branch, c, where)]
    if "anyOf" in c or "oneOf" in c:  # one of the client's shapes must take it
        branches = c.get("anyOf", c.get("oneOf"))
        if any(not mismatches(server, client, s, branch, where) for branch in branches):
            return []
        return [f"{where}: the server's {_brief(s)} fits none of the client's {[_brief(b) for b in branches]}"]
    s_types, c_types = json_types(s), json_types(c)
    if c_types is None:
        return []  # the client takes anything
    if s_types is None:
        return [f"{where}: the server may send anything, the client takes only {sorted(c_types)}"]
    refused = {t for t in s_types if t not in c_types and not (t == "integer" and "number" in c_types)}
    if refused:
        return [f"{where}: the server sends {sorted(refused)}, the client takes {sorted(c_types)}"]
    c_values = c.get("enum", [c["const"]] if "const" in c else None)
    s_values = s.get("enum", [s["const"]] if "const" in s else None)
    if c_values is not None and (s_values is None or not set(s_values) <= set(c_values)):
        return [f"{where}: the client takes only {c_values}, the server sends {s_values or _brief(s)}"]
    if "format" in c and c["format"] != s.get("format"):
        return [f"{where}: the client wants format {c['format']}, the server's is {s.get('format')}"]
    problems: list[str] = []
    if "array" in s_types:
        problems += mismatches(server, client, s.get("items", {}), c.get("items", {}), f"{where}[]")
    if "object" in s_types:
        problems += _object_mismatches(server, client, s, c, where)
    return problems


def _object_mismatches(server: Side, client: Side, s: Schema, c: Schema, where: str) -> list[str]:
    problems = []
    s_props, c_props = s.get("properties", {}), c.get("properties", {})
    for name, prop in s_props.items():
        if name not in c_props:
            problems.append(f"{where}.{name}: declared by the server, missing from the client model")
        else:
            problems += mismatches(server, client, prop, c_props[name], f"{where}.{name}")
    for name in sorted(set(c.get("required", [])) - set(s.get("required", []))):
        problems.append(f"{where}.{name}: required by the client, optional (or absent) on the server")
    s_extra, c_extra = s.get("additionalProperties"), c.get("additionalProperties")
    if isinstance(s_extra, dict):  # a mapping (dict[str, X])
        if c_extra is False:
            problems.append(f"{where}: the server sends a mapping, the client takes no free keys")
        elif isinstance(c_extra, dict):
            problems += mismatches(server, client, s_extra, c_extra, f"{where}{{}}")
    return problems


def _brief(schema: Schema) -> str:
    return json.dumps({k: v for k, v in schema.items() if k not in ("title", "description", "default")})[:120]


def client_side(name: str) -> Side:
    return Side.of_model(PAIRS[name][1], "validation")


# --- the client against the server's models (no server process) -------------------------------------------------
@pytest.mark.parametrize("name", sorted(PAIRS))
def test_client_models_accept_what_the_server_models_send(name):
    server_model, _ = PAIRS[name]
    assert mismatches(Side.of_model(server_model, "serialization"), client_side(name)) == []


# --- ... and against the live server's /openapi.json ----------------------------------------------------------------
def test_client_models_accept_the_live_openapi_responses(server):
    spec = httpx.get(f"{server.url}/openapi.json", timeout=10).json()
    defs = spec["components"]["schemas"]
    for (method, path, status), name in ROUTES.items():
        content = spec["paths"][path][method]["responses"][status]["content"]["application/json"]
        assert mismatches(Side(content["schema"], defs), client_side(name)) == [], (method, path, status)


# --- the comparison can fail ------------------------------------------------------------------------------------------
def _edited(name: str, edit) -> Side:
    side = client_side(name)
    schema = copy.deepcopy(side.schema)
    edit(schema["$defs"] if "$defs" in schema else {}, schema)
    return Side(schema, schema.get("$defs", {}))


@pytest.mark.parametrize(("name", "edit", "expected"), [
    ("ForecastResponse", lambda d, s: d["InputReport"]["properties"].pop("method"),
     "$.input.method: declared by the server, missing from the client model"),
    ("ForecastResponse", lambda d, s: d["InputReport"]["properties"].pop("backtest_mase"),
     "$.input.backtest_mase: declared by the server, missing"),
    ("ClassifyResponse", lambda d, s: d["TextResult"]["properties"]["score"].update(type="integer"),
     "$.results[].score: the server sends ['number'], the client takes ['integer']"),
    ("ClassifyResponse", lambda d, s: s["required"].append("degraded_reason"),
     "$.degraded_reason: required by the client, optional"),
    ("ForecastResponse", lambda d, s: d["InputReport"]["properties"].update(frequency={"enum": ["D"]}),
     "$.input.frequency: the client takes only ['D']"),
    ("ForecastResponse", lambda d, s: d["ForecastPoint"]["properties"].update(quantiles={
        "type": "object", "additionalProperties": {"type": "integer"}}),
     "$.forecast[].quantiles{}: the server sends ['number']"),
    ("ErrorResponse", lambda d, s: d["ErrorBody"]["properties"].update(details={"type": "string"}),
     "$.error.details: the server may send anything"),
    ("SegmentResponse", lambda d, s: d["Instance"]["properties"].pop("rle"),
     "$.results[].instances[].rle: declared by the server, missing"),
    ("PoseResponse", lambda d, s: d["Bone"]["properties"]["start"].update(type="string"),
     "$.skeleton[].start: the server sends ['integer'], the client takes ['string']"),
    ("PoseResponse", lambda d, s: d["PoseImageResult"]["required"].append("masks"),
     "$.results[].masks: required by the client, optional (or absent)"),
])
def test_a_drifted_client_model_is_caught(name, edit, expected):
    server_side = Side.of_model(PAIRS[name][0], "serialization")
    found = mismatches(server_side, _edited(name, edit))
    assert any(m.startswith(expected) for m in found), found


def test_a_newer_server_field_is_caught_and_still_parsed():
    """A field the server adds is reported until the client declares it, and meanwhile kept, not refused."""

    class NewerInputReport(InputReport):  # the server's model, one field more
        seasonality: int

    class NewerForecastResponse(ForecastResponse):
        input: NewerInputReport

    found = mismatches(Side.of_model(NewerForecastResponse, "serialization"), client_side("ForecastResponse"))
    assert found == ["$.input.seasonality: declared by the server, missing from the client model"]


# --- tolerance, both ways -----------------------------------------------------------------------------------------
FORECAST_ANSWER: dict[str, Any] = {
    "request_id": "r1", "deployment": "series", "model": {"name": "forecast-global", "version": "1"},
    "degraded": False, "timings": {"total_ms": 3.5},
    "forecast": [{"timestamp": "2026-12-01T00:00:00Z", "point": 1.0, "quantiles": {"0.5": 1.0}}],
    "input": {"frequency": "MS", "frequency_inferred": False, "sorted": False, "duplicates_merged": 0, "imputed": 0,
              "points": 48, "used": 48, "padded": 720}}


def test_an_older_server_without_the_method_report_parses():
    r = client_models.ForecastResponse.model_validate(FORECAST_ANSWER)
    assert r.input.method is None and r.input.points == 48 and r.timings.total_ms == 3.5


def test_unknown_fields_and_values_from_a_newer_server_are_kept():
    answer = copy.deepcopy(FORECAST_ANSWER)
    answer["input"].update(frequency="5min", method="global+drift", interval_calibration="bootstrap", seasonality=12)
    answer["forecast"][0]["lower_99"] = 0.5
    answer["carbon_g"] = 0.01
    r = client_models.ForecastResponse.model_validate(answer)
    assert r.input.frequency == "5min" and r.input.interval_calibration == "bootstrap"
    assert r.input.model_extra == {"seasonality": 12} and r.forecast[0].model_extra == {"lower_99": 0.5}
    assert r.model_extra == {"carbon_g": 0.01}


def test_the_client_package_imports_nothing_of_the_server():
    probe = ("import sys, triserve_client, triserve_client.models, triserve_client.grpc; "
             f"print([m for m in sys.modules if m.split('.')[0] in {SERVER_PACKAGES!r}])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout
