"""AsyncTriserveClient: the asyncio client (httpx.AsyncClient, tenacity.AsyncRetrying); same API as
TriserveClient (task APIs, admin APIs, Open Inference Protocol v2), every call awaited."""
from __future__ import annotations

import asyncio
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


class AsyncTriserveClient:
    """Asyncio client of the triserve REST API (see TriserveClient for the contract).

        async with AsyncTriserveClient("http://127.0.0.1:3000", timeout=5) as ts:
            r = await ts.classify("book a flight to paris", request_id="demo-1")
    """

    def __init__(self, base_url: str = DEFAULT_URL, *, api_key: str | None = None, timeout: float | None = None,
                 retry: RetryPolicy | None = None, headers: Mapping[str, str] | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, http_client: httpx.AsyncClient | None = None,
                 verify: ssl.SSLContext | bool = True, **options: Any):
        self._core = ClientCore(base_url, api_key=api_key, timeout=timeout, retry=retry, headers=headers, **options)
        self._own = http_client is None
        self._http = http_client or httpx.AsyncClient(transport=transport, timeout=self._core.http_timeout,
                                                      verify=verify)

    @property
    def base_url(self) -> str:
        return self._core.base_url

    # -- API ----------------------------------------------------------------------------------------------------------
    async def classify(self, texts: str | Sequence[str], *, top_k: int | None = None, model: str | None = None,
                       deployment: str | None = None, timeout: float | None = None,
                       request_id: str | None = None) -> ClassifyResponse:
        """POST /v1/classify."""
        return await self._run(self._core.classify_call(texts, top_k, model, deployment), timeout, request_id)

    async def detect(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None = None,
                     iou_threshold: float | None = None, max_detections: int | None = None,
                     class_aware: bool | None = None, model: str | None = None, deployment: str | None = None,
                     upload: bool = False, timeout: float | None = None,
                     request_id: str | None = None) -> DetectResponse:
        """POST /v1/detect (base64 JSON), or /v1/detect/upload (multipart) with upload=True."""
        call = self._core.detect_call(images, conf_threshold=conf_threshold, iou_threshold=iou_threshold,
                                      max_detections=max_detections, class_aware=class_aware, model=model,
                                      deployment=deployment, upload=upload)
        return await self._run(call, timeout, request_id)

    async def classify_image(self, images: ImageLike | Sequence[ImageLike], *, top_k: int | None = None,
                             model: str | None = None, deployment: str | None = None, upload: bool = False,
                             timeout: float | None = None, request_id: str | None = None) -> ClassifyImageResponse:
        """POST /v1/classify-image, or /v1/classify-image/upload with upload=True."""
        call = self._core.classify_image_call(images, top_k=top_k, model=model, deployment=deployment, upload=upload)
        return await self._run(call, timeout, request_id)

    async def pose(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None = None,
                   iou_threshold: float | None = None, max_detections: int | None = None, model: str | None = None,
                   deployment: str | None = None, upload: bool = False, timeout: float | None = None,
                   request_id: str | None = None) -> PoseResponse:
        """POST /v1/pose, or /v1/pose/upload with upload=True."""
        call = self._core.pose_call(images, conf_threshold=conf_threshold, iou_threshold=iou_threshold,
                                    max_detections=max_detections, model=model, deployment=deployment, upload=upload)
        return await self._run(call, timeout, request_id)

    async def segment(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None = None,
                      iou_threshold: float | None = None, max_detections: int | None = None,
                      class_aware: bool | None = None, mask_format: str | None = None, model: str | None = None,
                      deployment: str | None = None, upload: bool = False, timeout: float | None = None,
                      request_id: str | None = None) -> SegmentResponse:
        """POST /v1/segment, or /v1/segment/upload with upload=True."""
        call = self._core.segment_call(images, conf_threshold=conf_threshold, iou_threshold=iou_threshold,
                                       max_detections=max_detections, class_aware=class_aware,
                                       mask_format=mask_format, model=model, deployment=deployment, upload=upload)
        return await self._run(call, timeout, request_id)

    async def forecast(self, values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None = None,
                       start: Timestamp | None = None, frequency: str | None = None, horizon: int | None = None,
                       model: str | None = None, deployment: str | None = None, timeout: float | None = None,
                       request_id: str | None = None, covariates: Mapping[str, Iterable[float]] | None = None,
                       future_covariates: Mapping[str, Iterable[float]] | None = None,
                       calendar: Sequence[str] | None = None) -> ForecastResponse:
        """POST /v1/forecast."""
        call = self._core.forecast_call(values, timestamps=timestamps, start=start, frequency=frequency,
                                        horizon=horizon, model=model, deployment=deployment,
                                        covariates=covariates, future_covariates=future_covariates,
                                        calendar=calendar)
        return await self._run(call, timeout, request_id)

    async def forecast_panel(self, series: Mapping[str, SeriesLike], *, start: Timestamp | None = None,
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
        return await self._run(call, timeout, request_id)

    async def forecast_backtest(self, values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None = None,
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
        return await self._run(call, timeout, request_id)

    async def models(self, *, timeout: float | None = None, request_id: str | None = None) -> ModelsListing:
        """GET /v1/models."""
        return await self._run(self._core.models_call(), timeout, request_id)

    async def ready(self, *, timeout: float | None = 2.0) -> bool:
        """GET /readyz: True on 200, False on any other answer or no answer."""
        return await self._probe("/readyz", timeout)

    async def live(self, *, timeout: float | None = 2.0) -> bool:
        """GET /livez."""
        return await self._probe("/livez", timeout)

    async def wait_ready(self, timeout: float = 120.0, interval: float = 0.25) -> float:
        """Poll /readyz until 200; seconds waited. TriserveTimeoutError after `timeout` seconds."""
        start = time.monotonic()
        while True:
            if await self.ready(timeout=min(2.0, max(0.1, timeout))):
                return time.monotonic() - start
            if time.monotonic() - start + interval > timeout:
                raise TriserveTimeoutError(f"{self.base_url} not ready after {timeout} s")
            await asyncio.sleep(interval)

    # -- admin: the model repository (an admin key) -------------------------------------------------------------------
    async def deployments(self, *, timeout: float | None = None, request_id: str | None = None) -> ModelRepository:
        """GET /admin/deployments."""
        return await self._run(self._core.deployments_call(), timeout, request_id)

    async def put_deployment(self, name: str, spec: DeploymentSpec | Mapping[str, Any], *,
                             timeout: float | None = None, request_id: str | None = None) -> DeploymentChange:
        """PUT /admin/deployments/{name} (see TriserveClient.put_deployment)."""
        return await self._run(self._core.put_deployment_call(name, spec), timeout, request_id)

    async def delete_deployment(self, name: str, *, timeout: float | None = None,
                                request_id: str | None = None) -> DeploymentChange:
        """DELETE /admin/deployments/{name}."""
        return await self._run(self._core.delete_deployment_call(name), timeout, request_id)

    async def load_deployment(self, name: str, *, wait_s: float | None = None, timeout: float | None = None,
                              request_id: str | None = None) -> ResidencyChange:
        """POST /admin/deployments/{name}/load (on-demand deployments)."""
        return await self._run(self._core.load_deployment_call(name, wait_s), timeout, request_id)

    async def unload_deployment(self, name: str, *, timeout: float | None = None,
                                request_id: str | None = None) -> ResidencyChange:
        """POST /admin/deployments/{name}/unload (on-demand deployments)."""
        return await self._run(self._core.unload_deployment_call(name), timeout, request_id)

    # -- admin: rollouts ----------------------------------------------------------------------------------------------
    async def rollouts(self, *, timeout: float | None = None,
                       request_id: str | None = None) -> dict[str, SlotRouting]:
        """GET /admin/models."""
        return await self._run(self._core.rollouts_call(), timeout, request_id)

    async def promote(self, slot: str, ref: str, *, alias: str | None = "stable", timeout: float | None = None,
                      request_id: str | None = None) -> Promotion:
        """POST /admin/models/{slot}/promote."""
        return await self._run(self._core.promote_call(slot, ref, alias), timeout, request_id)

    async def rollback(self, slot: str, *, alias: str = "stable", timeout: float | None = None,
                       request_id: str | None = None) -> Promotion:
        """POST /admin/models/{slot}/rollback."""
        return await self._run(self._core.rollback_call(slot, alias), timeout, request_id)

    async def set_canary(self, slot: str, ref: str, weight: float, *, timeout: float | None = None,
                         request_id: str | None = None) -> SlotRouting:
        """POST /admin/models/{slot}/canary."""
        return await self._run(self._core.canary_call(slot, ref, weight), timeout, request_id)

    async def clear_canary(self, slot: str, *, timeout: float | None = None,
                           request_id: str | None = None) -> SlotRouting:
        """DELETE /admin/models/{slot}/canary."""
        return await self._run(self._core.canary_call(slot, None, None), timeout, request_id)

    async def set_shadow(self, slot: str, ref: str, *, timeout: float | None = None,
                         request_id: str | None = None) -> SlotRouting:
        """POST /admin/models/{slot}/shadow."""
        return await self._run(self._core.shadow_call(slot, ref), timeout, request_id)

    async def clear_shadow(self, slot: str, *, timeout: float | None = None,
                           request_id: str | None = None) -> SlotRouting:
        """DELETE /admin/models/{slot}/shadow."""
        return await self._run(self._core.shadow_call(slot, None), timeout, request_id)

    # -- Open Inference Protocol v2 over REST -------------------------------------------------------------------------
    async def oip_infer(self, model: str, inputs: InputsLike, *, version: str | None = None,
                        outputs: Sequence[str] | None = None, parameters: Mapping[str, Any] | None = None,
                        infer_id: str | None = None, binary_outputs: bool = False, timeout: float | None = None,
                        request_id: str | None = None) -> OipInferResponse:
        """POST /v2/models/{model}[/versions/{version}]/infer (see TriserveClient.oip_infer)."""
        call = self._core.oip_infer_call(model, inputs, version=version, outputs=outputs, parameters=parameters,
                                         infer_id=infer_id, binary_outputs=binary_outputs)
        return await self._run(call, timeout, request_id)

    async def oip_model_metadata(self, model: str, *, version: str | None = None, timeout: float | None = None,
                                 request_id: str | None = None) -> OipModelMetadata:
        """GET /v2/models/{model}[/versions/{version}]."""
        return await self._run(self._core.oip_model_metadata_call(model, version), timeout, request_id)

    async def oip_server_metadata(self, *, timeout: float | None = None,
                                  request_id: str | None = None) -> OipServerMetadata:
        """GET /v2."""
        return await self._run(self._core.oip_server_metadata_call(), timeout, request_id)

    async def oip_server_ready(self, *, timeout: float | None = 2.0) -> bool:
        """GET /v2/health/ready: True on 200, False otherwise or without answer."""
        return await self._probe("/v2/health/ready", timeout)

    async def oip_model_ready(self, model: str, *, version: str | None = None, timeout: float | None = 2.0) -> bool:
        """GET /v2/models/{model}[/versions/{version}]/ready: True on 200, False otherwise."""
        return await self._probe(self._core.oip_model_ready_path(model, version), timeout)

    # -- plumbing -----------------------------------------------------------------------------------------------------
    async def _probe(self, path: str, timeout: float | None) -> bool:
        try:
            return await self._run(self._core.probe_call(path), timeout, None)
        except TriserveError:
            return False

    async def _run(self, call: Call[T], timeout: float | None, request_id: str | None) -> T:
        core = self._core
        rid = request_id or new_request_id()
        deadline = core.deadline_of(timeout)
        policy = core.policy_of(call)
        async for attempt in tenacity.AsyncRetrying(**policy.tenacity_kwargs(deadline)):
            with attempt:
                n = attempt.retry_state.attempt_number
                try:
                    try:
                        response = await self._http.request(**core.attempt_args(call, rid, deadline))
                    except httpx.HTTPError as exc:
                        raise core.transport_error(exc, rid) from exc
                    return core.answer(call, response, rid)
                except TriserveError as exc:
                    core.annotate(exc, n, rid)  # on the error itself: its cause stays the failure it came from
                    raise
        raise AssertionError("unreachable: tenacity returns or reraises")  # pragma: no cover

    async def aclose(self) -> None:
        if self._own:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncTriserveClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
