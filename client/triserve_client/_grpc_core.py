"""What the blocking and the asyncio gRPC clients (triserve_client.grpc) share: request messages built from the REST
bodies, answers read back into the REST response models, errors mapped to the REST ones, channel options, metadata."""
from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from triserve_client._base import (
    ImageLike,
    RetryPolicy,
    _is_one_image,
    image_bytes,
)
from triserve_client._forecast import Covariates, SeriesLike, Timestamp, forecast_body, panel_body
from triserve_client.errors import (
    TriserveAPIError,
    TriserveError,
    TriserveTimeoutError,
    TriserveTransportError,
    parse_retry_after,
)

try:
    from google.protobuf import json_format

    from triserve_client._proto import triserve_pb2
except ImportError as exc:  # grpcio / protobuf are the [grpc] extra
    raise ImportError("triserve_client.grpc needs grpcio and protobuf: pip install 'triserve-client[grpc]' "
                      f"({exc})") from exc

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
                 metadata: Iterable[tuple[str, str]] | None, wait_for_ready: bool = False):
        self.timeout = timeout
        self.wait_for_ready = wait_for_ready
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

    def waits_for_ready(self, left: float | None) -> bool | None:
        """gRPC's wait-for-ready, when the client asks for it, for a call with a deadline: sent while the service's
        port is closed (its only API worker starting again), the call waits for the port within its deadline, as a
        REST request waits in the listen backlog, instead of failing at once with UNAVAILABLE. Never without a
        deadline: the call would wait for a service that is gone for good."""
        return True if self.wait_for_ready and left is not None else None

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
        return model.model_validate(_null_for_nan(doc))

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
        inputs = [triserve_pb2.SeriesInput(**self._series(s)) for s in body.pop("series")]
        return triserve_pb2.ForecastPanelRequest(series=inputs, model=self._choice(model), **body)

    def forecast_backtest_request(self, values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None,
                                  start: Timestamp | None, frequency: str | None, horizon: int | None,
                                  origins: int | None, model: str | None, deployment: str | None,
                                  covariates: Covariates | None, calendar: Sequence[str] | None) -> Any:
        body = forecast_body(values, timestamps=timestamps, start=start, frequency=frequency, horizon=horizon,
                             model=None, deployment=deployment, covariates=covariates, future_covariates=None,
                             calendar=calendar)
        request = triserve_pb2.ForecastBacktestRequest(**self._series(body), model=self._choice(model))
        if origins is not None:
            request.origins = origins
        return request


def _null_for_nan(value: Any) -> Any:
    """NaN inside a list (MessageToDict writes it "NaN") -> None, as REST answers it: a repeated double has no null
    (services/protocols/grpc_typed.to_message sends NaN for it)."""
    if isinstance(value, dict):
        return {k: _null_for_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [None if v == "NaN" else _null_for_nan(v) for v in value]
    return value
