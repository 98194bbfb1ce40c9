"""Transport-neutral glue shared by the gRPC and OIP endpoints: the detection entry point for encoded bytes and the
classification of any exception into the project's error model (status, code, message, details).

Why: REST, typed gRPC and OIP v2 must refuse the same inputs with the same codes; each transport only decides how an
error is written (HTTP status + JSON, or gRPC status + trailing metadata).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from services.common.errors import ApiError, _jsonable_errors
from services.common.request_context import StageClock
from services.detection.decode import decode_image
from services.detection.schemas import DetectOptions, DetectResponse

log = logging.getLogger("triserve.protocols")


def ready_gateway(gateway):
    """The gateway, or 503 while its model metadata is not loaded (gateway_deps.current_gateway, minus the lookup)."""
    if gateway is None or not getattr(gateway, "loaded", False):
        reason = getattr(gateway, "load_error", None) or "models are loading"
        raise ApiError(503, "not_ready", "service is not ready", {"reason": reason}, headers={"Retry-After": "2"})
    return gateway


async def detect_encoded(gateway, raws: list[bytes], opts: DetectOptions, call) -> DetectResponse:
    """Encoded images -> the detection pipeline, exactly as /v1/detect/upload does it (count cap, safe decoding with
    size and pixel caps from the header, then the shared pipeline with its fallbacks)."""
    clock = StageClock()
    pipeline = gateway.pipeline("detection")
    if not raws:
        raise ApiError(422, "validation_error", "request does not match the schema",
                       [{"loc": ["images"], "msg": "at least one image is required", "type": "too_short"}])
    pipeline.check_count(len(raws))
    lim = pipeline.limits
    images = [decode_image(bytes(raw), i, lim.max_image_bytes, lim.max_pixels) for i, raw in enumerate(raws)]
    return await pipeline.detect(gateway, images, opts, clock, call)


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
        return ErrorInfo(422, "validation_error", "request does not match the schema", _jsonable_errors(exc.errors()))
    log.error("unhandled error in %s", where or "protocol handler", exc_info=exc)
    return ErrorInfo(500, "internal_error", "internal error; the request id is in the logs")
