"""BentoML's own clients for the REST API: `bentoml.SyncHTTPClient(url).classify(texts=[...])`.

BentoML's SyncHTTPClient / AsyncHTTPClient (and the BentoCloud playground) build their methods from the `routes` of
/schema.json, which BentoML fills from `@bentoml.api` methods only: the FastAPI routes mounted on the Gateway are not
in it. A client method POSTs its named arguments as one JSON object to the route, and that is exactly the body of our
JSON routes (/v1/classify, /v1/detect, /v1/pose, /v1/segment, /v1/forecast, ...: every family's, from the
family registry). So instead of a second set of endpoints, an ASGI middleware adds
those routes to the /schema.json BentoML serves, with their request and response models' JSON schemas: the clients
then call the REST routes themselves, through the same middleware, protection and error model (a refused request
raises `bentoml.exceptions.BentoMLException` carrying the status, its text the {error: {...}} body).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.routing import BaseRoute

from triserve import families
from triserve.services.protocols.rest import operation_name

SCHEMA_PATH = "/schema.json"


def client_apis() -> dict[str, str]:
    """Client method name -> the JSON route it calls, for every JSON route of every registered family (the family
    registry, third-party families included; multipart upload routes stay REST only), named as the route's FastAPI
    endpoint: /v1/forecast/panel -> forecast_panel."""
    return {operation_name(route.path): route.path for name in families.names()
            for route in families.family(name).api.routes if not route.files}


def _inline(node: Any, defs: Mapping[str, Any]) -> Any:
    """A JSON schema with its local $refs replaced by their definitions (BentoML's schema routes are flat)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return {**_inline(defs[ref.removeprefix("#/$defs/")], defs), **_inline(rest, defs)}
        return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def model_schema(model: type[BaseModel], mode: str) -> dict[str, Any]:
    schema = model.model_json_schema(mode="validation" if mode == "validation" else "serialization")
    return _inline(schema, schema.get("$defs", {}))


def _body_model(route: APIRoute) -> type[BaseModel]:
    model = route.body_field.field_info.annotation if route.body_field is not None else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"route {route.path} has no JSON body model")
    return model


def client_routes(routes: Iterable[BaseRoute], apis: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The /schema.json route entries (BentoML's APIMethod.schema() shape) of the JSON POST routes named in `apis`
    (default: client_apis()), found among `routes` (the families' routers' routes)."""
    apis = client_apis() if apis is None else apis
    by_path = {r.path: r for r in routes if isinstance(r, APIRoute) and "POST" in (r.methods or ())}
    out = []
    for name, path in apis.items():
        route = by_path[path]
        response = route.response_model
        if not (isinstance(response, type) and issubclass(response, BaseModel)):
            raise TypeError(f"route {path} has no response model")
        out.append({"name": name, "route": path, "description": route.summary or route.description,
                    "batchable": False, "is_task": False,
                    "input": model_schema(_body_model(route), "validation"),
                    "output": model_schema(response, "serialization")})
    return out


@dataclass
class _Captured:
    start: dict[str, Any] | None = None
    body: bytes = b""


class SchemaRoutes:
    """ASGI middleware: GET /schema.json answers BentoML's schema plus `routes` (entries whose name BentoML already
    lists are kept as BentoML's). Every other request passes straight through."""

    def __init__(self, app: Any, routes: Iterable[dict[str, Any]]) -> None:
        self.app = app
        self.routes = list(routes)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("method") != "GET" or scope.get("path") != SCHEMA_PATH:
            await self.app(scope, receive, send)
            return
        captured = _Captured()

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                captured.start = message
            elif message["type"] == "http.response.body":
                captured.body += message.get("body", b"")

        await self.app(scope, receive, capture)
        start = captured.start
        assert start is not None, "the app sent no response"
        body = captured.body
        if start["status"] == 200:
            schema = json.loads(body)
            listed = {r.get("name") for r in schema.get("routes", [])}
            schema["routes"] = schema.get("routes", []) + [r for r in self.routes if r["name"] not in listed]
            body = json.dumps(schema).encode()
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            start = {**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        await send(start)
        await send({"type": "http.response.body", "body": body})
