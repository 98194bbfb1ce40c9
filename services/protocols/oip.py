"""Open Inference Protocol v2 (KServe / Triton): the transport-agnostic core shared by REST (oip_rest.py) and gRPC
(grpc_oip.py): the model catalog, server and model metadata, readiness and inference (the tensors and their codec:
oip_codec.py), and the three Triton extensions its tools ask for: the model configuration (model_config), the
repository index and the inference statistics (statistics; what each number means here: statistics.py).

Two kinds of models:

- pipelines, one per deployment (configs/models.yaml), by deployment name, platform "triserve_pipeline" (Triton
  backend "python" in their configuration: Python pre/post-processing around the deployment's ONNX models): the
  deployment's family declares BYTES/FP32 inputs and outputs (families/<family>/family.py) and request parameters
  become the family's REST request model, so validation, limits, fallbacks and error codes are identical to REST.
  Each family's default deployment is also served under the family's alias ("detect", "classify", "forecast").
  A family route with an OIP surface of its own (kernel/family.RestRoute.oip: the forecast panel and backtest) is a
  pipeline too, named `<deployment>.<route's last path segment>` ("forecast.panel") and, for the default deployment,
  by the route's alias ("forecast-panel"); its tensors and parameters build that route's request model.
- tensor models, by registry name (e.g. yolo-shapes, minilm-intent and their fallbacks): the runner's own tensor
  contract from the manifest, platform "onnxruntime_onnx". Inputs go to exactly that model's runner slot through the
  same run_task as REST (admission, deadline, runner retries, output checks); no fallback, since the client named the
  model. A registry name that equals a deployment name is served as the deployment.

Every response carries parameters request_id, served_model, served_version, degraded (+ degraded_reason) and the
stage timings (*_ms). A request parameter "timeout" (microseconds, as Triton clients send it) can only shorten the
request's deadline. Errors are ApiError (kernel/errors.py): each transport writes them in its own format.
"""
from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel

from triserve import families
from triserve.kernel.context import ServingContext
from triserve.kernel.errors import ApiError
from triserve.kernel.family import OipSurface, RestRoute
from triserve.kernel.protection.deadlines import Deadline
from triserve.kernel.request_context import StageClock
from triserve.kernel.routing.inference import run_task
from triserve.kernel.tensors import TensorMeta, bad_request
from triserve.models.manifest import Manifest, TensorSpec
from triserve.services.protocols import statistics as stats
from triserve.services.protocols.oip_codec import (
    DATATYPES,
    NUMPY_TO_DATATYPE,
    InferRequest,
    InferResponse,
    RequestedOutput,
    Tensor,
    output_tensor,
    request_field,
)

SERVER_NAME = "triserve"
SERVER_VERSION = "0.1.0"
EXTENSIONS = ["binary_tensor_data", "parameters", "model_configuration", "statistics"]
TENSOR_PLATFORM = "onnxruntime_onnx"
TENSOR_BACKEND = "onnxruntime"
PIPELINE_PLATFORM = "triserve_pipeline"
PIPELINE_BACKEND = "python"
PIPELINE_VERSION = "1"
READY, UNAVAILABLE = "READY", "UNAVAILABLE"  # repository index states (Triton's names)


# ---- catalog entries ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelEntry:
    name: str
    kind: Literal["tensor", "pipeline"]
    deployment: str  # the deployment it belongs to (admission, limits, metrics)
    family: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    slot: str | None = None  # runner slot of a tensor model
    route: RestRoute | None = None  # a pipeline of one of the family's routes (RestRoute.oip), not its main one
    manifest: Manifest | None = None
    unavailable: str = ""  # why the model cannot serve although listed (a pipeline whose primary is not loaded)


# ---- catalog, metadata, readiness ---------------------------------------------------------------------------------
def _meta(spec: TensorSpec, manifest: Manifest) -> TensorMeta:
    """Dynamic axes the family serves at one size only (a detector's letterboxed side) are shown as that size."""
    served = families.runtime(manifest.task).warmup_sizes(manifest)
    shape = []
    for dim in spec.shape:
        if isinstance(dim, int):
            shape.append(dim)
        elif len(served.get(dim, ())) == 1:
            shape.append(served[dim][0])
        else:
            shape.append(-1)
    datatype = NUMPY_TO_DATATYPE.get(spec.dtype)
    if datatype is None:
        raise ValueError(f"{manifest.name}: dtype {spec.dtype} has no OIP datatype")
    return TensorMeta(spec.name, datatype, tuple(shape))


def catalog(ctx: ServingContext) -> dict[str, ModelEntry]:
    """Every OIP model: a pipeline per deployment (and per family alias), a tensor model per served registry model."""
    entries: dict[str, ModelEntry] = {}
    repo = ctx.repository
    for dep in repo.deployments:
        fam = families.family(dep.family)
        for slot, manifest in ctx.active_manifests(dep).items():
            entries.setdefault(manifest.name, ModelEntry(
                name=manifest.name, kind="tensor", deployment=dep.name, family=dep.family,
                versions=(manifest.version,), platform=TENSOR_PLATFORM,
                inputs=tuple(_meta(s, manifest) for s in manifest.inputs),
                outputs=tuple(_meta(s, manifest) for s in manifest.outputs), slot=slot, manifest=manifest))
    for dep in repo.deployments:
        fam = families.family(dep.family)
        unavailable = "" if dep.name in ctx.routing.table else f"model slot {dep.name} is not loaded"
        entry = ModelEntry(name=dep.name, kind="pipeline", deployment=dep.name, family=dep.family,
                           versions=(PIPELINE_VERSION,), platform=PIPELINE_PLATFORM,
                           inputs=fam.api.oip.inputs, outputs=fam.api.oip.outputs, unavailable=unavailable)
        entries[dep.name] = entry
        default = repo.default_for(dep.family) is dep
        if default:
            entries[fam.api.oip.alias] = dataclasses.replace(entry, name=fam.api.oip.alias)
        for route in fam.api.routes:
            if route.oip is None:
                continue
            own = dataclasses.replace(entry, name=f"{dep.name}.{route.path.rsplit('/', 1)[-1]}", route=route,
                                      inputs=route.oip.inputs, outputs=route.oip.outputs)
            entries[own.name] = own
            if default:
                entries[route.oip.alias] = dataclasses.replace(own, name=route.oip.alias)
    return entries


def surface(entry: ModelEntry) -> tuple[OipSurface, type[BaseModel]]:
    """A pipeline's OIP surface and the request model its tensors and parameters build."""
    fam = families.family(entry.family)
    if entry.route is not None and entry.route.oip is not None:
        return entry.route.oip, entry.route.body
    return fam.api.oip, fam.api.request_model


async def resolve(ctx: ServingContext, name: str, version: str = "") -> ModelEntry:
    await ctx.routing.ensure_fresh(ctx.runner)
    entries = catalog(ctx)
    entry = entries.get(name)
    if entry is None:
        raise ApiError(404, "model_not_found", f"model {name!r} is not served", {"models": sorted(entries)})
    if version and version not in entry.versions:
        raise ApiError(404, "model_version_not_found", f"model {name!r} has no version {version!r}",
                       {"versions": list(entry.versions)})
    return entry


def server_metadata() -> dict:
    return {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": list(EXTENSIONS)}


def model_metadata(entry: ModelEntry) -> dict:
    def tensors(metas):
        return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in metas]

    return {"name": entry.name, "versions": list(entry.versions), "platform": entry.platform,
            "inputs": tensors(entry.inputs), "outputs": tensors(entry.outputs)}


async def server_ready(gateway) -> bool:
    """The gateway's own readiness: metadata loaded and every runner model loaded and warm."""
    if gateway is None:
        return False
    try:
        return bool(await gateway.__is_ready__())
    except Exception:  # noqa: BLE001 - any failure to answer means not ready
        return False


async def model_ready(gateway, entry: ModelEntry) -> bool:
    # The runner turns ready only when every slot is loaded and warm, so one model is ready when the server is (and,
    # for a pipeline, its primary slot is in the routing table: a deployment added at run time may still be loading).
    return not entry.unavailable and await server_ready(gateway)


async def repository_index(ctx: ServingContext, gateway, ready_only: bool = False) -> list[dict]:
    """Triton's repository index: every OIP model and version with its state ("READY" / "UNAVAILABLE") and, when
    not ready, the reason; configured registry models whose slot is not loaded are listed as UNAVAILABLE."""
    await ctx.routing.ensure_fresh(ctx.runner)
    entries = catalog(ctx)
    server_reason = "" if await server_ready(gateway) else "the model runner is not ready"
    index = []
    for e in entries.values():
        reason = e.unavailable or server_reason
        index += [{"name": e.name, "version": v, "state": UNAVAILABLE if reason else READY, "reason": reason}
                  for v in e.versions]
    listed = set(entries)
    for slot, cfg in ctx.repository.slots.items():
        if slot not in ctx.routing.table and cfg.name not in listed:
            listed.add(cfg.name)
            index.append({"name": cfg.name, "version": "", "state": UNAVAILABLE,
                          "reason": f"model slot {slot} is not loaded"})
    return [i for i in index if i["state"] == READY] if ready_only else index


# ---- Triton model configuration -----------------------------------------------------------------------------------
def triton_type(datatype: str) -> str:
    """OIP datatype -> Triton's model-configuration DataType name (BYTES is TYPE_STRING)."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def batched(entry: ModelEntry) -> bool:
    """A tensor model whose every input and output leads with a variable batch axis: the runner batches along it.
    Pipelines declare none (their leading axis is the items of one request, or a series' time axis)."""
    return entry.kind == "tensor" and all(t.shape and t.shape[0] == -1 for t in (*entry.inputs, *entry.outputs))


def _backend(entry: ModelEntry) -> str:
    """Triton's backend names: ONNX Runtime for tensor models; Python for pipelines and for registry models the
    family runs as numpy code (manifest engine "numpy", statistical fallbacks with no graph)."""
    if entry.kind == "tensor" and getattr(entry.manifest, "engine", "onnxruntime") == "onnxruntime":
        return TENSOR_BACKEND
    return PIPELINE_BACKEND


def model_config(ctx: ServingContext, entry: ModelEntry) -> dict:
    """Triton's model configuration (model_config.proto as JSON, the form Triton's HTTP endpoint returns and the
    gRPC ModelConfig message is parsed from). Tensor models with a batch axis report max_batch_size = their slot's
    batching.max_batch_size, dims without the batch axis (Triton's convention) and dynamic_batching: the gateway
    merges queued requests without a batching window, waiting at most gateway.coalesce_wait_ms for requests already
    admitted (max_queue_delay_microseconds; 0 with runner.batching=runner, whose BentoML dispatcher adapts its
    wait), with no preferred sizes. Pipelines report max_batch_size 0 and full shapes."""
    batch = batched(entry)
    skip = 1 if batch else 0
    params = {"deployment": entry.deployment, "family": entry.family, "kind": entry.kind}
    doc: dict[str, Any] = {
        "name": entry.name,
        "platform": entry.platform,
        "backend": _backend(entry),
        "version_policy": {"latest": {"num_versions": 1}},
        "max_batch_size": 0,
        "input": [{"name": t.name, "data_type": triton_type(t.datatype), "format": "FORMAT_NONE",
                   "dims": list(t.shape[skip:]), "is_shape_tensor": False, "allow_ragged_batch": False,
                   "optional": bool(t.optional)} for t in entry.inputs],
        "output": [{"name": t.name, "data_type": triton_type(t.datatype), "dims": list(t.shape[skip:]),
                    "label_filename": "", "is_shape_tensor": False} for t in entry.outputs],
        "default_model_filename": entry.manifest.model_file if entry.manifest is not None else "",
    }
    if entry.kind == "tensor":
        assert entry.slot is not None
        params["slot"] = entry.slot
    else:
        dep = ctx.repository.find(entry.deployment)
        if dep is not None:
            params["models"] = ",".join(m.name for m in dep.slots.values())
        if entry.route is not None:
            params["route"] = entry.route.path
    if batch:
        assert entry.slot is not None
        runner, gateway = ctx.settings.runner, ctx.settings.gateway
        doc["max_batch_size"] = ctx.slot_batch(entry.slot)
        delay_us = round(gateway.coalesce_wait_ms * 1000) if runner.batching == "gateway" else 0
        doc["dynamic_batching"] = {"preferred_batch_size": [], "max_queue_delay_microseconds": delay_us,
                                   "preserve_ordering": False}
        params["batching"] = runner.batching
    doc["parameters"] = {k: {"string_value": str(v)} for k, v in params.items()}
    return doc


# ---- Triton statistics --------------------------------------------------------------------------------------------
async def statistics(ctx: ServingContext, name: str = "", version: str = "") -> list[dict]:
    """Triton's model statistics of one model (every version, or `version`), or of every model (`name` empty; the
    version is then ignored, as Triton does), aggregated over the server's processes (statistics.py). An unknown model
    or a version with no statistics and not served: 404."""
    if name:
        entries = [await resolve(ctx, name)]
    else:
        await ctx.routing.ensure_fresh(ctx.runner)
        entries = list(catalog(ctx).values())
        version = ""
    samples = stats.Samples(await asyncio.to_thread(stats.read_samples))
    out, versions = [], []
    for e in entries:
        if e.kind == "pipeline":
            versions.append(PIPELINE_VERSION)
            if version in ("", PIPELINE_VERSION):
                out.append(stats.pipeline_stats(samples, e.name, PIPELINE_VERSION, e.deployment))
            continue
        for v in stats.tensor_versions(samples, e.name, e.versions):
            versions.append(v)
            if version in ("", v):
                out.append(stats.tensor_stats(samples, e.name, v))
    if version and not out:
        raise ApiError(404, "model_version_not_found", f"model {name!r} has no version {version!r}",
                       {"versions": versions})
    return out


# ---- inference ----------------------------------------------------------------------------------------------------
def _inputs(req: InferRequest, declared: Iterable[TensorMeta]) -> dict[str, Tensor]:
    declared = list(declared)
    expected = {t.name: {t.datatype, *t.also} for t in declared}
    required = {t.name for t in declared if not t.optional}
    got: dict[str, Tensor] = {}
    for t in req.inputs:
        if t.name in got:
            raise bad_request("duplicate_input", f"input {t.name!r} is given twice", {"input": t.name})
        if t.name not in expected:
            raise bad_request("unknown_input", f"model {req.model_name!r} has no input {t.name!r}",
                              {"input": t.name, "inputs": sorted(expected)})
        if t.datatype not in expected[t.name]:
            raise bad_request("datatype_mismatch", f"input {t.name!r} must be {'/'.join(sorted(expected[t.name]))}, "
                              f"got {t.datatype}", {"input": t.name, "expected": sorted(expected[t.name]),
                                                   "received": t.datatype})
        got[t.name] = t
    missing = sorted(required - set(got))
    if missing:
        raise bad_request("missing_input", f"model {req.model_name!r} needs input(s) {', '.join(missing)}",
                          {"missing": missing})
    return got


def pick_params(parameters: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """The request parameters a family pipeline reads (unset and null ones left out, so its defaults apply)."""
    return {k: parameters[k] for k in keys if k in parameters and parameters[k] is not None}


def _with_timeout(call, parameters: dict[str, Any]):
    """A Triton-style `timeout` parameter (microseconds) may shorten the deadline, never extend it."""
    timeout_us = parameters.get("timeout")
    if isinstance(timeout_us, bool) or not isinstance(timeout_us, (int, float)) or timeout_us <= 0:
        return call
    budget_ms = max(1, int(min(timeout_us / 1000, call.deadline.remaining() * 1000)))
    return dataclasses.replace(call, deadline=Deadline.from_budget(budget_ms))


async def _infer_tensor_model(ctx: ServingContext, entry: ModelEntry, req: InferRequest,
                              call) -> tuple[list[Tensor], dict, str]:
    assert entry.slot is not None and entry.manifest is not None
    tensors = _inputs(req, entry.inputs)
    dep = ctx.deployment(entry.family, entry.deployment)
    served = await ctx.catalog.resolve(entry.slot, entry.manifest.version)
    ctx.protection.access.capacity(dep.name, dep.family)
    arrays = {name: t.data for name, t in tensors.items()}
    items = families.family(dep.family).api.oip.tensor_items(ctx.view(dep), served, arrays, ctx.slot_batch(entry.slot))
    clock = StageClock()
    result = await run_task(ctx, dep, lambda _model: items, "primary", clock, call.deadline,
                            request_id=call.request_id, slot=entry.slot)
    out_meta = entry.outputs[0]
    ys = np.stack([np.asarray(y) for y in result.outputs]).astype(DATATYPES[out_meta.datatype])
    clock.stage("postprocess")
    timings = clock.timings(result.infer_ms)
    params = {"served_model": result.model, "served_version": result.version, "degraded": False,
              "batch": int(result.batch), **{k: float(v) for k, v in timings.model_dump().items()}}
    return [Tensor(out_meta.name, out_meta.datatype, list(ys.shape), ys)], params, result.version


async def _infer_pipeline(ctx: ServingContext, entry: ModelEntry, req: InferRequest,
                          call) -> tuple[list[Tensor], dict[str, Any]]:
    """A deployment as an OIP model: its family's declared input tensors and parameters become the family's request
    model, the response model its declared output tensors; the family pipeline runs in between (as for REST)."""
    oip, request_model = surface(entry)
    dep = ctx.deployment(entry.family, entry.deployment)
    tensors = _inputs(req, entry.inputs)
    fields: dict[str, Any] = {meta.field: request_field(meta, tensors[meta.name])
                              for meta in oip.inputs if meta.name in tensors}
    fields.update(pick_params(req.parameters, oip.parameters))
    fields = oip.request_fields(fields, {name: t.data for name, t in tensors.items()}, req.parameters)
    request = request_model.model_validate({**fields, "deployment": dep.name})
    resp = await ctx.run(entry.family, request, call, dep)
    outputs = [output_tensor(meta, meta.value(resp)) for meta in oip.outputs if meta.value is not None]
    return outputs, {**_envelope(resp), **oip.extra_parameters(resp)}


def _envelope(resp) -> dict[str, Any]:
    params: dict[str, Any] = {"deployment": resp.deployment, "served_model": resp.model.name,
                              "served_version": resp.model.version, "degraded": bool(resp.degraded)}
    if resp.degraded_reason:
        params["degraded_reason"] = resp.degraded_reason
    params.update({k: float(v) for k, v in resp.timings.model_dump().items()})
    return params


def _check_requested(entry: ModelEntry, requested: list[RequestedOutput] | None) -> None:
    names = {t.name for t in entry.outputs}
    unknown = [r.name for r in requested or () if r.name not in names]
    if unknown:
        raise bad_request("unknown_output", f"model {entry.name!r} has no output(s) {', '.join(unknown)}",
                          {"unknown": unknown, "outputs": sorted(names)})


def _select(outputs: list[Tensor], requested: list[RequestedOutput] | None) -> list[Tensor]:
    if not requested:
        return outputs
    by_name = {t.name: t for t in outputs}
    return [by_name[r.name] for r in requested]


async def infer(ctx: ServingContext, entry: ModelEntry, req: InferRequest, call) -> InferResponse:
    """Run one inference request; `call` (request id, deadline, client) comes from the transport's access guard."""
    _check_requested(entry, req.outputs)
    call = _with_timeout(call, req.parameters)
    if entry.kind == "tensor":
        outputs, params, version = await _infer_tensor_model(ctx, entry, req, call)
    else:
        outputs, params = await _infer_pipeline(ctx, entry, req, call)
        version = PIPELINE_VERSION
    params = {"request_id": call.request_id, **params}
    return InferResponse(model_name=entry.name, model_version=version, id=req.id,
                         outputs=_select(outputs, req.outputs), parameters=params)
