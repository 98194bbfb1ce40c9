"""A typed Python client for the triserve REST API, blocking and asyncio.

    from client import TriserveClient, AsyncTriserveClient, RetryPolicy, TriserveAPIError

    with TriserveClient("http://127.0.0.1:3000", timeout=5) as ts:
        ts.wait_ready()
        r = ts.classify(["cancel my reservation"], top_k=2, request_id="demo-1")
        r.request_id, r.results[0].label, r.results[0].truncated, r.timings.total_ms

Methods (the same on AsyncTriserveClient, awaited): classify, detect (bytes, paths or base64; JSON or multipart
upload), forecast, models, ready, live, wait_ready. Results are the service's own pydantic response models
(families/*/schemas.py); errors are TriserveAPIError (status, code, message, details, request_id, retry_after) or
TriserveTransportError. Retries: 429/503 honouring Retry-After with jitter, transport failures with exponential
backoff (tenacity; RetryPolicy). Deadlines: `timeout=` seconds, sent as X-Request-Timeout-Ms.
"""
from client._base import DEFAULT_URL, NO_RETRY, RetryPolicy
from client.aio import AsyncTriserveClient
from client.errors import TriserveAPIError, TriserveError, TriserveTimeoutError, TriserveTransportError
from client.models import (
    ClassifyResponse,
    DeploymentStatus,
    DetectResponse,
    ForecastResponse,
    ModelsListing,
    SlotStatus,
)
from client.sync import TriserveClient

__all__ = ["TriserveClient", "AsyncTriserveClient", "RetryPolicy", "NO_RETRY", "DEFAULT_URL", "TriserveError",
           "TriserveAPIError", "TriserveTransportError", "TriserveTimeoutError", "ClassifyResponse", "DetectResponse",
           "ForecastResponse", "ModelsListing", "DeploymentStatus", "SlotStatus"]
