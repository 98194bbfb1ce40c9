"""Open Inference Protocol v2 over REST (the KServe/Triton HTTP API), as a FastAPI router on the gateway app.

    GET  /v2                                         server metadata
    GET  /v2/health/live | /v2/health/ready          200 = true, 400 = false (as the protocol says: 4xx is false)
    GET  /v2/models/{name}[/versions/{v}]            model metadata
    GET  /v2/models/{name}[/versions/{v}]/ready      model readiness
    GET  /v2/models/{name}[/versions/{v}]/config     Triton model configuration (model_config.proto as JSON)
    GET  /v2/models[/{name}[/versions/{v}]]/stats    Triton inference statistics (every model, one model, one version)
    POST /v2/models/{name}[/versions/{v}]/infer      inference (JSON, or JSON + binary tensor data)
    POST /v2/repository/index                        the models (name, version, state, reason); body {"ready": true}
                                                     (optional) lists only the ready ones

Request bodies are JSON (`data` flat row-major or nested) or, with the binary tensor data extension, a JSON header of
Inference-Header-Content-Length bytes followed by the raw tensors (inputs with parameters.binary_data_size; outputs
in binary when asked by `binary_data` per output or `binary_data_output` for all, which is what tritonclient.http
does by default). Content-Type may be absent (tritonclient sends none), application/json or
application/octet-stream; Content-Encoding gzip/deflate is accepted (decompressed size capped like the body).

Errors follow the protocol, `{"error": "<code>: <message>"}` (tritonclient reads `error` as a string), plus the
project's machine-readable `code`, `details` and `request_id` beside it; statuses are the REST ones (400, 401, 404,
413, 415, 422, 429, 503, 504).
"""
from __future__ import annotations

import functools
import json
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import bentoml
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from triserve.kernel.errors import ApiError
from triserve.kernel.protection import inflight
from triserve.services.gateway_deps import inference_guard, ready_context
from triserve.services.http_errors import request_id_of
from triserve.services.protocols import oip, oip_codec
from triserve.services.protocols.calls import describe_error

router = APIRouter(prefix="/v2", tags=["open inference protocol v2"])
ACCEPTED_TYPES = {"", "application/json", "application/octet-stream"}


def _gateway():
    return bentoml.get_current_service()


def _ctx():
    """The serving context, or 503 not_ready (in the protocol's error format) while models load."""
    return ready_context(_gateway())


def oip_error(request: Request, exc: BaseException) -> JSONResponse:
    info = describe_error(exc, request.url.path)
    rid = request_id_of(request)
    body = {"error": f"{info.code}: {info.message}", "code": info.code, "details": info.details, "request_id": rid}
    return JSONResponse(body, status_code=info.status, headers={"X-Request-ID": rid, **info.headers})


def _answers_errors(endpoint: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """An endpoint whose every failure is answered in the protocol's error format (oip_error), not FastAPI's."""
    @functools.wraps(endpoint)  # FastAPI reads the endpoint's own signature through __wrapped__
    async def answer(request: Request, **kwargs: Any) -> Any:
        try:
            return await endpoint(request, **kwargs)
        except Exception as exc:  # noqa: BLE001 - every failure is written in the protocol's error format
            return oip_error(request, exc)

    return answer


# ---- health and metadata ------------------------------------------------------------------------------------------
@router.get("", summary="OIP v2 server metadata", operation_id="serverMetadata")
async def server_metadata() -> dict:
    return oip.server_metadata()


@router.get("/health/live", summary="OIP v2 liveness (200 = live)")
async def server_live() -> dict:
    return {"live": True}


@router.get("/health/ready", summary="OIP v2 readiness (200 = ready, 400 = not ready)")
async def server_ready() -> JSONResponse:
    ready = await oip.server_ready(_gateway())
    return JSONResponse({"ready": ready}, status_code=200 if ready else 400)


@router.get("/models/stats", summary="Triton inference statistics of every model", operation_id="allModelStatistics")
@router.get("/models/{name}/stats", summary="Triton inference statistics of one model", operation_id="modelStatistics")
@router.get("/models/{name}/versions/{version}/stats", summary="Triton inference statistics of one model version",
            operation_id="modelVersionStatistics")
@_answers_errors
async def model_statistics(request: Request, name: str = "", version: str = ""):
    # declared before /models/{name}: "stats" would otherwise be read as a model name
    return {"model_stats": await oip.statistics(_ctx(), name, version)}


@router.get("/models/{name}", summary="OIP v2 model metadata", operation_id="modelMetadata")
@router.get("/models/{name}/versions/{version}", summary="OIP v2 model metadata of one version",
            operation_id="modelVersionMetadata")
@_answers_errors
async def model_metadata(request: Request, name: str, version: str = ""):
    return oip.model_metadata(await oip.resolve(_ctx(), name, version))


@router.get("/models/{name}/ready", summary="OIP v2 model readiness (200 = ready, 400 = not ready)",
            operation_id="modelReady")
@router.get("/models/{name}/versions/{version}/ready", summary="OIP v2 model readiness of one version",
            operation_id="modelVersionReady")
@_answers_errors
async def model_ready(request: Request, name: str, version: str = ""):
    entry = await oip.resolve(_ctx(), name, version)
    ready = await oip.model_ready(_gateway(), entry)
    return JSONResponse({"name": entry.name, "ready": ready}, status_code=200 if ready else 400)


@router.get("/models/{name}/config", summary="Triton model configuration", operation_id="modelConfig")
@router.get("/models/{name}/versions/{version}/config", summary="Triton model configuration of one version",
            operation_id="modelVersionConfig")
@_answers_errors
async def model_config(request: Request, name: str, version: str = ""):
    ctx = _ctx()
    return oip.model_config(ctx, await oip.resolve(ctx, name, version))


def _index_body(body: bytes) -> bool:
    """The optional Triton request body {"ready": bool} (tritonclient sends none) -> ready only."""
    if not body.strip():
        return False
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "malformed_json", "request body is not valid JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("ready", False), bool):
        raise ApiError(400, "invalid_request", "the body must be a JSON object with an optional boolean 'ready'")
    return doc.get("ready", False)


@router.post("/repository/index", summary="Models served over OIP v2 and their state (Triton repository index)")
async def repository_index(request: Request):
    body = await request.body()
    try:
        index = await oip.repository_index(_ctx(), _gateway(), ready_only=_index_body(body))
        # Triton writes `reason` only for a model that is not ready
        return [{k: v for k, v in i.items() if k != "reason" or v} for i in index]
    except Exception as exc:  # noqa: BLE001 - every failure is written in the protocol's error format
        return oip_error(request, exc)


# ---- inference ----------------------------------------------------------------------------------------------------
def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise ApiError(415, "unsupported_content_encoding", f"Content-Encoding {encoding!r} is not supported",
                       {"supported": ["gzip", "deflate", "identity"]})
    d = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ApiError(400, "invalid_content_encoding", f"body is not valid {encoding}") from exc
    if len(out) > limit or d.unconsumed_tail:
        raise ApiError(413, "payload_too_large", f"decompressed body exceeds {limit} bytes", {"limit_bytes": limit})
    return out


def _field(doc: dict, key: str, kind: type, where: str, required: bool = True) -> Any:
    value = doc.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, kind):
        raise ApiError(400, "invalid_request", f"{where}: '{key}' is missing or has the wrong type",
                       {"field": f"{where}.{key}"})
    return value


def parse_infer_request(name: str, version: str, body: bytes, header_length: str | None) -> oip_codec.InferRequest:
    """JSON (optionally followed by binary tensor data) -> the core request."""
    binary = b""
    if header_length is not None:
        try:
            n = int(header_length)
        except ValueError:
            n = -1
        if n < 0 or n > len(body):
            raise ApiError(400, "invalid_request", "Inference-Header-Content-Length does not fit the body",
                           {"header_length": header_length, "body_bytes": len(body)})
        body, binary = body[:n], body[n:]
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "malformed_json", "request body is not valid JSON", {"reason": str(exc)[:200]}) from None
    if not isinstance(doc, dict):
        raise ApiError(400, "invalid_request", "the request must be a JSON object")
    inputs_doc = _field(doc, "inputs", list, "request")
    offset = 0
    inputs = []
    for i, inp in enumerate(inputs_doc):
        where = f"inputs[{i}]"
        if not isinstance(inp, dict):
            raise ApiError(400, "invalid_request", f"{where} must be an object")
        tname = _field(inp, "name", str, where)
        datatype = _field(inp, "datatype", str, where)
        shape = _field(inp, "shape", list, where)
        params = _field(inp, "parameters", dict, where, required=False) or {}
        size = params.get("binary_data_size")
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, int) or size < 0 or offset + size > len(binary):
                raise ApiError(400, "invalid_request", f"{where}: binary_data_size does not fit the binary data",
                               {"binary_data_size": size, "binary_bytes": len(binary) - offset})
            data = oip_codec.array_from_raw(tname, datatype, shape, binary[offset: offset + size])
            offset += size
        else:
            if "data" not in inp:
                raise ApiError(400, "invalid_request", f"{where}: 'data' (or parameters.binary_data_size) is missing")
            data = oip_codec.array_from_values(tname, datatype, shape, inp["data"])
        inputs.append(oip_codec.Tensor(tname, datatype, [int(d) for d in shape], data, params))
    if offset != len(binary):
        raise ApiError(400, "invalid_request", f"{len(binary) - offset} bytes of binary data belong to no input")
    outputs = None
    outputs_doc = _field(doc, "outputs", list, "request", required=False)
    if outputs_doc is not None:
        outputs = []
        for i, out in enumerate(outputs_doc):
            if not isinstance(out, dict):
                raise ApiError(400, "invalid_request", f"outputs[{i}] must be an object")
            outputs.append(oip_codec.RequestedOutput(_field(out, "name", str, f"outputs[{i}]"),
                                               _field(out, "parameters", dict, f"outputs[{i}]", False) or {}))
    rid = doc.get("id")
    return oip_codec.InferRequest(model_name=name, model_version=version, id=None if rid is None else str(rid),
                            inputs=inputs, outputs=outputs,
                            parameters=_field(doc, "parameters", dict, "request", required=False) or {})


def infer_response(req: oip_codec.InferRequest, resp: oip_codec.InferResponse) -> Response:
    binary_default = bool(req.parameters.get("binary_data_output", False))
    asked = {o.name: o.parameters for o in req.outputs or ()}
    outputs, blobs = [], []
    for t in resp.outputs:
        entry: dict[str, Any] = {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
        if bool(asked.get(t.name, {}).get("binary_data", binary_default)):
            raw = oip_codec.raw_of(t)
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            entry["data"] = oip_codec.json_data_of(t)
        outputs.append(entry)
    doc: dict[str, Any] = {"model_name": resp.model_name, "model_version": resp.model_version,
                           "parameters": resp.parameters, "outputs": outputs}
    if resp.id is not None:
        doc["id"] = resp.id
    header = json.dumps(doc).encode()
    if not blobs:
        return Response(header, media_type="application/json")
    return Response(header + b"".join(blobs), media_type="application/octet-stream",
                    headers={"Inference-Header-Content-Length": str(len(header))})


# The body is read raw (JSON, or binary tensor data after a JSON header), so FastAPI cannot describe it: declared here,
# with the key it needs when access.require_key_for_inference is on (services/openapi.py reads x-triserve-access)
INFER_DOC = {
    "x-triserve-access": "inference",
    "requestBody": {"required": True, "content": {
        "application/json": {
            "schema": {"type": "object", "required": ["inputs"], "properties": {
                "id": {"type": "string"}, "parameters": {"type": "object"},
                "inputs": {"type": "array", "items": {"type": "object"}},
                "outputs": {"type": "array", "items": {"type": "object"}}}},
            "example": {"id": "1", "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1],
                                               "data": ["what is my balance"]}]}},
        "application/octet-stream": {
            "schema": {"type": "string", "format": "binary"},
            "example": "<JSON header of Inference-Header-Content-Length bytes, then the raw tensor data>"}}},
}


@router.post("/models/{name}/infer", summary="OIP v2 inference", operation_id="modelInfer", openapi_extra=INFER_DOC)
@router.post("/models/{name}/versions/{version}/infer", summary="OIP v2 inference with one version",
             operation_id="modelVersionInfer", openapi_extra=INFER_DOC)
async def infer(request: Request, name: str, version: str = ""):
    body = await request.body()  # outside the try: the body-cap middleware's 413 must propagate to it
    try:
        ctx = _ctx()
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype not in ACCEPTED_TYPES:
            raise ApiError(415, "unsupported_media_type", "this endpoint consumes application/json or "
                           "application/octet-stream (binary tensor data)",
                           {"received": ctype, "accepted": sorted(t for t in ACCEPTED_TYPES if t)})
        body = _decompress(body, request.headers.get("content-encoding", "").strip().lower(),
                           ctx.settings.gateway.max_body_bytes)
        entry = await oip.resolve(ctx, name, version)
        call = await inference_guard(entry.family)(request, ctx)
        req = parse_infer_request(name, version, body, request.headers.get("inference-header-content-length"))
        inflight.admit(entry.family, ctx.settings.admission.max_inflight_requests)  # the cap REST's routes have
        try:
            resp = await oip.infer(ctx, entry, req, call)
        finally:
            inflight.leave(entry.family)
        return infer_response(req, resp)
    except Exception as exc:  # noqa: BLE001 - every failure is written in the protocol's error format
        return oip_error(request, exc)


@router.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE"], include_in_schema=False)
async def not_found(request: Request, path: str):
    return oip_error(request, ApiError(404, "not_found", f"no OIP v2 endpoint {request.method} /v2/{path}"))
