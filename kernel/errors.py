"""One error model for every endpoint: {"error": {"code", "message", "details", "request_id"}}.

Why: clients and alerting key on a stable machine-readable code, never on message text; and no input, however
malformed, may surface as a 500. Validation failures are 422 with the offending field paths in `details`.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("triserve.errors")


class ErrorBody(BaseModel):
    code: str = Field(description="Stable machine-readable code, e.g. 'validation_error', 'invalid_image'.")
    message: str = Field(description="Human-readable explanation.")
    details: Any = Field(None, description="Structured context: offending fields, limits, sizes.")
    request_id: str = Field(description="Echo of X-Request-ID (or the generated one).")


class ErrorResponse(BaseModel):
    error: ErrorBody


class ApiError(Exception):
    """Raise anywhere in a request to answer with this status and code."""

    def __init__(self, status: int, code: str, message: str, details: Any = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details
        self.headers = headers or {}


class InvalidOutput(ValueError):
    """A model output failed its sanity check (NaN/inf, out of range): it must never reach a client."""


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


def _jsonable_errors(errors: Iterable[Mapping[str, Any]]) -> list[dict]:
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
                                  _jsonable_errors(errors))
        return error_response(request, 422, "validation_error", "request does not match the schema",
                              _jsonable_errors(errors))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(request, exc.status_code, _HTTP_CODES.get(exc.status_code, "http_error"),
                              str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return error_response(request, 500, "internal_error", "internal error; the request id is in the logs")
