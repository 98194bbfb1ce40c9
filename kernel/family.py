"""The family contract: what the transports, the gateway and the rollout machinery ask of a model family.

Learned from MLServer's MLModel (load/predict/metadata with settings injected) and KServe's Model
(preprocess/predict/postprocess): the same request lifecycle, but split so that every transport (REST, typed gRPC,
OIP v2) and every deployment of a family share one pipeline, and so that the runner never sees a task. A family
declares; the transports in services/protocols/ are generic adapters driven by the declarations:

- schemas: `request_model` (what typed gRPC, OIP and multipart uploads build from their fields, binary payloads as
  bytes), `response_model`, and `routes` (REST paths with their JSON body or form model);
- `pipeline(ctx, deployment)`: the request lifecycle for one deployment, one uniform `run(request, call)` (validate
  against the deployment's limits, preprocess per served model version, run through
  kernel/routing/inference.run_task, check outputs, postprocess, observe drift signals);
- `check_outputs(manifest, outputs)`: raise InvalidOutput for a model answer that must not reach a client;
- `agreement(manifest, served, shadow)`: how far a shadow version's raw output agrees with the served one (0..1);
- `tensor_items(pipeline, served, arrays, batch_cap)`: the raw tensor contract (a graph's own inputs -> runner
  items, validated against the model);
- tensor metadata: `oip_pipeline_inputs/outputs` (kernel/tensors.TensorMeta: request field / response reader),
  `oip_parameters` (request fields passed as OIP parameters), `oip_alias`; `grpc_method` names the typed RPC.

What stays outside a family on purpose: transport codecs, admission, breakers, batching, routing, rollouts, metrics.
Those key on deployment and slot names taken from configs/models.yaml.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
from pydantic import BaseModel

from kernel.tensors import TensorMeta

if TYPE_CHECKING:  # pragma: no cover
    from configs.deployments import Deployment
    from kernel.call import CallContext
    from kernel.context import ServingContext
    from kernel.routing.rollout import ServedModel
    from models.manifest import Manifest


@dataclass(frozen=True)
class RestRoute:
    """A REST endpoint of the family and the content type it accepts (the rest get 415 before the body is read).

    JSON routes take `body` as the request body; multipart routes take `body`'s fields as form fields and the
    uploaded files as the request field `files` (bytes), and build the family's `request_model` from both.
    """

    path: str
    content_type: str
    body: type[BaseModel]
    summary: str
    files: str = ""
    files_description: str = ""
    response: type[BaseModel] | None = None  # when not the family's response_model


class Pipeline(Protocol):
    """One deployment's request lifecycle (families/<name>/pipeline.py)."""

    limits: Any

    async def run(self, request: Any, call: CallContext) -> Any:
        """A request model (the REST body or `request_model`) -> the family's response model."""


class Family(ABC):
    """One model family. Subclasses are singletons registered in configs/families.py (FAMILIES)."""

    name: ClassVar[str]
    request_model: ClassVar[type[BaseModel]]  # built from transport fields (typed gRPC, OIP, multipart uploads)
    response_model: ClassVar[type[BaseModel]]
    routes: ClassVar[tuple[RestRoute, ...]]
    oip_pipeline_inputs: ClassVar[tuple[TensorMeta, ...]]
    oip_pipeline_outputs: ClassVar[tuple[TensorMeta, ...]]
    oip_parameters: ClassVar[tuple[str, ...]]  # request fields an OIP request passes as parameters
    oip_alias: ClassVar[str]  # the OIP model name of the family's default deployment ("detect", "classify", ...)
    grpc_method: ClassVar[str]  # the typed gRPC method ("Detect", ...): request/response messages of that name

    @abstractmethod
    def pipeline(self, ctx: ServingContext, deployment: Deployment) -> Pipeline:
        """The request lifecycle of one deployment (cached by the context per deployment)."""

    @abstractmethod
    def check_outputs(self, manifest: Manifest, outputs: list[np.ndarray]) -> None:
        """Raise kernel.errors.InvalidOutput when a model's raw outputs must not reach a client."""

    @abstractmethod
    def agreement(self, manifest: Manifest, served: np.ndarray, shadow: np.ndarray) -> float:
        """Agreement in [0, 1] of a shadow version's raw output with the served one (1 = identical)."""

    @abstractmethod
    def tensor_items(self, pipeline: Any, served: ServedModel, arrays: dict[str, np.ndarray],
                     batch_cap: int) -> list[np.ndarray]:
        """A graph's own input tensors (decoded, named) -> one runner item per row, validated against the model
        (kernel/tensors: check_batch, check_finite, bad_request)."""

    def oip_extra_parameters(self, response: Any) -> dict[str, Any]:
        """Response parameters beyond the common envelope (request id, served model, degraded, timings)."""
        return {}
