"""Typed results. Inference answers are the service's own response models (imported, never copied):
ClassifyResponse (families/text/schemas.py), DetectResponse (families/detection/schemas.py), ForecastResponse
(families/forecast/schemas.py), all with the shared envelope of services/common/schemas.py (request_id, deployment,
model, degraded, degraded_reason, timings). GET /v1/models answers a plain dict in the service (services/gateway.py
list_models); ModelsListing types the fields it documents and keeps any others (extra="allow").
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from families.detection.schemas import Detection, DetectResponse, ImageResult
from families.forecast.schemas import ForecastPoint, ForecastResponse, InputReport
from families.text.schemas import ClassifyResponse, LabelScore, TextResult
from services.common.request_context import Timings
from services.common.schemas import ModelInfo, ServedBy

__all__ = ["ClassifyResponse", "TextResult", "LabelScore", "DetectResponse", "ImageResult", "Detection",
           "ForecastResponse", "ForecastPoint", "InputReport", "ServedBy", "ModelInfo", "Timings", "SlotStatus",
           "DeploymentStatus", "ModelsListing"]


class SlotStatus(BaseModel):
    """The primary (`model`) or `fallback` of a deployment as /v1/models reports it."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())
    slot: str
    name: str | None = Field(None, description="Registry model name loaded in the slot (None while not loaded).")
    version: str | None = None
    provider: str | None = None
    sha256: str | None = None
    loaded_versions: list[str] = Field(default_factory=list)
    canary: Any = None
    shadow: Any = None
    error: str | None = None


class DeploymentStatus(BaseModel):
    model_config = ConfigDict(extra="allow", protected_namespaces=())
    name: str
    family: str
    default: bool
    description: str | None = None
    ready: bool
    model: SlotStatus | None = None
    fallback: SlotStatus | None = None
    error: str | None = None


class ModelsListing(BaseModel):
    """GET /v1/models: every deployment, readiness, load errors by slot and the loaded models by slot."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())
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
