"""The family contract: what the kernel's request lifecycle, the transports and the rollout machinery ask of a model
family.

Learned from KServe's Model (preprocess/predict/postprocess run by the server) and MLServer's MLModel (load/predict
with settings injected): the kernel runs every request's lifecycle once (kernel/lifecycle.py: validate, admission,
bind, runner call with fallback/canary/shadow, respond, metrics, finish) and a family fills three hooks, each given a
DeploymentView (the deployment's name and limits, never the whole serving context):

- `validate(view, request)`: the request checked against the deployment's limits and decoded, one entry per item;
  a 4xx here never reaches the runner;
- `items(view, work, model)`: the runner items of the work for one served version (sizes may differ between
  primary and fallback), plus what `respond` needs of them;
- `respond(view, request, work, answers)`: the family's fields of the response (the kernel adds request id,
  deployment, model, degraded, timings);
- optional: `keep(view, request)` (what of each output the respond hook reads, so the runner cuts the rest) and
  `parts(view, work)` (work too large for one runner call, answered in several).

One declaration, `api` (FamilyApi), drives the generic transports in services/protocols/: the request model (built
by typed gRPC, OIP and multipart uploads from their fields, binary payloads as bytes), the response model, the REST
routes, the typed gRPC method and the family on OIP (OipSurface: its pipeline tensors, parameters and model name,
and the hooks for a graph's own tensors; a route may add its own OIP model, RestRoute.oip). Two more hooks serve
the rollout machinery: `check_outputs` (refuse a model answer that must not reach a client) and `agreement` (how far
a shadow's raw output agrees with the served one).

So a family defines at most eight members: `name`, `api`, the three request hooks, `check_outputs`, `agreement`,
and one of the optional `keep`/`parts` (tests/kernel/test_family.py counts them for every registered family).

What stays outside a family on purpose: transport codecs, admission, breakers, batching, routing, rollouts, metrics.
Those key on deployment and slot names taken from configs/models.yaml.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel

from triserve.kernel.served import RunnerResult, ServedModel
from triserve.kernel.tensors import TensorMeta
from triserve.models.manifest import Manifest


@dataclass(frozen=True)
class RestRoute:
    """A REST endpoint of the family and the content type it accepts (the rest get 415 before the body is read).

    JSON routes take `body` as the request body; multipart routes take `body`'s fields as form fields and the
    uploaded files as the request field `files` (bytes), and build the family's `request_model` from both.
    A JSON route other than the family's main one may name its own typed gRPC method (`grpc`): messages
    `<grpc>Request` / `<grpc>Response` with the fields of `body` / `response`; and be an OIP model of its own
    (`oip`: its tensors and parameters, answered under `oip.alias` for the family's default deployment and as
    `<deployment>.<last path segment>` for every deployment, e.g. forecast-panel and forecast.panel).
    """

    path: str
    content_type: str
    body: type[BaseModel]
    summary: str
    files: str = ""
    files_description: str = ""
    response: type[BaseModel] | None = None  # when not the family's response_model
    grpc: str = ""  # a typed gRPC method for a JSON route beyond the family's grpc_method ("ForecastPanel")
    oip: OipSurface | None = None  # the route as an OIP pipeline model of its own (a JSON route only)


@dataclass(frozen=True)
class DeploymentView:
    """What a family's hooks may know of the deployment they serve (built by kernel/context.ServingContext)."""

    name: str
    limits: Any  # the family's typed Limits, with the deployment's overrides applied
    primary: Callable[[], ServedModel]  # the version the deployment's primary serves now (its contract)
    batch_limit: Callable[[], int]  # the most items one runner call of the primary takes
    observe: Callable[[str, str, Sequence[float]], None]  # (model, signal, values): a model-quality signal


@dataclass
class Answer:
    """One runner call's outcome as `respond` reads it: the part of the work it answered, the runner's result (the
    served version, outputs, degraded or not) and what `items` kept for that version."""

    part: Any
    result: RunnerResult
    state: Any


@dataclass(frozen=True)
class OipSurface(ABC):
    """The family on the Open Inference Protocol v2 (services/protocols/oip.py): the tensors of its pipeline model
    (kernel/tensors.TensorMeta), the request fields an OIP request passes as parameters, the OIP model name of the
    family's default deployment, and how a graph's own input tensors become runner items (raw tensor models)."""

    alias: str  # "detect", "classify", ...
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    parameters: tuple[str, ...]

    @abstractmethod
    def tensor_items(self, view: DeploymentView, served: ServedModel, arrays: dict[str, np.ndarray],
                     batch_cap: int) -> list[np.ndarray]:
        """A graph's own input tensors (decoded, named) -> one runner item per row, validated against the model
        (kernel/tensors: check_batch, check_finite, bad_request)."""

    def request_fields(self, fields: dict[str, Any], arrays: dict[str, np.ndarray],
                       parameters: dict[str, Any]) -> dict[str, Any]:
        """The request fields of an OIP pipeline request, for a family whose fields are more than one flat tensor or
        parameter each (`fields`: the declared inputs flattened and `parameters`' fields; `arrays`: the input tensors
        by name, with their shapes; `parameters`: all the request's parameters)."""
        return fields

    def extra_parameters(self, response: Any) -> dict[str, Any]:
        """Response parameters beyond the common envelope (request id, served model, degraded, timings)."""
        return {}


@dataclass(frozen=True)
class FamilyApi:
    """What the transports serve of a family: the request model (what typed gRPC, OIP and multipart uploads build
    from their fields), the response model, the REST routes, the typed gRPC method (request/response messages of
    that name) and the family on OIP."""

    request_model: type[BaseModel]
    response_model: type[BaseModel]
    routes: tuple[RestRoute, ...]
    grpc_method: str  # "Detect", ...
    oip: OipSurface


class Family(ABC):
    """One model family. Subclasses are singletons registered in configs/families.py (FAMILIES)."""

    name: ClassVar[str]
    api: ClassVar[FamilyApi]

    @abstractmethod
    def validate(self, view: DeploymentView, request: Any) -> Sequence[Any]:
        """The request checked against the deployment's limits and decoded: the work, one entry per item (images,
        texts, series); raise triserve.kernel.errors.ApiError (4xx) for what must not reach the runner."""

    @abstractmethod
    def items(self, view: DeploymentView, work: Any, model: ServedModel) -> tuple[list[np.ndarray], Any]:
        """The runner items of `work` for one served version, and what `respond` needs of them (Answer.state)."""

    @abstractmethod
    def respond(self, view: DeploymentView, request: Any, work: Any, answers: list[Answer]) -> dict[str, Any]:
        """The family's fields of the response; the kernel adds the common envelope
        (triserve.kernel.schemas.ServedBy)."""

    def keep(self, view: DeploymentView, request: Any) -> dict | None:
        """What of each output `respond` will read, for the family's runtime to cut the rest at the runner."""
        return None

    def parts(self, view: DeploymentView, work: Sequence[Any]) -> list[Any]:
        """The work split into runner calls made one after the other (each admitted like a request)."""
        return [work]

    @abstractmethod
    def check_outputs(self, manifest: Manifest, outputs: list[np.ndarray]) -> None:
        """Raise triserve.kernel.errors.InvalidOutput when a model's raw outputs must not reach a client."""

    @abstractmethod
    def agreement(self, manifest: Manifest, served: np.ndarray, shadow: np.ndarray) -> float:
        """Agreement in [0, 1] of a shadow version's raw output with the served one (1 = identical)."""
