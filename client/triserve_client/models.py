"""Typed results, the client's own: nothing here imports the server, so `pip install ./client` is all a caller needs.

They mirror the service's response models (families/*/schemas.py, the envelope of services/common/schemas.py, Timings
of services/common/request_context.py, the error model of services/common/errors.py) and are kept in step with them by
tests/client/test_schemas.py, which compares them with the server's models and its live /openapi.json.

Tolerant where a client should be, so that a newer server does not break an older client: every model keeps fields
it does not know (extra="allow", readable via `.model_extra`); enumerations (forecast frequency, interval calibration)
are plain strings; the forecast method report (method, method_weights, backtest_*, interval_calibration: newer than
the rest) is optional, so a server from before it still parses; no length or range checks on answers.
GET /v1/models answers a plain dict in the service (services/gateway.py list_models); ModelsListing types the fields
it documents.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ClassifyResponse", "TextResult", "LabelScore", "DetectResponse", "ImageResult", "Detection",
           "ForecastResponse", "ForecastPoint", "InputReport", "ServedBy", "ModelInfo", "Timings", "ErrorBody",
           "ErrorResponse", "SlotStatus", "DeploymentStatus", "ModelsListing"]


class Answer(BaseModel):
    """Base of everything read from the service: unknown fields are kept, never refused."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())


# -- the envelope of every successful answer ---------------------------------------------------------------------------
class ModelInfo(Answer):
    name: str = Field(description="Registry model name that produced the result.")
    version: str = Field(description="Immutable registry version.")


class Timings(Answer):
    """Milliseconds spent per stage of the request inside the service."""

    preprocess_ms: float = 0.0
    queue_ms: float = 0.0
    infer_ms: float = 0.0
    postprocess_ms: float = 0.0
    total_ms: float = 0.0


class ServedBy(Answer):
    request_id: str = Field(description="The call's X-Request-ID (given or generated), echoed by the service.")
    deployment: str = Field(description="The deployment that answered.")
    model: ModelInfo
    degraded: bool = Field(description="True when a fallback model answered instead of the primary.")
    degraded_reason: str | None = Field(None, description="Why: 'requested', 'primary_failed', ...")
    timings: Timings = Field(default_factory=Timings)


# -- POST /v1/classify -------------------------------------------------------------------------------------------------
class LabelScore(Answer):
    label: str
    score: float = Field(description="Softmax probability.")


class TextResult(Answer):
    label: str = Field(description="Top-1 label.")
    score: float
    top_k: list[LabelScore]
    tokens: int = Field(description="Tokens used (after truncation to the model's max length).")
    truncated: bool = Field(description="True when the text was cut before classification.")
    chars: int = Field(description="Characters of the text as received.")


class ClassifyResponse(ServedBy):
    results: list[TextResult]


# -- POST /v1/detect, /v1/detect/upload --------------------------------------------------------------------------------
class Detection(Answer):
    box: list[float] = Field(description="x1, y1, x2, y2 in original image pixels.")
    score: float
    class_id: int
    label: str


class ImageResult(Answer):
    width: int
    height: int
    detections: list[Detection]
    candidates: int = Field(description="Anchors above the threshold before the pre-NMS cap.")


class DetectResponse(ServedBy):
    results: list[ImageResult]


# -- POST /v1/forecast -------------------------------------------------------------------------------------------------
class ForecastPoint(Answer):
    timestamp: datetime = Field(description="Start of the forecast step's bucket, UTC.")
    point: float = Field(description="The point forecast: the median (0.5 quantile).")
    lower_50: float | None = None
    upper_50: float | None = None
    lower_90: float | None = None
    upper_90: float | None = None
    quantiles: dict[str, float] = Field(description="Every quantile the model outputs, keyed by level ('0.1').")


class InputReport(Answer):
    """How the service read the series, and what forecast it (README "Forecasting")."""

    frequency: str = Field(description="The frequency forecast at ('MS', 'D', 'h', ...).")
    frequency_inferred: bool
    sorted: bool
    duplicates_merged: int
    imputed: int
    points: int
    used: int
    padded: int
    method: str | None = Field(None, description="The methods combined, by weight, joined with '+'.")
    method_weights: dict[str, float] | None = None
    backtest_mase: float | None = None
    backtest_origins: int | None = None
    interval_calibration: str | None = Field(None, description="'conformal' or 'model'.")


class ForecastResponse(ServedBy):
    forecast: list[ForecastPoint]
    input: InputReport


# -- errors ------------------------------------------------------------------------------------------------------------
class ErrorBody(Answer):
    """The service's error model: every error answer is {"error": ErrorBody}."""

    code: str = Field(description="Stable machine-readable code, e.g. 'validation_error', 'invalid_image'.")
    message: str
    details: Any = None
    request_id: str = ""


class ErrorResponse(Answer):
    error: ErrorBody


# -- GET /v1/models ----------------------------------------------------------------------------------------------------
class SlotStatus(Answer):
    """The primary (`model`) or `fallback` of a deployment as /v1/models reports it."""

    slot: str
    name: str | None = Field(None, description="Registry model name loaded in the slot (None while not loaded).")
    version: str | None = None
    provider: str | None = None
    sha256: str | None = None
    loaded_versions: list[str] = Field(default_factory=list)
    canary: Any = None
    shadow: Any = None
    error: str | None = None


class DeploymentStatus(Answer):
    name: str
    family: str
    default: bool
    description: str | None = None
    ready: bool
    model: SlotStatus | None = None
    fallback: SlotStatus | None = None
    error: str | None = None


class ModelsListing(Answer):
    """GET /v1/models: every deployment, readiness, load errors by slot and the loaded models by slot."""

    deployments: list[DeploymentStatus]
    ready: bool | None = None
    errors: dict[str, str] = Field(default_factory=dict)
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)
    request_id: str | None = Field(None, description="From the X-Request-ID response header.")

    def deployment(self, name: str) -> DeploymentStatus:
        """The deployment called `name` (KeyError if the service has none)."""
        for d in self.deployments:
            if d.name == name:
                return d
        raise KeyError(f"no deployment {name!r}; known: {[d.name for d in self.deployments]}")
