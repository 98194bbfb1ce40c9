"""The client's errors: one typed exception for every error answer of the service, one for transport failures.

The service answers every error as `{"error": {"code", "message", "details", "request_id"}}` (ErrorBody in
models.py, the client's copy of the service's error model); TriserveAPIError carries those fields, the HTTP status
and, for 429/503, the Retry-After the service asked for. The Open Inference Protocol endpoints (/v2) write the same
fields in the protocol's shape, `{"error": "<code>: <message>", "code", "details", "request_id"}`; they are read into
the same TriserveAPIError, and so are the typed gRPC API's errors (triserve_client.grpc).
"""
from __future__ import annotations

import email.utils
import json
import time
from typing import Any

import httpx
from pydantic import ValidationError

from triserve_client.models import ErrorBody, ErrorResponse

__all__ = ["TriserveError", "TriserveAPIError", "TriserveTransportError", "TriserveTimeoutError", "ErrorBody"]


class TriserveError(Exception):
    """Base class of everything the client raises (besides TypeError/ValueError for bad arguments)."""

    request_id: str | None = None
    attempts: int = 1  # tries made for the call (1 + retries) when this error ended it


class TriserveAPIError(TriserveError):
    """The service answered with an error status.

    `code` is the service's stable machine-readable code ('validation_error', 'text_too_long', 'rate_limited',
    'overloaded', 'deadline_exceeded', ...); for an answer without the error model (a proxy's 502, BentoML's own
    /readyz 503) it is 'http_<status>'. `retry_after`: seconds from the Retry-After header, else None.
    """

    def __init__(self, status: int, code: str, message: str, details: Any = None, request_id: str | None = None,
                 retry_after: float | None = None, response: httpx.Response | None = None):
        super().__init__(f"{status} {code}: {message}" + (f" (request_id {request_id})" if request_id else ""))
        self.status, self.code, self.message, self.details = status, code, message, details
        self.request_id, self.retry_after, self.response = request_id, retry_after, response

    @property
    def error(self) -> ErrorBody:
        """The error model as the service defines it."""
        return ErrorBody(code=self.code, message=self.message, details=self.details, request_id=self.request_id or "")

    @classmethod
    def from_response(cls, response: httpx.Response, request_id: str | None = None) -> TriserveAPIError:
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        rid = response.headers.get("x-request-id") or request_id
        try:
            body = ErrorResponse.model_validate_json(response.content).error
        except (ValidationError, ValueError):
            oip = _oip_error(response)
            if oip is not None:
                code, message, details, body_rid = oip
                return cls(response.status_code, code, message, details, body_rid or rid, retry_after, response)
            text = response.text.strip()[:300] if response.content else ""
            return cls(response.status_code, f"http_{response.status_code}", text or response.reason_phrase or "error",
                       None, rid, retry_after, response)
        return cls(response.status_code, body.code, body.message, body.details, body.request_id or rid, retry_after,
                   response)


def _oip_error(response: httpx.Response) -> tuple[str, str, Any, str | None] | None:
    """(code, message, details, request_id) of an Open Inference Protocol error answer, else None."""
    try:
        doc = json.loads(response.content)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("error"), str):
        return None
    error: str = doc["error"]
    code = doc.get("code")
    if not isinstance(code, str) or not code:
        code = f"http_{response.status_code}"
    message = error[len(code) + 2:] if error.startswith(f"{code}: ") else error
    rid = doc.get("request_id")
    return code, message, doc.get("details"), rid if isinstance(rid, str) and rid else None


class TriserveTransportError(TriserveError):
    """No answer: connection refused or reset, protocol error, or a transport timeout (the cause is chained)."""

    def __init__(self, message: str, request_id: str | None = None):
        super().__init__(message + (f" (request_id {request_id})" if request_id else ""))
        self.request_id = request_id


class TriserveTimeoutError(TriserveTransportError):
    """The call's deadline passed on the client side (or a transport timeout fired) before an answer arrived."""


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date (RFC 9110 10.2.3); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
