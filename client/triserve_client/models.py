"""Typed results, the client's own: nothing here imports the server, so `pip install ./client` is all a caller needs.

They mirror the service's response models (families/*/schemas.py: text, detection, pose, segmentation, forecast; the
envelope of kernel/schemas.py, Timings of kernel/request_context.py, the error model of kernel/errors.py) and are kept
in step with them by tests/client/test_schemas.py, which compares them with the server's models and its live
/openapi.json.

Tolerant where a client should be, so that a newer server does not break an older client: every model keeps fields
it does not know (extra="allow", readable via `.model_extra`); enumerations (forecast frequency, interval calibration)
are plain strings; the forecast method report (method, method_weights, backtest_*, interval_calibration: newer than
the rest) is optional, so a server from before it still parses; no length or range checks on answers.
GET /v1/models answers a plain dict in the service (services/gateway.py list_models); ModelsListing types the fields
it documents. The admin answers (services/repository_api.py, services/rollout_api.py) and the Open Inference Protocol
v2 documents (services/protocols/oip_rest.py) are plain dicts in the service too: the models below type what those
modules write (the OIP documents: triserve_client.oip_models).
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ClassifyResponse", "TextResult", "LabelScore", "DetectResponse", "ImageResult", "Detection",
           "PoseResponse", "PoseImageResult", "Person", "Keypoint", "Bone", "SegmentResponse", "SegmentImageResult",
           "Instance", "RLE", "Polygon", "ForecastResponse", "ForecastPoint", "InputReport", "ServedBy", "ModelInfo",
           "Timings", "ErrorBody",
           "ErrorResponse", "SlotStatus", "DeploymentStatus", "ModelsListing", "Batching", "ModelRef",
           "DeploymentSpec", "Deployment", "ModelRepository", "DeploymentChange", "ResidencyChange", "CanaryRoute",
           "SlotRouting", "Promotion"]


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


# -- POST /v1/pose, /v1/pose/upload ------------------------------------------------------------------------------------
class Keypoint(Answer):
    name: str
    x: float = Field(description="Original image pixels (clipped to the image).")
    y: float = Field(description="Original image pixels (clipped to the image).")
    confidence: float | None = Field(None, description="Visibility/presence score in [0, 1] (None: the model's "
                                                       "keypoints carry no score).")
    visible: bool


class Person(Answer):
    box: list[float] = Field(description="x1, y1, x2, y2 in original image pixels.")
    score: float
    class_id: int
    label: str
    keypoints: list[Keypoint] = Field(description="In the order of PoseResponse.keypoint_names.")


class PoseImageResult(Answer):
    width: int
    height: int
    people: list[Person]
    candidates: int = Field(description="Anchors above the threshold before the pre-NMS cap.")


class Bone(Answer):
    """A skeleton edge: two indices into keypoint_names (and every person's keypoints) to join with a line."""

    start: int
    end: int


class PoseResponse(ServedBy):
    keypoint_names: list[str]
    skeleton: list[Bone] = Field(default_factory=list)
    results: list[PoseImageResult]


# -- POST /v1/segment, /v1/segment/upload ------------------------------------------------------------------------------
class RLE(Answer):
    """COCO run-length encoding (pycocotools' compressed string): triserve_client.masks.decode_rle reads it."""

    size: list[int] = Field(description="[height, width] of the original image.")
    counts: str = Field(description="Compressed column-major run lengths (pycocotools' string format).")


class Polygon(Answer):
    points: list[float] = Field(description="x1, y1, x2, y2, ... in original image pixels.")


class Instance(Answer):
    box: list[float] = Field(description="x1, y1, x2, y2 in original image pixels.")
    score: float
    class_id: int
    label: str
    area: int = Field(description="Mask pixels (0 when the mask was skipped).")
    mask_skipped: bool = False
    rle: RLE | None = Field(None, description="mask_format 'rle' or 'both'.")
    polygons: list[Polygon] | None = Field(None, description="mask_format 'polygons' or 'both': outer contours, "
                                                             "largest first.")


class SegmentImageResult(Answer):
    width: int
    height: int
    instances: list[Instance]
    candidates: int = Field(description="Anchors above the threshold before the pre-NMS cap.")
    masks_skipped: int = 0


class SegmentResponse(ServedBy):
    results: list[SegmentImageResult]


# -- POST /v1/classify-image, /v1/classify-image/upload --------------------------------------------------------------
class ClassScore(Answer):
    class_id: int = Field(description="Index of the class in the model's labels.")
    label: str
    score: float = Field(description="Probability (softmax over the model's classes).")


class ClassifiedImage(Answer):
    width: int
    height: int
    label: str = Field(description="Top-1 class.")
    score: float
    top_k: list[ClassScore]


class ClassifyImageResponse(ServedBy):
    results: list[ClassifiedImage]


# -- POST /v1/forecast -------------------------------------------------------------------------------------------------
class ForecastPoint(Answer):
    timestamp: datetime = Field(description="Start of the forecast step's bucket, UTC.")
    point: float = Field(description="The point forecast: the median (0.5 quantile).")
    lower_50: float | None = None
    upper_50: float | None = None
    lower_90: float | None = None
    upper_90: float | None = None
    quantiles: dict[str, float] = Field(description="Every quantile the model outputs, keyed by level ('0.1').")


class LevelShift(Answer):
    at: datetime = Field(description="The first point at the new level (UTC).")
    size: float = Field(description="New level minus old: the history before it was moved by this before forecasting.")


class CovariateEffect(Answer):
    name: str
    effect: float = Field(description="Change of the series per unit of the covariate.")
    t_value: float
    used: bool = Field(description="True when it moved the forecast (the series' backtest said it helps).")


class CovariateReport(Answer):
    used: bool
    backtest_error_with: float | None = None
    backtest_error_without: float | None = None
    effects: list[CovariateEffect]


class StaticCategorical(Answer):
    name: str
    categories: int = Field(description="Distinct categories over the panel.")
    used: bool = Field(description="True when the panel's series were pooled by it.")
    backtest_error_own: float | None = None
    backtest_error_pooled: float | None = None


class StaticReport(Answer):
    used: bool = Field(description="True when this series' method weights came from scores pooled with its category.")
    pooled_by: str | None = None
    series_in_category: int | None = None
    categoricals: list[StaticCategorical]


class InputReport(Answer):
    """How the service read the series, and what forecast it (docs/families/forecast.md)."""

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
    level_shift: LevelShift | None = Field(None, description="A persistent step to a new level, or None.")
    covariates: CovariateReport | None = Field(None, description="What the covariates did (None: none given).")
    static: StaticReport | None = Field(None, description="What a panel's static categoricals did (None: none given).")


class ForecastResponse(ServedBy):
    forecast: list[ForecastPoint]
    input: InputReport


# -- POST /v1/forecast/panel -------------------------------------------------------------------------------------------
class SeriesForecast(Answer):
    id: str = Field(description="The series' id, as sent.")
    model: ModelInfo
    degraded: bool
    forecast: list[ForecastPoint]
    input: InputReport


class PanelForecastResponse(ServedBy):
    runner_calls: int = Field(description="Runner calls the panel took.")
    series: list[SeriesForecast] = Field(description="One answer per series, in request order.")


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


# -- admin: the model repository (GET/PUT/DELETE /admin/deployments, POST .../load|unload) -----------------------------
class Batching(Answer):
    """How a model slot batches (configs/settings.py Batching); unset fields take the service's defaults."""

    max_batch_size: int | None = None
    max_latency_ms: int | None = None
    compute_batch: int | None = None
    per_item: bool | None = None


class ModelRef(Answer):
    """Which registry model serves a slot (the service's ModelSlot): name, alias or version, batching."""

    name: str = Field(description="Model name in the registry.")
    ref: str = Field("stable", description="Alias or version to load.")
    batching: Batching | None = None


class DeploymentSpec(Answer):
    """A deployment as PUT /admin/deployments/{name} takes it (its name is in the path). Build one, or take a
    Deployment from `deployments()` (its name is left out when sent). Only the fields set are sent: the service's
    defaults apply to the rest."""

    family: str = Field(description="Model family: detection, text, forecast.")
    model: ModelRef
    fallback: ModelRef | None = None
    limits: dict[str, Any] = Field(default_factory=dict)
    description: str = ""
    residency: str = Field("always", description="'always' or 'on_demand'.")
    memory_mb: float | None = None


class Deployment(DeploymentSpec):
    name: str


class ModelRepository(Answer):
    """GET /admin/deployments: the repository as served (deployments and family defaults)."""

    deployments: list[Deployment]
    defaults: dict[str, str] = Field(default_factory=dict, description="family -> deployment name.")

    def deployment(self, name: str) -> Deployment:
        """The deployment called `name` (KeyError if the repository has none)."""
        for d in self.deployments:
            if d.name == name:
                return d
        raise KeyError(f"no deployment {name!r}; known: {[d.name for d in self.deployments]}")


class DeploymentChange(Answer):
    """PUT (action 'added' / 'updated', the versions loaded per slot) or DELETE (action 'removed', its slots)."""

    deployment: str
    action: str
    versions: dict[str, str] = Field(default_factory=dict, description="Slot -> version loaded (PUT).")
    slots: list[str] = Field(default_factory=list, description="The slots removed (DELETE).")
    residency: str | None = Field(None, description="'on_demand' when PUT verified but did not load it.")
    load_seconds: float | None = None
    seconds: float | None = None
    by: str | None = Field(None, description="Who made the change ('key:<name>').")


class ResidencyChange(Answer):
    """POST /admin/deployments/{name}/load (state after waiting: 'resident', 'loading', ...) or /unload."""

    deployment: str
    state: str | None = None
    evicted: bool | None = Field(None, description="Unload: whether anything was resident and evicted.")
    seconds: float | None = None


# -- admin: rollouts (/admin/models) -----------------------------------------------------------------------------------
class CanaryRoute(Answer):
    version: str
    weight: float = Field(description="Share of request keys (sticky) sent to the candidate.")


class MeasuredSplit(Answer):
    """Requests each version of a slot answered since its last promote or canary change."""

    since: float | None = Field(None, description="Epoch seconds the count started.")
    requests: dict[str, int] = Field(default_factory=dict, description="Version -> requests answered.")
    total: int = 0
    canary_share: float | None = Field(None, description="The canary's share of them (None: no canary or no "
                                                         "request yet).")


class SlotRouting(Answer):
    """One slot's routing: the active version, every loaded version, the canary and the shadow, the promotions a
    rollback can undo (oldest first: from, to, alias, alias_from, by, when) and the measured split."""

    active: str | None = None
    loaded: list[str] = Field(default_factory=list)
    resident: bool | None = None
    batch_cap: int | None = None
    canary: CanaryRoute | None = None
    shadow: str | None = None
    promotions: list[dict[str, Any]] = Field(default_factory=list)
    split: MeasuredSplit | None = None


class Promotion(Answer):
    """POST /admin/models/{slot}/promote or /rollback: the version now active and the one it replaced."""

    slot: str
    active: str
    previous: str | None = None
    load_seconds: float | None = None
    seconds: float | None = None
