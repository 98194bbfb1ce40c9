"""A typed Python client for the triserve REST API, blocking and asyncio (distribution `triserve-client`:
`pip install ./client`; it needs httpx, pydantic and tenacity, never the server's packages), and, as the optional
extra `pip install './client[grpc]'` (grpcio, protobuf), a typed client of its gRPC API.

    from triserve_client import TriserveClient, AsyncTriserveClient, RetryPolicy, TriserveAPIError

    with TriserveClient("http://127.0.0.1:3000", timeout=5) as ts:
        ts.wait_ready()
        r = ts.classify(["cancel my reservation"], top_k=2, request_id="demo-1")
        r.request_id, r.results[0].label, r.results[0].truncated, r.timings.total_ms

Methods (the same on AsyncTriserveClient, awaited):

- tasks: classify (text), classify_image, detect, pose and segment (images as bytes, paths or base64; JSON or
  multipart upload; masks come as COCO RLE: triserve_client.masks decodes them), forecast, forecast_panel (many series
  in one request), forecast_backtest; models, ready, live, wait_ready.
- admin, with an admin key (`api_key=`, sent as X-API-Key): the model repository - deployments, put_deployment,
  delete_deployment, load_deployment / unload_deployment (on-demand deployments); rollouts per slot ('<deployment>'
  or '<deployment>_fallback') - rollouts, promote, rollback, set_canary / clear_canary, set_shadow / clear_shadow.
- Open Inference Protocol v2 over REST: oip_infer (inputs as Python lists, nested or flat with a shape: OipInput; no
  numpy), oip_model_metadata, oip_server_metadata, oip_server_ready, oip_model_ready.

gRPC (triserve_client.grpc, imported only when used): TriserveGrpcClient / AsyncTriserveGrpcClient with classify,
classify_image, detect, pose, segment, forecast and forecast_panel, answering the same response models as REST.

Results are pydantic models (triserve_client.models, kept in step with the service's response models by
tests/client/test_schemas.py); errors are TriserveAPIError (status, code, message, details, request_id, retry_after)
or TriserveTransportError, over REST, OIP and gRPC alike. Retries: 429/503 honouring Retry-After with jitter,
transport failures with exponential backoff (tenacity; RetryPolicy); admin calls that change state retry a transport
failure only when the request cannot have been sent. Deadlines: `timeout=` seconds, sent as X-Request-Timeout-Ms.
"""
import importlib.metadata

from triserve_client._base import DEFAULT_URL, NO_RETRY, RetryPolicy
from triserve_client._oip import OipInput
from triserve_client.aio import AsyncTriserveClient
from triserve_client.backtest import BacktestOrigin, BacktestResponse
from triserve_client.errors import TriserveAPIError, TriserveError, TriserveTimeoutError, TriserveTransportError
from triserve_client.models import (
    ClassifyImageResponse,
    ClassifyResponse,
    Deployment,
    DeploymentChange,
    DeploymentSpec,
    DeploymentStatus,
    DetectResponse,
    ForecastResponse,
    MeasuredSplit,
    ModelRef,
    ModelRepository,
    ModelsListing,
    PanelForecastResponse,
    PoseResponse,
    Promotion,
    ResidencyChange,
    SegmentResponse,
    SlotRouting,
    SlotStatus,
)
from triserve_client.oip_models import OipInferResponse, OipModelMetadata, OipServerMetadata, OipTensor
from triserve_client.sync import TriserveClient

try:
    __version__ = importlib.metadata.version("triserve-client")
except importlib.metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["TriserveClient", "AsyncTriserveClient", "RetryPolicy", "NO_RETRY", "DEFAULT_URL", "TriserveError",
           "TriserveAPIError", "TriserveTransportError", "TriserveTimeoutError", "ClassifyResponse", "DetectResponse",
           "ClassifyImageResponse",
           "PoseResponse", "SegmentResponse", "ForecastResponse", "PanelForecastResponse", "ModelsListing",
           "BacktestResponse", "BacktestOrigin",
           "DeploymentStatus", "SlotStatus",
           "DeploymentSpec", "Deployment", "ModelRef", "ModelRepository", "DeploymentChange", "ResidencyChange",
           "SlotRouting", "MeasuredSplit", "Promotion",
           "OipInput", "OipInferResponse", "OipTensor", "OipModelMetadata", "OipServerMetadata", "__version__"]
