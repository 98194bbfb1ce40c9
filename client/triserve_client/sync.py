"""TriserveClient: the blocking client (httpx.Client, tenacity.Retrying)."""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import httpx
import tenacity

from triserve_client._base import DEFAULT_URL, Call, ClientCore, ImageLike, RetryPolicy, Timestamp, new_request_id
from triserve_client.errors import TriserveError, TriserveTimeoutError
from triserve_client.models import ClassifyResponse, DetectResponse, ForecastResponse, ModelsListing

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
    (a passed http_client is used as is and not closed here).
    """

    def __init__(self, base_url: str = DEFAULT_URL, *, api_key: str | None = None, timeout: float | None = None,
                 retry: RetryPolicy | None = None, headers: Mapping[str, str] | None = None,
                 transport: httpx.BaseTransport | None = None, http_client: httpx.Client | None = None,
                 **options: Any):
        self._core = ClientCore(base_url, api_key=api_key, timeout=timeout, retry=retry, headers=headers, **options)
        self._own = http_client is None
        self._http = http_client or httpx.Client(transport=transport, timeout=self._core.http_timeout)

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

    def forecast(self, values: Iterable[float | None], *, timestamps: Iterable[Timestamp] | None = None,
                 start: Timestamp | None = None, frequency: str | None = None, horizon: int | None = None,
                 model: str | None = None, deployment: str | None = None, timeout: float | None = None,
                 request_id: str | None = None) -> ForecastResponse:
        """POST /v1/forecast. `values` may hold None/NaN for missing points; give `timestamps` (one per value;
        frequency inferred when omitted) or `start` + `frequency`."""
        call = self._core.forecast_call(values, timestamps=timestamps, start=start, frequency=frequency,
                                        horizon=horizon, model=model, deployment=deployment)
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
        policy = call.retry or core.retry
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
