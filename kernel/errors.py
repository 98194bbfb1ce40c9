"""One error model for every endpoint: {"error": {"code", "message", "details", "request_id"}}.

Why: clients and alerting key on a stable machine-readable code, never on message text; and no input, however
malformed, may surface as a 500. Validation failures are 422 with the offending field paths in `details`. This is
the model and the exception every layer raises; services/http_errors.py writes them as HTTP responses, the gRPC
servicers as status codes.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


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
