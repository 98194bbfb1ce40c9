"""A typed Python client for the triserve REST API, blocking and asyncio (distribution `triserve-client`:
`pip install ./client`; it needs httpx, pydantic and tenacity, never the server's packages).

    from triserve_client import TriserveClient, AsyncTriserveClient, RetryPolicy, TriserveAPIError

    with TriserveClient("http://127.0.0.1:3000", timeout=5) as ts:
        ts.wait_ready()
        r = ts.classify(["cancel my reservation"], top_k=2, request_id="demo-1")
        r.request_id, r.results[0].label, r.results[0].truncated, r.timings.total_ms

Methods (the same on AsyncTriserveClient, awaited): classify, detect (bytes, paths or base64; JSON or multipart
upload), forecast, models, ready, live, wait_ready. Results are pydantic models (triserve_client.models, kept in step
with the service's response models by tests/client/test_schemas.py); errors are TriserveAPIError (status, code,
message, details, request_id, retry_after) or TriserveTransportError. Retries: 429/503 honouring Retry-After with
jitter, transport failures with exponential backoff (tenacity; RetryPolicy). Deadlines: `timeout=` seconds, sent as
X-Request-Timeout-Ms.
"""
from triserve_client._base import DEFAULT_URL, NO_RETRY, RetryPolicy
from triserve_client.aio import AsyncTriserveClient
from triserve_client.errors import TriserveAPIError, TriserveError, TriserveTimeoutError, TriserveTransportError
from triserve_client.models import (
    ClassifyResponse,
    DeploymentStatus,
    DetectResponse,
    ForecastResponse,
    ModelsListing,
    SlotStatus,
)
from triserve_client.sync import TriserveClient

__all__ = ["TriserveClient", "AsyncTriserveClient", "RetryPolicy", "NO_RETRY", "DEFAULT_URL", "TriserveError",
           "TriserveAPIError", "TriserveTransportError", "TriserveTimeoutError", "ClassifyResponse", "DetectResponse",
           "ForecastResponse", "ModelsListing", "DeploymentStatus", "SlotStatus"]
