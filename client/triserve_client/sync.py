"""TriserveClient: the blocking client (httpx.Client, tenacity.Retrying): task APIs, admin APIs, Open Inference
Protocol v2 over REST."""
from __future__ import annotations

import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import httpx
import tenacity

from triserve_client._base import DEFAULT_URL, Call, ClientCore, ImageLike, RetryPolicy, new_request_id
from triserve_client._forecast import SeriesLike, Timestamp
from triserve_client._oip import InputsLike
from triserve_client.backtest import BacktestResponse
from triserve_client.errors import TriserveError, TriserveTimeoutError
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

T = TypeVar("T")


class TriserveClient:
    """Blocking client of the triserve REST API.

        with TriserveClient("http://127.0.0.1:3000", timeout=5) as ts:
            r = ts.classify(["cancel my reservation"], top_k=2)
            print(r.request_id, r.results[0].label, r.results[0].truncated)

    Every call: one X-Request-ID (yours via `request_id=`, else a fresh one) kept across its retries and returned on
    its result (`.request_id`) or error; a deadline (`timeout=` per call or per client, seconds, retries included)
    sent as X-Request-Timeout-Ms; retries per `RetryPolicy`; errors as TriserveAPIError (the service's error model)
    or TriserveTransportError. `transport`/`http_client` let tests or callers supply their own httpx plumbing
    (a passed http_client is used as is and not closed here). `api_key`: sent as X-API-Key; the admin calls
    (deployments, rollouts) need an admin key (401 without one, 403 with a key that is not an admin's). `verify`: for
    an https:// URL, an ssl.SSLContext trusting the server's CA (`ssl.create_default_context(cafile="ca.pem")`; for
    mutual TLS also `.load_cert_chain("client.pem", "client.key")`), or False to skip verification.
    """

    def __init__(self, base_url: str = DEFAULT_URL, *, api_key: str | None = None, timeout: float | None = None,
                 retry: RetryPolicy | None = None, headers: Mapping[str, str] | None = None,
                 transport: httpx.BaseTransport | None = None, http_client: httpx.Client | None = None,
                 verify: ssl.SSLContext | bool = True, **options: Any):
        self._core = ClientCore(base_url, api_key=api_key, timeout=timeout, retry=retry, headers=headers, **options)
        self._own = http_client is None
        self._http = http_client or httpx.Client(transport=transport, timeout=self._core.http_timeout, verify=verify)

    @property
    def base_url(self) -> str:
        return self._core.base_url

    # -- API ----------------------------------------------------------------------------------------------------------
    def classify(self, texts: str | Sequence[str], *, top_k: int | None = None, model: str | None = None,
                 deployment: str | None = None, timeout: float | None = None,
                 request_id: str | None = None) -> ClassifyResponse:
        """POST /v1/classify. `texts`: one text or several; `model`: 'auto' | 'primary' | 'fallback'."""
        return self._run(self._core.classify_call(texts, top_k, model, deployment), timeout, request_id)

    def detect(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None = None,
               iou_threshold: float | None = None, max_detections: int | None = None,
               class_aware: bool | None = None, model: str | None = None, deployment: str | None = None,
               upload: bool = False, timeout: float | None = None, request_id: str | None = None) -> DetectResponse:
        """POST /v1/detect (base64 JSON), or /v1/detect/upload (multipart, no base64 overhead) with upload=True.
        An image is raw bytes, a path (pathlib.Path, or a str naming an existing file), or a base64 str / data: URL."""
        call = self._core.detect_call(images, conf_threshold=conf_threshold, iou_threshold=iou_threshold,
                                      max_detections=max_detections, class_aware=class_aware, model=model,
                                      deployment=deployment, upload=upload)
        return self._run(call, timeout, request_id)

    def classify_image(self, images: ImageLike | Sequence[ImageLike], *, top_k: int | None = None,
                       model: str | None = None, deployment: str | None = None, upload: bool = False,
                       timeout: float | None = None, request_id: str | None = None) -> ClassifyImageResponse:
        """POST /v1/classify-image (base64 JSON), or /v1/classify-image/upload (multipart) with upload=True: per image
        the top-1 label and the `top_k` best labels with their probabilities."""
        call = self._core.classify_image_call(images, top_k=top_k, model=model, deployment=deployment, upload=upload)
        return self._run(call, timeout, request_id)

    def pose(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None = None,
             iou_threshold: float | None = None, max_detections: int | None = None, model: str | None = None,
             deployment: str | None = None, upload: bool = False, timeout: float | None = None,
             request_id: str | None = None) -> PoseResponse:
        """POST /v1/pose (base64 JSON), or /v1/pose/upload (multipart) with upload=True: per image the people found,
        each with its box and keypoints (in the order of `keypoint_names`; `skeleton` joins them)."""
        call = self._core.pose_call(images, conf_threshold=conf_threshold, iou_threshold=iou_threshold,
                                    max_detections=max_detections, model=model, deployment=deployment, upload=upload)
        return self._run(call, timeout, request_id)

    def segment(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None = None,
                iou_threshold: float | None = None, max_detections: int | None = None,
                class_aware: bool | None = None, mask_format: str | None = None, model: str | None = None,
                deployment: str | None = None, upload: bool = False, timeout: float | None = None,
                request_id: str | None = None) -> SegmentResponse:
        """POST /v1/segment (base64 JSON), or /v1/segment/upload (multipart) with upload=True: per image the instances
        with their masks; `mask_format`: 'rle' (COCO RLE, read by triserve_client.masks), 'polygons' or 'both'."""
        call = self._core.segment_call(images, conf_threshold=conf_threshold, iou_threshold=iou_threshold,
                                       max_detections=max_detections, class_aware=class_aware,
                                       mask_format=mask_format, model=model, deployment=deployment, upload=upload)
        return self._run(call, timeout, request_id)

    def forecast(self, values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None = None,
                 start: Timestamp | None = None, frequency: str | None = None, horizon: int | None = None,
                 model: str | None = None, deployment: str | None = None, timeout: float | None = None,
                 request_id: str | None = None, covariates: Mapping[str, Iterable[float]] | None = None,
                 future_covariates: Mapping[str, Iterable[float]] | None = None,
                 calendar: Sequence[str] | None = None) -> ForecastResponse:
        """POST /v1/forecast. `values` may hold None/NaN for missing points; give `timestamps` (one per value;
        frequency inferred when omitted) or `start` + `frequency`."""
        call = self._core.forecast_call(values, timestamps=timestamps, start=start, frequency=frequency,
                                        horizon=horizon, model=model, deployment=deployment,
                                        covariates=covariates, future_covariates=future_covariates,
                                        calendar=calendar)
        return self._run(call, timeout, request_id)

    def forecast_panel(self, series: Mapping[str, SeriesLike], *, start: Timestamp | None = None,
                       frequency: str | None = None, horizon: int | None = None, model: str | None = None,
                       deployment: str | None = None, timeout: float | None = None,
                       request_id: str | None = None,
                       calendar: Sequence[str] | None = None) -> PanelForecastResponse:
        """POST /v1/forecast/panel: many series in one request, answered in the mapping's order. Each series is
        its values (they start at `start`) or a mapping of its own fields: {"values": [...], "start" or
        "timestamps": ..., "covariates": {...}, "future_covariates": {...}, "static": {"store_type": "A"}}
        (triserve_client._forecast; static categoricals: the same names on every series)."""
        call = self._core.forecast_panel_call(series, start=start, frequency=frequency, horizon=horizon,
                                              model=model, deployment=deployment, calendar=calendar)
        return self._run(call, timeout, request_id)

    def forecast_backtest(self, values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None = None,
                          start: Timestamp | None = None, frequency: str | None = None, horizon: int | None = None,
                          origins: int | None = None, model: str | None = None, deployment: str | None = None,
                          covariates: Mapping[str, Iterable[float]] | None = None,
                          calendar: Sequence[str] | None = None, timeout: float | None = None,
                          request_id: str | None = None) -> BacktestResponse:
        """POST /v1/forecast/backtest: the forecaster judged on this series over `origins` rolling origins of
        `horizon` steps (per-step MASE/RMSSE, interval coverage, the method at each origin)."""
        call = self._core.forecast_backtest_call(values, timestamps=timestamps, start=start, frequency=frequency,
                                                 horizon=horizon, origins=origins, model=model, deployment=deployment,
                                                 covariates=covariates, calendar=calendar)
        return self._run(call, timeout, request_id)

    def models(self, *, timeout: float | None = None, request_id: str | None = None) -> ModelsListing:
        """GET /v1/models: every deployment with its models, versions, providers and errors."""
        return self._run(self._core.models_call(), timeout, request_id)

    def ready(self, *, timeout: float | None = 2.0) -> bool:
        """GET /readyz: True once every model is loaded and warmed; False on any other answer or no answer."""
        return self._probe("/readyz", timeout)

    def live(self, *, timeout: float | None = 2.0) -> bool:
        """GET /livez: True while the process answers."""
        return self._probe("/livez", timeout)

    def wait_ready(self, timeout: float = 120.0, interval: float = 0.25) -> float:
        """Poll /readyz until 200; seconds waited. TriserveTimeoutError after `timeout` seconds."""
        start = time.monotonic()
        while True:
            if self.ready(timeout=min(2.0, max(0.1, timeout))):
                return time.monotonic() - start
            if time.monotonic() - start + interval > timeout:
                raise TriserveTimeoutError(f"{self.base_url} not ready after {timeout} s")
            time.sleep(interval)

    # -- admin: the model repository (an admin key) -------------------------------------------------------------------
    def deployments(self, *, timeout: float | None = None, request_id: str | None = None) -> ModelRepository:
        """GET /admin/deployments: the repository as served (deployments and family defaults)."""
        return self._run(self._core.deployments_call(), timeout, request_id)

    def put_deployment(self, name: str, spec: DeploymentSpec | Mapping[str, Any], *, timeout: float | None = None,
                       request_id: str | None = None) -> DeploymentChange:
        """PUT /admin/deployments/{name}: add the deployment, or replace the one of that name. The service stages,
        verifies and warms its models before it swaps them in (409 deployment_refused changes nothing). `spec`: a
        DeploymentSpec, a Deployment from `deployments()` (its name must be `name`), or a dict of the same fields."""
        return self._run(self._core.put_deployment_call(name, spec), timeout, request_id)

    def delete_deployment(self, name: str, *, timeout: float | None = None,
                          request_id: str | None = None) -> DeploymentChange:
        """DELETE /admin/deployments/{name}: stop routing to it now; its models unload once in-flight requests end."""
        return self._run(self._core.delete_deployment_call(name), timeout, request_id)

    def load_deployment(self, name: str, *, wait_s: float | None = None, timeout: float | None = None,
                        request_id: str | None = None) -> ResidencyChange:
        """POST /admin/deployments/{name}/load: load an on-demand deployment now and wait until it is resident (at
        most `wait_s`, the service's default 60 s when None). 409 not_on_demand for an always-loaded one."""
        return self._run(self._core.load_deployment_call(name, wait_s), timeout, request_id)

    def unload_deployment(self, name: str, *, timeout: float | None = None,
                          request_id: str | None = None) -> ResidencyChange:
        """POST /admin/deployments/{name}/unload: evict an on-demand deployment (its next request loads it again)."""
        return self._run(self._core.unload_deployment_call(name), timeout, request_id)

    # -- admin: rollouts (an admin key; a slot is '<deployment>' or '<deployment>_fallback') --------------------------
    def rollouts(self, *, timeout: float | None = None, request_id: str | None = None) -> dict[str, SlotRouting]:
        """GET /admin/models: per slot the active version, the loaded ones, the canary and the shadow."""
        return self._run(self._core.rollouts_call(), timeout, request_id)

    def promote(self, slot: str, ref: str, *, alias: str | None = "stable", timeout: float | None = None,
                request_id: str | None = None) -> Promotion:
        """POST /admin/models/{slot}/promote: hot swap the slot to `ref` (a version, or an alias such as 'canary')
        and move the registry `alias` to it (None: serve it without moving any alias)."""
        return self._run(self._core.promote_call(slot, ref, alias), timeout, request_id)

    def rollback(self, slot: str, *, alias: str = "stable", timeout: float | None = None,
                 request_id: str | None = None) -> Promotion:
        """POST /admin/models/{slot}/rollback: back to the alias's previous target (409 nothing_to_roll_back)."""
        return self._run(self._core.rollback_call(slot, alias), timeout, request_id)

    def set_canary(self, slot: str, ref: str, weight: float, *, timeout: float | None = None,
                   request_id: str | None = None) -> SlotRouting:
        """POST /admin/models/{slot}/canary: send the share `weight` (0 < weight <= 1) of request keys, sticky, to the
        version `ref`."""
        return self._run(self._core.canary_call(slot, ref, weight), timeout, request_id)

    def clear_canary(self, slot: str, *, timeout: float | None = None, request_id: str | None = None) -> SlotRouting:
        """DELETE /admin/models/{slot}/canary: withdraw the canary."""
        return self._run(self._core.canary_call(slot, None, None), timeout, request_id)

    def set_shadow(self, slot: str, ref: str, *, timeout: float | None = None,
                   request_id: str | None = None) -> SlotRouting:
        """POST /admin/models/{slot}/shadow: mirror the slot's traffic to version `ref` (compared, never returned)."""
        return self._run(self._core.shadow_call(slot, ref), timeout, request_id)

    def clear_shadow(self, slot: str, *, timeout: float | None = None, request_id: str | None = None) -> SlotRouting:
        """DELETE /admin/models/{slot}/shadow: stop mirroring."""
        return self._run(self._core.shadow_call(slot, None), timeout, request_id)

    # -- Open Inference Protocol v2 over REST -------------------------------------------------------------------------
    def oip_infer(self, model: str, inputs: InputsLike, *, version: str | None = None,
                  outputs: Sequence[str] | None = None, parameters: Mapping[str, Any] | None = None,
                  infer_id: str | None = None, binary_outputs: bool = False, timeout: float | None = None,
                  request_id: str | None = None) -> OipInferResponse:
        """POST /v2/models/{model}[/versions/{version}]/infer. `inputs`: {name: nested lists} (shape and datatype read
        from the values; or {name: OipInput}) or a list of OipInput (datatype, flat data with a shape). `outputs`:
        the names to return (None: all); `parameters`: the request's (e.g. top_k, model, horizon); `infer_id`: the
        protocol's `id`; `binary_outputs`: outputs as binary tensor data (decoded here all the same)."""
        call = self._core.oip_infer_call(model, inputs, version=version, outputs=outputs, parameters=parameters,
                                         infer_id=infer_id, binary_outputs=binary_outputs)
        return self._run(call, timeout, request_id)

    def oip_model_metadata(self, model: str, *, version: str | None = None, timeout: float | None = None,
                           request_id: str | None = None) -> OipModelMetadata:
        """GET /v2/models/{model}[/versions/{version}]: versions, platform, input and output tensors."""
        return self._run(self._core.oip_model_metadata_call(model, version), timeout, request_id)

    def oip_server_metadata(self, *, timeout: float | None = None,
                            request_id: str | None = None) -> OipServerMetadata:
        """GET /v2: the server's name, version and protocol extensions."""
        return self._run(self._core.oip_server_metadata_call(), timeout, request_id)

    def oip_server_ready(self, *, timeout: float | None = 2.0) -> bool:
        """GET /v2/health/ready: True on 200, False otherwise (400 is the protocol's 'not ready') or without answer."""
        return self._probe("/v2/health/ready", timeout)

    def oip_model_ready(self, model: str, *, version: str | None = None, timeout: float | None = 2.0) -> bool:
        """GET /v2/models/{model}[/versions/{version}]/ready: True on 200, False otherwise."""
        return self._probe(self._core.oip_model_ready_path(model, version), timeout)

    # -- plumbing -----------------------------------------------------------------------------------------------------
    def _probe(self, path: str, timeout: float | None) -> bool:
        try:
            return self._run(self._core.probe_call(path), timeout, None)
        except TriserveError:
            return False

    def _run(self, call: Call[T], timeout: float | None, request_id: str | None) -> T:
        core = self._core
        rid = request_id or new_request_id()
        deadline = core.deadline_of(timeout)
        policy = core.policy_of(call)
        for attempt in tenacity.Retrying(**policy.tenacity_kwargs(deadline)):
            with attempt:
                n = attempt.retry_state.attempt_number
                try:
                    try:
                        response = self._http.request(**core.attempt_args(call, rid, deadline))
                    except httpx.HTTPError as exc:
                        raise core.transport_error(exc, rid) from exc
                    return core.answer(call, response, rid)
                except TriserveError as exc:
                    core.annotate(exc, n, rid)  # on the error itself: its cause stays the failure it came from
                    raise
        raise AssertionError("unreachable: tenacity returns or reraises")  # pragma: no cover

    def close(self) -> None:
        if self._own:
            self._http.close()

    def __enter__(self) -> TriserveClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
