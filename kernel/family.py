"""The family contract: what the gateway, the protocols and the rollout machinery ask of a model family.

Learned from MLServer's MLModel (load/predict/metadata with settings injected) and KServe's Model
(preprocess/predict/postprocess): the same request lifecycle, but split so that every transport (REST, typed gRPC,
OIP v2) and every deployment of a family share one pipeline, and so that the runner never sees a task:

- `router`: the family's REST endpoints (FastAPI), which resolve the deployment and call the pipeline;
- `pipeline(ctx, deployment)`: the request lifecycle for one deployment (validate against the deployment's limits,
  preprocess per served model version, run through kernel/routing/inference.run_task, check outputs, postprocess,
  observe drift signals);
- `check_outputs(manifest, outputs)`: raise InvalidOutput for a model answer that must not reach a client;
- `agreement(manifest, served, shadow)`: how far a shadow version's raw output agrees with the served one (0..1);
- `oip`: the Open Inference Protocol adapter (the pipeline as an OIP model, and the raw tensor contract);
- `grpc`: the typed gRPC method of the family (services/protocols/protos/triserve.proto);
- `importers`: the `python -m scripts.importer` subcommands that bring a user's model into the registry.

What stays outside a family on purpose: transport codecs, admission, breakers, batching, routing, rollouts, metrics.
Those key on deployment and slot names taken from configs/models.yaml.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from fastapi import APIRouter

    from configs.deployments import Deployment
    from kernel.context import ServingContext
    from kernel.routing.rollout import ServedModel
    from models.manifest import Manifest


@dataclass(frozen=True)
class TensorMeta:
    """An OIP tensor's name, datatype and shape (-1 = any); inputs may be optional or accept other datatypes."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    optional: bool = False
    also: tuple[str, ...] = ()  # further accepted datatypes (e.g. FP64 where FP32 is declared)


@dataclass(frozen=True)
class RestRoute:
    """A REST endpoint of the family and the content type it accepts (the rest get 415 before the body is read)."""

    path: str
    content_type: str


class Family(ABC):
    """One model family. Subclasses are singletons registered in families/__init__.py (FAMILIES)."""

    name: ClassVar[str]
    routes: ClassVar[tuple[RestRoute, ...]]
    oip_pipeline_inputs: ClassVar[tuple[TensorMeta, ...]]
    oip_pipeline_outputs: ClassVar[tuple[TensorMeta, ...]]
    oip_alias: ClassVar[str]  # the OIP model name of the family's default deployment ("detect", "classify", ...)
    grpc_method: ClassVar[str]  # the typed gRPC method ("Detect", ...)
    importers: ClassVar[tuple[str, ...]] = ()  # scripts.importer subcommands

    @property
    @abstractmethod
    def router(self) -> APIRouter:
        """The family's REST endpoints."""

    @abstractmethod
    def pipeline(self, ctx: ServingContext, deployment: Deployment) -> Any:
        """The request lifecycle of one deployment (cached by the context per deployment)."""

    @abstractmethod
    def check_outputs(self, manifest: Manifest, outputs: list[np.ndarray]) -> None:
        """Raise kernel.errors.InvalidOutput when a model's raw outputs must not reach a client."""

    @abstractmethod
    def agreement(self, manifest: Manifest, served: np.ndarray, shadow: np.ndarray) -> float:
        """Agreement in [0, 1] of a shadow version's raw output with the served one (1 = identical)."""

    @abstractmethod
    def oip_tensor_items(self, ctx: ServingContext, deployment: Deployment, served: ServedModel,
                         tensors: dict[str, Any], batch_cap: int) -> list[np.ndarray]:
        """OIP tensor-model inputs (decoded, named) -> one runner item per row, validated against the model."""

    @abstractmethod
    async def oip_infer(self, ctx: ServingContext, deployment: Deployment, inputs: dict[str, Any],
                        parameters: dict[str, Any], call: Any) -> tuple[list[Any], Any]:
        """The pipeline as an OIP model: decoded input tensors + request parameters -> (output tensors, the REST
        response model the outputs came from)."""

    def oip_extra_parameters(self, response: Any) -> dict[str, Any]:
        """Response parameters beyond the common envelope (request id, served model, degraded, timings)."""
        return {}

    @abstractmethod
    def grpc_request(self, message: Any) -> Any:
        """The typed gRPC request message -> the REST request model (the same validation)."""

    @abstractmethod
    async def handle(self, ctx: ServingContext, request: Any, call: Any) -> Any:
        """Run a REST request model through the deployment it names (or the family default)."""
