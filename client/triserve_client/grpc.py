"""Typed gRPC clients of the triserve.v1.Triserve service (an optional extra: `pip install 'triserve-client[grpc]'`,
which adds grpcio and protobuf; `import triserve_client` never needs them).

    from triserve_client.grpc import TriserveGrpcClient

    with TriserveGrpcClient("127.0.0.1:3001", timeout=5) as ts:
        r = ts.classify(["cancel my reservation"], top_k=2, request_id="demo-1")
        r.results[0].label, r.request_id          # the same ClassifyResponse as TriserveClient.classify

classify, classify_image, detect, pose, segment, forecast and forecast_panel take the arguments of their REST
counterparts (TriserveClient) and return the same pydantic models (ClassifyResponse, ClassifyImageResponse,
DetectResponse, PoseResponse, SegmentResponse, ForecastResponse, PanelForecastResponse): the service runs the same
pipeline for both and copies the REST answer field by field into the message (services/protocols/grpc_typed.py).
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

import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import tenacity
from pydantic import BaseModel

from triserve_client._base import (
    ImageLike,
    RetryPolicy,
    _is_one_image,
    image_bytes,
    new_request_id,
)
from triserve_client._forecast import Covariates, SeriesLike, Timestamp, forecast_body, panel_body
from triserve_client.errors import (
    TriserveAPIError,
    TriserveError,
    TriserveTimeoutError,
    TriserveTransportError,
    parse_retry_after,
)
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
    from google.protobuf import json_format

    from triserve_client._proto import triserve_pb2, triserve_pb2_grpc
except ImportError as exc:  # grpcio / protobuf are the [grpc] extra
    raise ImportError("triserve_client.grpc needs grpcio and protobuf: pip install 'triserve-client[grpc]' "
                      f"({exc})") from exc

__all__ = ["TriserveGrpcClient", "AsyncTriserveGrpcClient", "DEFAULT_TARGET"]

M = TypeVar("M", bound=BaseModel)

DEFAULT_TARGET = "127.0.0.1:3001"  # the service's grpc.port default
MAX_MESSAGE_BYTES = 64 * 2**20  # the service's grpc.max_message_bytes default
REQUEST_ID_KEY = "x-request-id"
API_KEY_KEY = "x-api-key"
ERROR_CODE_KEY = "triserve-error-code"
ERROR_DETAILS_KEY = "triserve-error-details"
HTTP_STATUS_KEY = "triserve-http-status"
_CHOICES = {"auto": triserve_pb2.MODEL_CHOICE_AUTO, "primary": triserve_pb2.MODEL_CHOICE_PRIMARY,
            "fallback": triserve_pb2.MODEL_CHOICE_FALLBACK}
# a status without the service's error metadata (a proxy's, the channel's own) -> the REST status it stands for
_HTTP_BY_GRPC = {"INVALID_ARGUMENT": 400, "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403, "NOT_FOUND": 404,
                 "RESOURCE_EXHAUSTED": 429, "UNIMPLEMENTED": 501, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504}


class GrpcCore:
    """Configuration, request building, answer reading and the error mapping shared by both gRPC clients."""

    def __init__(self, *, api_key: str | None, timeout: float | None, retry: RetryPolicy | None,
                 metadata: Iterable[tuple[str, str]] | None):
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.metadata = [(k.lower(), v) for k, v in metadata or ()]
        if api_key:
            self.metadata.append((API_KEY_KEY, api_key))

    @staticmethod
    def channel_options(options: Sequence[tuple[str, Any]] | None) -> list[tuple[str, Any]]:
        return [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES), *(options or ())]

    # -- per call ---------------------------------------------------------------------------------------------------
    def call_metadata(self, request_id: str) -> tuple[tuple[str, str], ...]:
        return (*self.metadata, (REQUEST_ID_KEY, request_id))

    def deadline_of(self, timeout: float | None) -> float | None:
        budget = self.timeout if timeout is None else timeout
        if budget is None:
            return None
        if budget <= 0:
            raise ValueError("timeout must be positive (seconds)")
        return time.monotonic() + budget

    @staticmethod
    def time_left(deadline: float | None, request_id: str) -> float | None:
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise TriserveTimeoutError("the call's deadline passed before the request was sent", request_id)
        return left

    @staticmethod
    def error(exc: Any, request_id: str) -> TriserveError:
        """A failed RPC (grpc.RpcError, which is also a grpc.Call) -> the client's error."""
        code = exc.code()
        name = getattr(code, "name", str(code))
        message = exc.details() or name
        md = {k: v for k, v in (exc.trailing_metadata() or ()) if isinstance(v, str)}
        rid = md.get(REQUEST_ID_KEY) or request_id
        err: TriserveError
        if ERROR_CODE_KEY in md:  # the service's own error
            api_code = md[ERROR_CODE_KEY]
            try:
                status = int(md.get(HTTP_STATUS_KEY, ""))
            except ValueError:
                status = _HTTP_BY_GRPC.get(name, 500)
            details = None
            if ERROR_DETAILS_KEY in md:
                try:
                    details = json.loads(md[ERROR_DETAILS_KEY])
                except ValueError:
                    details = md[ERROR_DETAILS_KEY]
            if message.startswith(f"{api_code}: "):
                message = message[len(api_code) + 2:]
            err = TriserveAPIError(status, api_code, message, details, rid, parse_retry_after(md.get("retry-after")))
        elif name == "DEADLINE_EXCEEDED":
            err = TriserveTimeoutError(f"gRPC {name}: {message}", rid)
        elif name == "UNAVAILABLE":  # connection refused or dropped: no answer
            err = TriserveTransportError(f"gRPC {name}: {message}", rid)
        else:
            err = TriserveAPIError(_HTTP_BY_GRPC.get(name, 500), f"grpc_{name.lower()}", message, None, rid)
        err.__cause__ = exc
        return err

    @staticmethod
    def annotate(exc: TriserveError, attempts: int, request_id: str) -> None:
        exc.attempts = attempts
        if exc.request_id is None:
            exc.request_id = request_id

    @staticmethod
    def answer(message: Any, model: type[M]) -> M:
        """A response message -> the REST response model (proto3 fields without presence printed with their
        defaults, unset optional ones left out: None)."""
        doc = json_format.MessageToDict(message, preserving_proto_field_name=True,
                                        always_print_fields_with_no_presence=True)
        return model.model_validate(doc)

    # -- request builders ---------------------------------------------------------------------------------------------
    @staticmethod
    def _choice(model: str | None) -> triserve_pb2.ModelChoice:
        if model is None:
            return triserve_pb2.MODEL_CHOICE_AUTO
        try:
            return _CHOICES[model]
        except KeyError:
            raise ValueError(f"model is one of {sorted(_CHOICES)}, not {model!r}") from None

    def classify_request(self, texts: str | Sequence[str], top_k: int | None, model: str | None,
                         deployment: str | None) -> Any:
        if isinstance(texts, str):
            texts = [texts]
        return triserve_pb2.ClassifyRequest(texts=list(texts), top_k=top_k, model=self._choice(model),
                                            deployment=deployment)

    def detect_request(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None,
                       iou_threshold: float | None, max_detections: int | None, class_aware: bool | None,
                       model: str | None, deployment: str | None) -> Any:
        items = [images] if _is_one_image(images) else list(images)
        return triserve_pb2.DetectRequest(images=[image_bytes(im)[1] for im in items], conf_threshold=conf_threshold,
                                          iou_threshold=iou_threshold, max_detections=max_detections,
                                          class_aware=class_aware, model=self._choice(model), deployment=deployment)

    def classify_image_request(self, images: ImageLike | Sequence[ImageLike], *, top_k: int | None,
                               model: str | None, deployment: str | None) -> Any:
        items = [images] if _is_one_image(images) else list(images)
        return triserve_pb2.ClassifyImageRequest(images=[image_bytes(im)[1] for im in items], top_k=top_k,
                                                 model=self._choice(model), deployment=deployment)

    def pose_request(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None,
                     iou_threshold: float | None, max_detections: int | None, model: str | None,
                     deployment: str | None) -> Any:
        items = [images] if _is_one_image(images) else list(images)
        return triserve_pb2.PoseRequest(images=[image_bytes(im)[1] for im in items], conf_threshold=conf_threshold,
                                        iou_threshold=iou_threshold, max_detections=max_detections,
                                        model=self._choice(model), deployment=deployment)

    def segment_request(self, images: ImageLike | Sequence[ImageLike], *, conf_threshold: float | None,
                        iou_threshold: float | None, max_detections: int | None, class_aware: bool | None,
                        mask_format: str | None, model: str | None, deployment: str | None) -> Any:
        items = [images] if _is_one_image(images) else list(images)
        return triserve_pb2.SegmentRequest(images=[image_bytes(im)[1] for im in items], conf_threshold=conf_threshold,
                                           iou_threshold=iou_threshold, max_detections=max_detections,
                                           class_aware=class_aware, mask_format=mask_format,
                                           model=self._choice(model), deployment=deployment)

    @staticmethod
    def _series(body: dict[str, Any]) -> dict[str, Any]:
        """A series' JSON fields -> its message fields: None -> NaN (missing), covariates as Doubles."""
        out = {**body, "values": [math.nan if v is None else v for v in body["values"]]}
        for key in ("covariates", "future_covariates"):
            if key in out:
                out[key] = {k: triserve_pb2.Doubles(values=[math.nan if v is None else v for v in vs])
                            for k, vs in out[key].items()}
        return out

    def forecast_request(self, values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None,
                         start: Timestamp | None, frequency: str | None, horizon: int | None, model: str | None,
                         deployment: str | None, covariates: Covariates | None,
                         future_covariates: Covariates | None, calendar: Sequence[str] | None) -> Any:
        body = forecast_body(values, timestamps=timestamps, start=start, frequency=frequency, horizon=horizon,
                             model=None, deployment=deployment, covariates=covariates,
                             future_covariates=future_covariates, calendar=calendar)
        return triserve_pb2.ForecastRequest(**self._series(body), model=self._choice(model))

    def forecast_panel_request(self, series: Mapping[str, SeriesLike], *, start: Timestamp | None,
                               frequency: str | None, horizon: int | None, model: str | None,
                               deployment: str | None, calendar: Sequence[str] | None) -> Any:
        body = panel_body(series, start=start, frequency=frequency, horizon=horizon, model=None,
                          deployment=deployment, calendar=calendar)
        if any("static" in s for s in body["series"]):
            raise ValueError("static categoricals travel over REST only (TriserveClient.forecast_panel): the typed "
                             "gRPC SeriesInput has no field for them")
        inputs = [triserve_pb2.SeriesInput(**self._series(s)) for s in body.pop("series")]
        return triserve_pb2.ForecastPanelRequest(series=inputs, model=self._choice(model), **body)


class TriserveGrpcClient:
    """Blocking client of the typed gRPC API (see the module). `target`: host:port of the service's gRPC port
    (grpc.port, 3001 by default); `credentials`: grpc.ssl_channel_credentials(...) for TLS; `channel`: a channel of
    your own (used as is, not closed here); `options`: more channel options; `metadata`: sent with every call."""

    def __init__(self, target: str = DEFAULT_TARGET, *, api_key: str | None = None, timeout: float | None = None,
                 retry: RetryPolicy | None = None, metadata: Iterable[tuple[str, str]] | None = None,
                 credentials: Any = None, options: Sequence[tuple[str, Any]] | None = None, channel: Any = None):
        self.target = target
        self._core = GrpcCore(api_key=api_key, timeout=timeout, retry=retry, metadata=metadata)
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

    def _run(self, method: Any, request: Any, model: type[M], timeout: float | None, request_id: str | None) -> M:
        core = self._core
        rid = request_id or new_request_id()
        deadline = core.deadline_of(timeout)
        for attempt in tenacity.Retrying(**core.retry.tenacity_kwargs(deadline)):
            with attempt:
                try:
                    left = core.time_left(deadline, rid)
                    try:
                        reply = method(request, timeout=left, metadata=core.call_metadata(rid))
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
                 credentials: Any = None, options: Sequence[tuple[str, Any]] | None = None, channel: Any = None):
        self.target = target
        self._core = GrpcCore(api_key=api_key, timeout=timeout, retry=retry, metadata=metadata)
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
                        reply = await method(request, timeout=left, metadata=core.call_metadata(rid))
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
