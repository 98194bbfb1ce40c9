"""The error model as HTTP responses: FastAPI's exception handlers for ApiError, validation errors, Starlette's HTTP
errors and anything unexpected, all answering {"error": {"code", "message", "details", "request_id"}}."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from triserve.kernel.errors import ApiError, ErrorBody, ErrorResponse

log = logging.getLogger("triserve.errors")


def request_id_of(request: Request) -> str:
    return getattr(request.state, "request_id", None) or request.headers.get("x-request-id") or "unknown"


def error_response(request: Request, status: int, code: str, message: str, details: Any = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    rid = request_id_of(request)
    request.state.error_code = code
    body = ErrorResponse(error=ErrorBody(code=code, message=message, details=details, request_id=rid))
    return JSONResponse(body.model_dump(mode="json"), status_code=status,
                        headers={"X-Request-ID": rid, **(headers or {})})


_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 413: "payload_too_large", 415: "unsupported_media_type",
               422: "validation_error", 429: "rate_limited", 503: "unavailable", 504: "deadline_exceeded"}


def jsonable_errors(errors: Iterable[Mapping[str, Any]]) -> list[dict]:
    out = []
    for e in errors:
        out.append({"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")),
                    "type": str(e.get("type", ""))})
    return out[:50]


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(request, exc.status, exc.code, exc.message, exc.details, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        is_json_decode = any(e.get("type") == "json_invalid" for e in errors)
        if is_json_decode:
            return error_response(request, 400, "malformed_json", "request body is not valid JSON",
                                  jsonable_errors(errors))
        return error_response(request, 422, "validation_error", "request does not match the schema",
                              jsonable_errors(errors))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(request, exc.status_code, _HTTP_CODES.get(exc.status_code, "http_error"),
                              str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return error_response(request, 500, "internal_error", "internal error; the request id is in the logs")
