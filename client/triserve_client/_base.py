"""What the sync and async clients share: the retry policy (tenacity), request ids, deadlines, request building and
answer parsing (task APIs, admin APIs, Open Inference Protocol v2). Only the sending differs (sync.py, aio.py)."""
from __future__ import annotations

import base64
import binascii
import math
import os
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from urllib.parse import quote, urlencode

import httpx
import tenacity
from pydantic import BaseModel, TypeAdapter

from triserve_client import _oip
from triserve_client._forecast import Covariates, SeriesLike, Timestamp, forecast_body, panel_body
from triserve_client.backtest import BacktestResponse
from triserve_client.errors import TriserveAPIError, TriserveError, TriserveTimeoutError, TriserveTransportError
from triserve_client.models import (
    ClassifyImageResponse,
    ClassifyResponse,
    DeploymentChange,
    DeploymentSpec,
    DetectResponse,
    ForecastResponse,
    ModelRepository,
    ModelsListing,
    PanelForecastResponse,
    PoseResponse,
    Promotion,
    ResidencyChange,
    SegmentResponse,
    SlotRouting,
)
from triserve_client.oip_models import OipInferResponse, OipModelMetadata, OipServerMetadata

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing.TypeIs from Python 3.13

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:3000"
REQUEST_ID_HEADER = "X-Request-ID"
TIMEOUT_HEADER = "X-Request-Timeout-Ms"  # read by kernel/protection/deadlines.py (clamped to deadlines.max_ms there)
API_KEY_HEADER = "X-API-Key"
USER_AGENT = f"triserve-client/0.1 httpx/{httpx.__version__}"

# An image: raw bytes, a path (pathlib.Path, or a str naming an existing file), or a base64 str / data: URL.
ImageLike = bytes | bytearray | memoryview | str | os.PathLike[str]


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to retry one call (tenacity under the hood).

    Retried: the statuses in `statuses` (429 rate limited / over capacity, 503 overloaded / not ready / runner
    unavailable), waiting the answer's Retry-After plus up to `jitter` of it more (never less than the service asked),
    or exponential backoff with jitter when the answer has none; and transport failures (connection refused or
    reset, timeouts), which are safe to repeat because every task and read call of the API is free of side effects.
    The admin calls that change something (deployments, rollouts) run with `side_effects=True`: a transport failure
    is retried only when the request cannot have reached the service (connection refused, connect timeout), never
    after it may have been sent. A Retry-After longer than `max_retry_after` is not waited for: the error is raised at
    once. A call with a deadline stops retrying when the next wait would not leave `min_attempt_s` of it.
    `attempts=1` switches retries off.
    """

    attempts: int = 4
    statuses: frozenset[int] = frozenset({429, 503})
    backoff_initial: float = 0.2
    backoff_max: float = 5.0
    jitter: float = 0.25
    max_retry_after: float = 30.0
    transport_errors: bool = True
    min_attempt_s: float = 0.05
    side_effects: bool = False
    _backoff: tenacity.wait.wait_base = field(init=False, repr=False, compare=False)  # set in __post_init__

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be >= 1")
        object.__setattr__(self, "statuses", frozenset(self.statuses))
        object.__setattr__(self, "_backoff", tenacity.wait_exponential_jitter(
            multiplier=self.backoff_initial, max=self.backoff_max, jitter=self.backoff_initial))

    def retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, TriserveAPIError):
            return exc.status in self.statuses and (exc.retry_after is None or exc.retry_after <= self.max_retry_after)
        if isinstance(exc, TriserveTimeoutError) and exc.__cause__ is None:
            return False  # the call's own deadline passed: nothing left to retry with
        if not (self.transport_errors and isinstance(exc, TriserveTransportError)):
            return False
        return not self.side_effects or isinstance(exc.__cause__, (httpx.ConnectError, httpx.ConnectTimeout))

    def with_side_effects(self) -> RetryPolicy:
        """This policy for a call that changes state (see the class)."""
        return self if self.side_effects else replace(self, side_effects=True)

    def wait(self, state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            return retry_after * (1.0 + random.uniform(0.0, self.jitter)) or random.uniform(0.0, self.backoff_initial)
        return self._backoff(state)

    def tenacity_kwargs(self, deadline: float | None) -> dict[str, Any]:
        """Arguments for tenacity.Retrying / AsyncRetrying for one call whose deadline (time.monotonic()) is given."""

        def stop(state: tenacity.RetryCallState) -> bool:
            if state.attempt_number >= self.attempts:
                return True
            return deadline is not None and time.monotonic() + state.upcoming_sleep > deadline - self.min_attempt_s

        return {"stop": stop, "wait": self.wait, "retry": tenacity.retry_if_exception(self.retryable),
                "reraise": True}


NO_RETRY = RetryPolicy(attempts=1)


@dataclass
class Call(Generic[T]):
    """One API call, independent of how it is sent: what to send and how to read the answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response, str], T]
    json: Any = None
    files: list[tuple[str, tuple[str, bytes, str]]] | None = None
    data: dict[str, str] | None = None
    retry: RetryPolicy | None = None  # None: the client's policy
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes | None = None  # a raw body (OIP: JSON, or JSON + binary tensor data), sent with `headers`
    side_effects: bool = False  # an admin call that changes state: see RetryPolicy


def new_request_id() -> str:
    """A fresh id in the form the service keeps ([A-Za-z0-9._:-]{1,128}, kernel/request_context.py)."""
    return uuid.uuid4().hex


class ClientCore:
    """Configuration and the per-attempt steps shared by TriserveClient and AsyncTriserveClient."""

    def __init__(self, base_url: str = DEFAULT_URL, *, api_key: str | None = None, timeout: float | None = None,
                 retry: RetryPolicy | None = None, headers: Mapping[str, str] | None = None,
                 connect_timeout: float = 5.0, read_timeout: float = 65.0, deadline_grace: float = 1.0):
        """`timeout`: the default deadline of a call in seconds, retries included, sent to the service as
        X-Request-Timeout-Ms (the time left at each attempt); None sends no header, so the service's default deadline
        applies (deadlines.default_ms). `read_timeout`: transport read timeout for calls without a deadline;
        with one, each attempt may wait the time left plus `deadline_grace` (for the service's own 504 to arrive)."""
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.deadline_grace = deadline_grace
        self.connect_timeout = connect_timeout
        self.http_timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self.headers = {"User-Agent": USER_AGENT, "Accept": "application/json", **(headers or {})}
        if api_key:
            self.headers[API_KEY_HEADER] = api_key

    # -- per call ---------------------------------------------------------------------------------------------------
    def policy_of(self, call: Call) -> RetryPolicy:
        policy = call.retry or self.retry
        return policy.with_side_effects() if call.side_effects else policy

    def deadline_of(self, timeout: float | None) -> float | None:
        budget = self.timeout if timeout is None else timeout
        if budget is None:
            return None
        if budget <= 0:
            raise ValueError("timeout must be positive (seconds)")
        return time.monotonic() + budget

    def attempt_args(self, call: Call, request_id: str, deadline: float | None) -> dict[str, Any]:
        """httpx.request keyword arguments for one attempt: the request id, the time left as the deadline header
        and as the transport timeout."""
        headers = {**self.headers, **call.headers, REQUEST_ID_HEADER: request_id}
        timeout = self.http_timeout
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TriserveTimeoutError("the call's deadline passed before the request was sent", request_id)
            headers[TIMEOUT_HEADER] = str(max(1, math.ceil(left * 1000)))
            timeout = httpx.Timeout(left + self.deadline_grace, connect=min(self.connect_timeout, left))
        args: dict[str, Any] = {"method": call.method, "url": self.base_url + call.path, "headers": headers,
                                "timeout": timeout}
        if call.json is not None:
            args["json"] = call.json
        if call.files is not None:
            args["files"] = call.files
            args["data"] = call.data or {}
        if call.content is not None:
            args["content"] = call.content
        return args

    @staticmethod
    def transport_error(exc: httpx.HTTPError, request_id: str) -> TriserveTransportError:
        cls = TriserveTimeoutError if isinstance(exc, httpx.TimeoutException) else TriserveTransportError
        err = cls(f"{type(exc).__name__}: {exc}", request_id)
        err.__cause__ = exc
        return err

    @staticmethod
    def answer(call: Call[T], response: httpx.Response, request_id: str) -> T:
        if response.is_success:
            return call.parse(response, request_id)
        raise TriserveAPIError.from_response(response, request_id)

    @staticmethod
    def annotate(exc: TriserveError, attempts: int, request_id: str) -> TriserveError:
        exc.attempts = attempts
        if exc.request_id is None:
            exc.request_id = request_id
        return exc

    # -- request builders -------------------------------------------------------------------------------------------
    def classify_call(self, texts: str | Sequence[str], top_k: int | None, model: str | None,
                      deployment: str | None) -> Call[ClassifyResponse]:
        if isinstance(texts, str):
            texts = [texts]
        body = _options(texts=list(texts), top_k=top_k, model=model, deployment=deployment)
        return Call("POST", "/v1/classify", _parser(ClassifyResponse), json=body)

    def detect_call(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None,
                    iou_threshold: float | None, max_detections: int | None, class_aware: bool | None,
                    model: str | None, deployment: str | None, upload: bool) -> Call[DetectResponse]:
        opts = _options(conf_threshold=conf_threshold, iou_threshold=iou_threshold, max_detections=max_detections,
                        class_aware=class_aware, model=model, deployment=deployment)
        return _image_call("/v1/detect", DetectResponse, images, opts, upload)

    def classify_image_call(self, images: ImageLike | Sequence[ImageLike], *, top_k: int | None, model: str | None,
                            deployment: str | None, upload: bool) -> Call[ClassifyImageResponse]:
        opts = _options(top_k=top_k, model=model, deployment=deployment)
        return _image_call("/v1/classify-image", ClassifyImageResponse, images, opts, upload)

    def pose_call(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None,
                  iou_threshold: float | None, max_detections: int | None, model: str | None,
                  deployment: str | None, upload: bool) -> Call[PoseResponse]:
        opts = _options(conf_threshold=conf_threshold, iou_threshold=iou_threshold, max_detections=max_detections,
                        model=model, deployment=deployment)
        return _image_call("/v1/pose", PoseResponse, images, opts, upload)

    def segment_call(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None,
                     iou_threshold: float | None, max_detections: int | None, class_aware: bool | None,
                     mask_format: str | None, model: str | None, deployment: str | None,
                     upload: bool) -> Call[SegmentResponse]:
        opts = _options(conf_threshold=conf_threshold, iou_threshold=iou_threshold, max_detections=max_detections,
                        class_aware=class_aware, mask_format=mask_format, model=model, deployment=deployment)
        return _image_call("/v1/segment", SegmentResponse, images, opts, upload)

    def forecast_call(self, values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None,
                      start: Timestamp | None, frequency: str | None, horizon: int | None, model: str | None,
                      deployment: str | None, covariates: Covariates | None = None,
                      future_covariates: Covariates | None = None,
                      calendar: Sequence[str] | None = None) -> Call[ForecastResponse]:
        body = forecast_body(values, timestamps=timestamps, start=start, frequency=frequency, horizon=horizon,
                             model=model, deployment=deployment, covariates=covariates,
                             future_covariates=future_covariates, calendar=calendar)
        return Call("POST", "/v1/forecast", _parser(ForecastResponse), json=body)

    def forecast_panel_call(self, series: Mapping[str, SeriesLike], *, start: Timestamp | None,
                            frequency: str | None, horizon: int | None, model: str | None,
                            deployment: str | None,
                            calendar: Sequence[str] | None = None) -> Call[PanelForecastResponse]:
        body = panel_body(series, start=start, frequency=frequency, horizon=horizon, model=model,
                          deployment=deployment, calendar=calendar)
        return Call("POST", "/v1/forecast/panel", _parser(PanelForecastResponse), json=body)

    def forecast_backtest_call(self, values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None,
                               start: Timestamp | None, frequency: str | None, horizon: int | None, origins: int | None,
                               model: str | None, deployment: str | None, covariates: Covariates | None,
                               calendar: Sequence[str] | None) -> Call[BacktestResponse]:
        body = forecast_body(values, timestamps=timestamps, start=start, frequency=frequency, horizon=horizon,
                             model=model, deployment=deployment, covariates=covariates, future_covariates=None,
                             calendar=calendar)
        return Call("POST", "/v1/forecast/backtest", _parser(BacktestResponse),
                    json=body if origins is None else {**body, "origins": origins})

    @staticmethod
    def models_call() -> Call[ModelsListing]:
        def parse(response: httpx.Response, request_id: str) -> ModelsListing:
            listing = ModelsListing.model_validate_json(response.content)
            listing.request_id = response.headers.get("x-request-id") or request_id
            return listing

        return Call("GET", "/v1/models", parse)

    @staticmethod
    def probe_call(path: str) -> Call[bool]:
        """/readyz or /livez: True on 200; no retries (a probe answers for now)."""
        return Call("GET", path, lambda response, request_id: True, retry=NO_RETRY)

    # -- admin: the model repository (services/repository_api.py; the admin key: api_key=) --------------------------
    @staticmethod
    def deployments_call() -> Call[ModelRepository]:
        return Call("GET", "/admin/deployments", _parser(ModelRepository))

    @staticmethod
    def put_deployment_call(name: str, spec: DeploymentSpec | Mapping[str, Any]) -> Call[DeploymentChange]:
        body = deployment_body(name, spec)
        return Call("PUT", f"/admin/deployments/{_segment(name)}", _parser(DeploymentChange), json=body,
                    side_effects=True)

    @staticmethod
    def delete_deployment_call(name: str) -> Call[DeploymentChange]:
        return Call("DELETE", f"/admin/deployments/{_segment(name)}", _parser(DeploymentChange), side_effects=True)

    @staticmethod
    def load_deployment_call(name: str, wait_s: float | None) -> Call[ResidencyChange]:
        query = "" if wait_s is None else "?" + urlencode({"wait_s": wait_s})
        return Call("POST", f"/admin/deployments/{_segment(name)}/load{query}", _parser(ResidencyChange),
                    side_effects=True)

    @staticmethod
    def unload_deployment_call(name: str) -> Call[ResidencyChange]:
        return Call("POST", f"/admin/deployments/{_segment(name)}/unload", _parser(ResidencyChange),
                    side_effects=True)

    # -- admin: rollouts (services/rollout_api.py) ------------------------------------------------------------------
    @staticmethod
    def rollouts_call() -> Call[dict[str, SlotRouting]]:
        return Call("GET", "/admin/models", _adapter_parser(TypeAdapter(dict[str, SlotRouting])))

    @staticmethod
    def promote_call(slot: str, ref: str, alias: str | None) -> Call[Promotion]:
        return Call("POST", f"/admin/models/{_segment(slot)}/promote", _parser(Promotion),
                    json={"ref": ref, "alias": alias}, side_effects=True)

    @staticmethod
    def rollback_call(slot: str, alias: str) -> Call[Promotion]:
        return Call("POST", f"/admin/models/{_segment(slot)}/rollback", _parser(Promotion), json={"alias": alias},
                    side_effects=True)

    @staticmethod
    def canary_call(slot: str, ref: str | None, weight: float | None) -> Call[SlotRouting]:
        """ref None: withdraw the canary (DELETE)."""
        path = f"/admin/models/{_segment(slot)}/canary"
        if ref is None:
            return Call("DELETE", path, _parser(SlotRouting), side_effects=True)
        if weight is None or not 0 < weight <= 1:
            raise ValueError(f"weight is the canary's share of traffic, in (0, 1]; got {weight!r}")
        return Call("POST", path, _parser(SlotRouting), json={"ref": ref, "weight": weight}, side_effects=True)

    @staticmethod
    def shadow_call(slot: str, ref: str | None) -> Call[SlotRouting]:
        """ref None: stop mirroring (DELETE)."""
        path = f"/admin/models/{_segment(slot)}/shadow"
        if ref is None:
            return Call("DELETE", path, _parser(SlotRouting), side_effects=True)
        return Call("POST", path, _parser(SlotRouting), json={"ref": ref}, side_effects=True)

    # -- Open Inference Protocol v2 over REST (services/protocols/oip_rest.py) --------------------------------------
    @staticmethod
    def oip_infer_call(model: str, inputs: _oip.InputsLike, *, version: str | None,
                       outputs: Sequence[str] | None, parameters: Mapping[str, Any] | None, infer_id: str | None,
                       binary_outputs: bool) -> Call[OipInferResponse]:
        content, headers = _oip.encode_request(inputs, outputs=outputs, parameters=parameters, infer_id=infer_id,
                                               binary_outputs=binary_outputs)

        def parse(response: httpx.Response, request_id: str) -> OipInferResponse:
            return _oip.decode_response(response.content, response.headers.get(_oip.HEADER_LENGTH))

        return Call("POST", _oip_model_path(model, version) + "/infer", parse, content=content, headers=headers)

    @staticmethod
    def oip_model_metadata_call(model: str, version: str | None) -> Call[OipModelMetadata]:
        return Call("GET", _oip_model_path(model, version), _parser(OipModelMetadata))

    @staticmethod
    def oip_server_metadata_call() -> Call[OipServerMetadata]:
        return Call("GET", "/v2", _parser(OipServerMetadata))

    @staticmethod
    def oip_model_ready_path(model: str, version: str | None) -> str:
        return _oip_model_path(model, version) + "/ready"


# -- helpers ----------------------------------------------------------------------------------------------------------
def _options(**kw: Any) -> dict[str, Any]:
    """Only what the caller set: the service's defaults apply to the rest."""
    return {k: v for k, v in kw.items() if v is not None}


M = TypeVar("M", bound=BaseModel)


def _image_call(path: str, answer: type[M], images: ImageLike | Sequence[ImageLike], opts: dict[str, Any],
                upload: bool) -> Call[M]:
    """An image task: base64 JSON at `path`, or multipart (no base64 overhead) at `path`/upload."""
    items = [images] if _is_one_image(images) else list(images)
    if not upload:
        body = {"images": [{"data": image_base64(im)} for im in items], **opts}
        return Call("POST", path, _parser(answer), json=body)
    files = []
    for i, im in enumerate(items):
        name, raw = image_bytes(im)
        files.append(("images", (name or f"image{i}", raw, "application/octet-stream")))
    data = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in opts.items()}
    return Call("POST", f"{path}/upload", _parser(answer), files=files, data=data)


def _parser(model: type[BaseModel]) -> Callable[[httpx.Response, str], Any]:
    def parse(response: httpx.Response, request_id: str) -> Any:
        return model.model_validate_json(response.content)

    return parse


def _adapter_parser(adapter: TypeAdapter[T]) -> Callable[[httpx.Response, str], T]:
    def parse(response: httpx.Response, request_id: str) -> T:
        return adapter.validate_json(response.content)

    return parse


def _segment(name: str) -> str:
    """A deployment, slot or model name as one path segment."""
    if not name:
        raise ValueError("a name is required")
    return quote(name, safe="")


def _oip_model_path(model: str, version: str | None) -> str:
    return f"/v2/models/{_segment(model)}" + (f"/versions/{_segment(version)}" if version else "")


def deployment_body(name: str, spec: DeploymentSpec | Mapping[str, Any]) -> dict[str, Any]:
    """What PUT /admin/deployments/{name} takes: the spec's fields that are set, without a name (it is the path's)."""
    if isinstance(spec, BaseModel):
        body = spec.model_dump(mode="json", exclude_unset=True)
    elif isinstance(spec, Mapping):
        body = dict(spec)
    else:
        raise TypeError(f"a deployment spec is a DeploymentSpec or a mapping, not {type(spec).__name__}")
    given = body.pop("name", name)
    if given != name:
        raise ValueError(f"the spec is named {given!r}, the call {name!r}")
    return body


def _is_one_image(images: object) -> TypeIs[ImageLike]:
    return isinstance(images, (bytes, bytearray, memoryview, str, os.PathLike))


def _path_of(image: Any) -> Path | None:
    if isinstance(image, os.PathLike):
        return Path(image)
    if isinstance(image, str) and not image.startswith("data:") and len(image) < 4096 and os.path.isfile(image):
        return Path(image)
    return None


def image_base64(image: ImageLike) -> str:
    """What DetectRequest's ImageInput.data takes: base64 (a data: URL passes as it is)."""
    path = _path_of(image)
    if path is not None:
        return base64.b64encode(path.read_bytes()).decode()
    if isinstance(image, str):
        return image
    if isinstance(image, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(image)).decode()
    raise TypeError(f"an image is bytes, a path or a base64 str, not {type(image).__name__}")


def image_bytes(image: ImageLike) -> tuple[str | None, bytes]:
    """(file name, raw bytes) for the multipart upload."""
    path = _path_of(image)
    if path is not None:
        return path.name, path.read_bytes()
    if isinstance(image, (bytes, bytearray, memoryview)):
        return None, bytes(image)
    if isinstance(image, str):
        data = image.split(",", 1)[1] if image.startswith("data:") else image
        try:
            return None, base64.b64decode(data, validate=False)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"not base64 image data: {exc}") from None
    raise TypeError(f"an image is bytes, a path or a base64 str, not {type(image).__name__}")
