"""Transport-neutral glue shared by the gRPC and OIP endpoints: the classification of any exception into the project's
error model (status, code, message, details).

Why: REST, typed gRPC and OIP v2 must refuse the same inputs with the same codes; each transport only decides how an
error is written (HTTP status + JSON, or gRPC status + trailing metadata).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from triserve.kernel.errors import ApiError
from triserve.services.http_errors import jsonable_errors

log = logging.getLogger("triserve.protocols")


@dataclass
class ErrorInfo:
    status: int  # HTTP status of the equivalent REST error
    code: str
    message: str
    details: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def describe_error(exc: BaseException, where: str = "") -> ErrorInfo:
    """Any exception -> the error model. Unexpected exceptions are logged and never leak their text."""
    if isinstance(exc, ApiError):
        return ErrorInfo(exc.status, exc.code, exc.message, exc.details, dict(exc.headers))
    if isinstance(exc, ValidationError):
        return ErrorInfo(422, "validation_error", "request does not match the schema", jsonable_errors(exc.errors()))
    log.error("unhandled error in %s", where or "protocol handler", exc_info=exc)
    return ErrorInfo(500, "internal_error", "internal error; the request id is in the logs")
