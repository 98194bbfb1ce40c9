"""Typed gRPC clients of the triserve.v1.Triserve service (an optional extra: `pip install 'triserve-client[grpc]'`,
which adds grpcio and protobuf; `import triserve_client` never needs them).

    from triserve_client.grpc import TriserveGrpcClient

    with TriserveGrpcClient("127.0.0.1:3001", timeout=5) as ts:
        r = ts.classify(["cancel my reservation"], top_k=2, request_id="demo-1")
        r.results[0].label, r.request_id          # the same ClassifyResponse as TriserveClient.classify

classify, classify_image, detect, pose, segment, forecast, forecast_panel and forecast_backtest take the arguments of
their REST counterparts (TriserveClient) and return the same pydantic models (ClassifyResponse, ClassifyImageResponse,
DetectResponse, PoseResponse, SegmentResponse, ForecastResponse, PanelForecastResponse, BacktestResponse): the
service runs the same pipeline for both and copies the REST answer field by field into the message
(services/protocols/grpc_typed.py).
AsyncTriserveGrpcClient is the asyncio twin (grpc.aio).
The stubs are the client's own copy (triserve_client/_proto, `python client/gen_protos.py`), kept identical to the
server's by tests/client/test_grpc.py.

Per call: `request_id=` (else a fresh one) goes as `x-request-id` metadata; `timeout=` (per client or per call,
seconds, retries included) is the gRPC deadline, the time left at each try; `api_key=` goes as `x-api-key`.
Errors are the REST ones: TriserveAPIError with the service's code, details, HTTP status and request id (from the
trailing metadata `triserve-error-code`, `triserve-error-details`, `triserve-http-status`, `x-request-id`), or
TriserveTransportError / TriserveTimeoutError when no answer came. Retries follow the client's RetryPolicy (429 and
503 as the service's RESOURCE_EXHAUSTED / UNAVAILABLE with `retry-after`; transport failures), as over REST.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import tenacity

from triserve_client._base import ImageLike, RetryPolicy, new_request_id
from triserve_client._forecast import Covariates, SeriesLike, Timestamp
from triserve_client._grpc_core import DEFAULT_TARGET, GrpcCore, M
from triserve_client.backtest import BacktestResponse
from triserve_client.errors import TriserveError
from triserve_client.models import (
    ClassifyImageResponse,
    ClassifyResponse,
    DetectResponse,
    ForecastResponse,
    PanelForecastResponse,
    PoseResponse,
    SegmentResponse,
)

try:
    import grpc
    import grpc.aio

    from triserve_client._proto import triserve_pb2_grpc
except ImportError as exc:  # grpcio / protobuf are the [grpc] extra
    raise ImportError("triserve_client.grpc needs grpcio and protobuf: pip install 'triserve-client[grpc]' "
                      f"({exc})") from exc

__all__ = ["TriserveGrpcClient", "AsyncTriserveGrpcClient", "DEFAULT_TARGET"]


class TriserveGrpcClient:
    """Blocking client of the typed gRPC API (see the module). `target`: host:port of the service's gRPC port
    (grpc.port, 3001 by default); `credentials`: grpc.ssl_channel_credentials(...) for TLS; `channel`: a channel of
    your own (used as is, not closed here); `options`: more channel options; `metadata`: sent with every call;
    `wait_for_ready=True`: a call with a deadline made while the service's port is closed (its only API worker
    starting again) waits for it within the deadline instead of failing at once with UNAVAILABLE; off by default, as
    in gRPC, because a call that cannot connect for good (a TLS mismatch, a wrong address) then ends as a timeout
    instead of saying why (GrpcCore.waits_for_ready)."""

    def __init__(self, target: str = DEFAULT_TARGET, *, api_key: str | None = None, timeout: float | None = None,
                 retry: RetryPolicy | None = None, metadata: Iterable[tuple[str, str]] | None = None,
                 credentials: Any = None, options: Sequence[tuple[str, Any]] | None = None, channel: Any = None,
                 wait_for_ready: bool = False):
        self.target = target
        self._core = GrpcCore(api_key=api_key, timeout=timeout, retry=retry, metadata=metadata,
                              wait_for_ready=wait_for_ready)
        self._own = channel is None
        if channel is None:
            opts = GrpcCore.channel_options(options)
            channel = (grpc.secure_channel(target, credentials, options=opts) if credentials is not None
                       else grpc.insecure_channel(target, options=opts))
        self._channel = channel
        self._stub = triserve_pb2_grpc.TriserveStub(channel)

    def classify(self, texts: str | Sequence[str], *, top_k: int | None = None, model: str | None = None,
                 deployment: str | None = None, timeout: float | None = None,
                 request_id: str | None = None) -> ClassifyResponse:
        """Triserve/Classify (as POST /v1/classify). `model`: 'auto' | 'primary' | 'fallback'."""
        request = self._core.classify_request(texts, top_k, model, deployment)
        return self._run(self._stub.Classify, request, ClassifyResponse, timeout, request_id)

    def detect(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None = None,
               iou_threshold: float | None = None, max_detections: int | None = None,
               class_aware: bool | None = None, model: str | None = None, deployment: str | None = None,
               timeout: float | None = None, request_id: str | None = None) -> DetectResponse:
        """Triserve/Detect (as POST /v1/detect). An image is raw bytes, a path or a base64 str / data: URL; it is
        sent as its encoded bytes."""
        request = self._core.detect_request(images, conf_threshold=conf_threshold, iou_threshold=iou_threshold,
                                            max_detections=max_detections, class_aware=class_aware, model=model,
                                            deployment=deployment)
        return self._run(self._stub.Detect, request, DetectResponse, timeout, request_id)

    def classify_image(self, images: ImageLike | Sequence[ImageLike], *, top_k: int | None = None,
                       model: str | None = None, deployment: str | None = None, timeout: float | None = None,
                       request_id: str | None = None) -> ClassifyImageResponse:
        """Triserve/ClassifyImage (as POST /v1/classify-image)."""
        request = self._core.classify_image_request(images, top_k=top_k, model=model, deployment=deployment)
        return self._run(self._stub.ClassifyImage, request, ClassifyImageResponse, timeout, request_id)

    def pose(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None = None,
             iou_threshold: float | None = None, max_detections: int | None = None, model: str | None = None,
             deployment: str | None = None, timeout: float | None = None,
             request_id: str | None = None) -> PoseResponse:
        """Triserve/Pose (as POST /v1/pose)."""
        request = self._core.pose_request(images, conf_threshold=conf_threshold, iou_threshold=iou_threshold,
                                          max_detections=max_detections, model=model, deployment=deployment)
        return self._run(self._stub.Pose, request, PoseResponse, timeout, request_id)

    def segment(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None = None,
                iou_threshold: float | None = None, max_detections: int | None = None,
                class_aware: bool | None = None, mask_format: str | None = None, model: str | None = None,
                deployment: str | None = None, timeout: float | None = None,
                request_id: str | None = None) -> SegmentResponse:
        """Triserve/Segment (as POST /v1/segment). Over gRPC `polygons` is never absent: [] when
        mask_format is 'rle' (REST: None)."""
        request = self._core.segment_request(images, conf_threshold=conf_threshold, iou_threshold=iou_threshold,
                                             max_detections=max_detections, class_aware=class_aware,
                                             mask_format=mask_format, model=model, deployment=deployment)
        return self._run(self._stub.Segment, request, SegmentResponse, timeout, request_id)

    def forecast(self, values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None = None,
                 start: Timestamp | None = None, frequency: str | None = None, horizon: int | None = None,
                 model: str | None = None, deployment: str | None = None, timeout: float | None = None,
                 request_id: str | None = None, covariates: Covariates | None = None,
                 future_covariates: Covariates | None = None,
                 calendar: Sequence[str] | None = None) -> ForecastResponse:
        """Triserve/Forecast (as POST /v1/forecast and TriserveClient.forecast). None/NaN values are missing
        points."""
        request = self._core.forecast_request(values, timestamps=timestamps, start=start, frequency=frequency,
                                              horizon=horizon, model=model, deployment=deployment,
                                              covariates=covariates, future_covariates=future_covariates,
                                              calendar=calendar)
        return self._run(self._stub.Forecast, request, ForecastResponse, timeout, request_id)

    def forecast_panel(self, series: Mapping[str, SeriesLike], *, start: Timestamp | None = None,
                       frequency: str | None = None, horizon: int | None = None, model: str | None = None,
                       deployment: str | None = None, calendar: Sequence[str] | None = None,
                       timeout: float | None = None, request_id: str | None = None) -> PanelForecastResponse:
        """Triserve/ForecastPanel (as POST /v1/forecast/panel and TriserveClient.forecast_panel)."""
        request = self._core.forecast_panel_request(series, start=start, frequency=frequency, horizon=horizon,
                                                    model=model, deployment=deployment, calendar=calendar)
        return self._run(self._stub.ForecastPanel, request, PanelForecastResponse, timeout, request_id)

    def forecast_backtest(self, values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None = None,
                          start: Timestamp | None = None, frequency: str | None = None, horizon: int | None = None,
                          origins: int | None = None, model: str | None = None, deployment: str | None = None,
                          covariates: Covariates | None = None, calendar: Sequence[str] | None = None,
                          timeout: float | None = None, request_id: str | None = None) -> BacktestResponse:
        """Triserve/ForecastBacktest (as POST /v1/forecast/backtest and TriserveClient.forecast_backtest)."""
        request = self._core.forecast_backtest_request(values, timestamps=timestamps, start=start, frequency=frequency,
                                                       horizon=horizon, origins=origins, model=model,
                                                       deployment=deployment, covariates=covariates, calendar=calendar)
        return self._run(self._stub.ForecastBacktest, request, BacktestResponse, timeout, request_id)

    def _run(self, method: Any, request: Any, model: type[M], timeout: float | None, request_id: str | None) -> M:
        core = self._core
        rid = request_id or new_request_id()
        deadline = core.deadline_of(timeout)
        for attempt in tenacity.Retrying(**core.retry.tenacity_kwargs(deadline)):
            with attempt:
                try:
                    left = core.time_left(deadline, rid)
                    try:
                        reply = method(request, timeout=left, metadata=core.call_metadata(rid),
                                       wait_for_ready=core.waits_for_ready(left))
                    except grpc.RpcError as exc:
                        raise core.error(exc, rid) from exc
                    return core.answer(reply, model)
                except TriserveError as exc:
                    core.annotate(exc, attempt.retry_state.attempt_number, rid)
                    raise
        raise AssertionError("unreachable: tenacity returns or reraises")  # pragma: no cover

    def close(self) -> None:
        if self._own:
            self._channel.close()

    def __enter__(self) -> TriserveGrpcClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncTriserveGrpcClient:
    """Asyncio client of the typed gRPC API (grpc.aio); the methods of TriserveGrpcClient, awaited. Make it inside
    the event loop that uses it."""

    def __init__(self, target: str = DEFAULT_TARGET, *, api_key: str | None = None, timeout: float | None = None,
                 retry: RetryPolicy | None = None, metadata: Iterable[tuple[str, str]] | None = None,
                 credentials: Any = None, options: Sequence[tuple[str, Any]] | None = None, channel: Any = None,
                 wait_for_ready: bool = False):
        self.target = target
        self._core = GrpcCore(api_key=api_key, timeout=timeout, retry=retry, metadata=metadata,
                              wait_for_ready=wait_for_ready)
        self._own = channel is None
        if channel is None:
            opts = GrpcCore.channel_options(options)
            channel = (grpc.aio.secure_channel(target, credentials, options=opts) if credentials is not None
                       else grpc.aio.insecure_channel(target, options=opts))
        self._channel = channel
        self._stub = triserve_pb2_grpc.TriserveStub(channel)

    async def classify(self, texts: str | Sequence[str], *, top_k: int | None = None, model: str | None = None,
                       deployment: str | None = None, timeout: float | None = None,
                       request_id: str | None = None) -> ClassifyResponse:
        """Triserve/Classify."""
        request = self._core.classify_request(texts, top_k, model, deployment)
        return await self._run(self._stub.Classify, request, ClassifyResponse, timeout, request_id)

    async def detect(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None = None,
                     iou_threshold: float | None = None, max_detections: int | None = None,
                     class_aware: bool | None = None, model: str | None = None, deployment: str | None = None,
                     timeout: float | None = None, request_id: str | None = None) -> DetectResponse:
        """Triserve/Detect."""
        request = self._core.detect_request(images, conf_threshold=conf_threshold, iou_threshold=iou_threshold,
                                            max_detections=max_detections, class_aware=class_aware, model=model,
                                            deployment=deployment)
        return await self._run(self._stub.Detect, request, DetectResponse, timeout, request_id)

    async def classify_image(self, images: ImageLike | Sequence[ImageLike], *, top_k: int | None = None,
                             model: str | None = None, deployment: str | None = None, timeout: float | None = None,
                             request_id: str | None = None) -> ClassifyImageResponse:
        """Triserve/ClassifyImage."""
        request = self._core.classify_image_request(images, top_k=top_k, model=model, deployment=deployment)
        return await self._run(self._stub.ClassifyImage, request, ClassifyImageResponse, timeout, request_id)

    async def pose(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None = None,
                   iou_threshold: float | None = None, max_detections: int | None = None, model: str | None = None,
                   deployment: str | None = None, timeout: float | None = None,
                   request_id: str | None = None) -> PoseResponse:
        """Triserve/Pose."""
        request = self._core.pose_request(images, conf_threshold=conf_threshold, iou_threshold=iou_threshold,
                                          max_detections=max_detections, model=model, deployment=deployment)
        return await self._run(self._stub.Pose, request, PoseResponse, timeout, request_id)

    async def segment(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None = None,
                      iou_threshold: float | None = None, max_detections: int | None = None,
                      class_aware: bool | None = None, mask_format: str | None = None, model: str | None = None,
                      deployment: str | None = None, timeout: float | None = None,
                      request_id: str | None = None) -> SegmentResponse:
        """Triserve/Segment."""
        request = self._core.segment_request(images, conf_threshold=conf_threshold, iou_threshold=iou_threshold,
                                             max_detections=max_detections, class_aware=class_aware,
                                             mask_format=mask_format, model=model, deployment=deployment)
        return await self._run(self._stub.Segment, request, SegmentResponse, timeout, request_id)

    async def forecast(self, values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None = None,
                       start: Timestamp | None = None, frequency: str | None = None, horizon: int | None = None,
                       model: str | None = None, deployment: str | None = None, timeout: float | None = None,
                       request_id: str | None = None, covariates: Covariates | None = None,
                       future_covariates: Covariates | None = None,
                       calendar: Sequence[str] | None = None) -> ForecastResponse:
        """Triserve/Forecast."""
        request = self._core.forecast_request(values, timestamps=timestamps, start=start, frequency=frequency,
                                              horizon=horizon, model=model, deployment=deployment,
                                              covariates=covariates, future_covariates=future_covariates,
                                              calendar=calendar)
        return await self._run(self._stub.Forecast, request, ForecastResponse, timeout, request_id)

    async def forecast_panel(self, series: Mapping[str, SeriesLike], *, start: Timestamp | None = None,
                             frequency: str | None = None, horizon: int | None = None, model: str | None = None,
                             deployment: str | None = None, calendar: Sequence[str] | None = None,
                             timeout: float | None = None, request_id: str | None = None) -> PanelForecastResponse:
        """Triserve/ForecastPanel."""
        request = self._core.forecast_panel_request(series, start=start, frequency=frequency, horizon=horizon,
                                                    model=model, deployment=deployment, calendar=calendar)
        return await self._run(self._stub.ForecastPanel, request, PanelForecastResponse, timeout, request_id)

    async def forecast_backtest(self, values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None = None,
                                start: Timestamp | None = None, frequency: str | None = None,
                                horizon: int | None = None, origins: int | None = None, model: str | None = None,
                                deployment: str | None = None, covariates: Covariates | None = None,
                                calendar: Sequence[str] | None = None, timeout: float | None = None,
                                request_id: str | None = None) -> BacktestResponse:
        """Triserve/ForecastBacktest (as TriserveGrpcClient.forecast_backtest)."""
        request = self._core.forecast_backtest_request(values, timestamps=timestamps, start=start, frequency=frequency,
                                                       horizon=horizon, origins=origins, model=model,
                                                       deployment=deployment, covariates=covariates, calendar=calendar)
        return await self._run(self._stub.ForecastBacktest, request, BacktestResponse, timeout, request_id)

    async def _run(self, method: Any, request: Any, model: type[M], timeout: float | None,
                   request_id: str | None) -> M:
        core = self._core
        rid = request_id or new_request_id()
        deadline = core.deadline_of(timeout)
        async for attempt in tenacity.AsyncRetrying(**core.retry.tenacity_kwargs(deadline)):
            with attempt:
                try:
                    left = core.time_left(deadline, rid)
                    try:
                        reply = await method(request, timeout=left, metadata=core.call_metadata(rid),
                                             wait_for_ready=core.waits_for_ready(left))
                    except grpc.RpcError as exc:
                        raise core.error(exc, rid) from exc
                    return core.answer(reply, model)
                except TriserveError as exc:
                    core.annotate(exc, attempt.retry_state.attempt_number, rid)
                    raise
        raise AssertionError("unreachable: tenacity returns or reraises")  # pragma: no cover

    async def aclose(self) -> None:
        if self._own:
            await self._channel.close()

    async def __aenter__(self) -> AsyncTriserveGrpcClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
