"""The gateway's OpenAPI document, written for client generators: operationIds named by operation (classify,
detectUpload, forecastPanel: the family routes' own names, kernel/family.RestRoute -> rest.operation_name), the API
key as security schemes (X-API-Key or Authorization: Bearer, what kernel/protection/access.py accepts) on the admin
operations and, when access.require_key_for_inference is on, on the inference ones, a request example on every
operation that takes a body, and BentoML's own /livez, /readyz and /metrics (served outside the FastAPI app).

Why: FastAPI's defaults (classify_v1_classify_post, no security, examples only inside some schemas) generate clients
with unusable method names and no way to send the key.
"""
from __future__ import annotations

import copy
import importlib.metadata
from typing import Any

import fastapi.routing
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

SCHEMES = {
    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key",
               "description": "An API key from access.api_keys (admin operations need an admin one)."},
    "bearer": {"type": "http", "scheme": "bearer",
               "description": "The same API key as 'Authorization: Bearer <key>'."},
}
KEY: list[dict[str, list[str]]] = [{"apiKey": []}, {"bearer": []}]  # either scheme
ACCESS = "x-triserve-access"  # openapi_extra of a route whose guard is called in its body (OIP infer): its access


def distribution_version() -> str:
    """The installed triserve distribution's version (the document's info.version)."""
    try:
        return importlib.metadata.version("triserve")
    except importlib.metadata.PackageNotFoundError:  # a checkout never installed
        return "0+unknown"


def camel(name: str) -> str:
    """detect_upload -> detectUpload."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def operation_id(route: APIRoute) -> str:
    """FastAPI's generate_unique_id_function: the endpoint's name in camelCase (family routes are named after their
    operation: services/protocols/rest.family_router); a route that shares its endpoint sets operation_id itself."""
    return route.operation_id or camel(route.name)


def _access(route: APIRoute) -> str | None:
    """'admin' or 'inference' when one of the route's dependencies is a guard marked so (gateway_deps), else what its
    openapi_extra declares."""
    todo = [route.dependant]
    while todo:
        dependant = todo.pop()
        marked = getattr(dependant.call, "access", None)
        if marked:
            return marked
        todo.extend(dependant.dependencies)
    return (route.openapi_extra or {}).get(ACCESS)


def _example(spec: dict, media_type: str, content: dict) -> Any:
    """The first example of a request body's schema (its own, or the component it refers to); for a form without one,
    its fields' examples or defaults, and each file field as a placeholder."""
    schema = content.get("schema", {})
    if "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    examples = schema.get("examples")
    if examples or "example" in schema or media_type != "multipart/form-data":
        return examples[0] if examples else schema.get("example")
    form = {}
    for name, prop in schema.get("properties", {}).items():
        items = prop.get("items", {})
        if "binary" in (prop.get("format"), items.get("format"), prop.get("contentMediaType"),
                        items.get("contentMediaType")) or "application/octet-stream" in (
                prop.get("contentMediaType"), items.get("contentMediaType")):
            form[name] = ["<image file>"] if prop.get("type") == "array" else "<image file>"
        elif prop.get("examples"):
            form[name] = prop["examples"][0]
        elif "default" in prop:
            form[name] = prop["default"]
    return form


def _text(description: str, example: str) -> dict:
    return {"description": description, "content": {"text/plain": {"schema": {"type": "string"}, "example": example}}}


SERVER_PATHS = {  # BentoML's own routes (bentoml._internal.server.base_app), answered before the FastAPI app
    "/livez": {"get": {"operationId": "livez", "tags": ["operations"], "summary": "Liveness: the process serves HTTP",
                       "responses": {"200": _text("Live.", "\n")}}},
    "/readyz": {"get": {"operationId": "readyz", "tags": ["operations"],
                        "summary": "Readiness: model metadata loaded and the runner tier ready (every model loaded "
                                   "and warm)",
                        "responses": {"200": _text("Ready: send traffic.", "\n"),
                                      "503": _text("Not ready (loading, or the runner tier is away).", "")}}},
    "/metrics": {"get": {"operationId": "metrics", "tags": ["operations"],
                         "summary": "Prometheus metrics of every process of the server (text exposition format)",
                         "responses": {"200": {"description": "Metrics.", "content": {"text/plain": {
                             "schema": {"type": "string"},
                             "example": "# TYPE triserve_requests_total counter\ntriserve_requests_total"
                                        '{deployment="text",family="text",status="200"} 1.0\n'}}}}}},
}


def component_name(name: str) -> str:
    """A readable, unique component name for FastAPI's made-up ones: two families' ImageResult become
    triserve__families__detection__schemas__ImageResult (a generator's duplicate class) -> DetectionImageResult; a
    multipart body Body_detectUpload -> DetectUploadForm."""
    if "__" in name:
        parts = name.removeprefix("triserve__").split("__")
        owner = parts[1] if parts[0] == "families" and len(parts) > 2 else parts[-2]
        return owner[:1].upper() + owner[1:] + parts[-1]
    if name.startswith("Body_"):
        operation = name.removeprefix("Body_")
        return operation[:1].upper() + operation[1:] + "Form"
    return name


def _renamed(node: Any, refs: dict[str, str]) -> Any:
    if isinstance(node, dict):
        return {k: refs.get(v, v) if k == "$ref" and isinstance(v, str) else _renamed(v, refs) for k, v in node.items()}
    if isinstance(node, list):
        return [_renamed(v, refs) for v in node]
    return node


def _readable_components(spec: dict) -> dict:
    schemas = spec.get("components", {}).get("schemas", {})
    names = {name: component_name(name) for name in schemas}
    assert len(set(names.values())) == len(names), f"component names collide: {names}"
    refs = {f"#/components/schemas/{old}": f"#/components/schemas/{new}" for old, new in names.items() if old != new}
    spec = _renamed(spec, refs)
    spec["components"]["schemas"] = {names[k]: {**v, "title": names[k]} if names[k] != k else v
                                     for k, v in spec["components"]["schemas"].items()}  # generators name by title
    return spec


def openapi_document(app: FastAPI, require_key_for_inference: bool) -> dict:
    """The document FastAPI builds, then: operations secured by the API key, an example on every request body, the
    x-triserve-access markers removed, BentoML's health and metrics paths added, component names made readable."""
    spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes,
                       tags=app.openapi_tags, servers=app.servers)
    spec.setdefault("components", {})["securitySchemes"] = copy.deepcopy(SCHEMES)
    contexts = fastapi.routing.iter_route_contexts(app.routes) if hasattr(fastapi.routing, "iter_route_contexts") \
        else app.routes
    for ctx in contexts:
        route = getattr(ctx, "original_route", ctx)
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        access = _access(route)
        for method in route.methods or ():
            op = spec["paths"][getattr(ctx, "path", route.path)][method.lower()]
            op.pop(ACCESS, None)
            if access == "admin" or (access == "inference" and require_key_for_inference):
                op["security"] = copy.deepcopy(KEY)
            for media_type, content in op.get("requestBody", {}).get("content", {}).items():
                if "example" not in content and (example := _example(spec, media_type, content)) is not None:
                    content["example"] = example
    spec["paths"].update(copy.deepcopy(SERVER_PATHS))
    return _readable_components(spec)


def install(app: FastAPI, require_key_for_inference: bool) -> None:
    """Serve openapi_document at the app's /openapi.json (built once, on first request, as FastAPI does)."""

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = openapi_document(app, require_key_for_inference)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
