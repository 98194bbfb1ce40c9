"""Open Inference Protocol v2 (KServe / Triton): the transport-agnostic core shared by REST (oip_rest.py) and gRPC
(grpc_oip.py): the model catalog, server and model metadata, readiness, the tensor codec and inference.

Two kinds of models:

- tensor models, by registry name (yolo-shapes, minilm-intent, co2-forecaster and their fallbacks): the runner's own
  tensor contract from the manifest, platform "onnxruntime_onnx". Inputs go to that model's runner slot through the
  same run_task as REST (admission, deadline, runner retries, output sanity checks); no fallback, since the client
  named the model. Detection takes images FP32 [n, 3, S, S] (S = the model's letterboxed input size), text takes
  input_ids + attention_mask INT64 [n, L] (each row is cut back to its unpadded tokens with the mask: the runner pads
  per batch itself), forecast takes window FP32 [n, context]. The output is the model's output, one row per item.
- task pipelines "detect", "classify" and "forecast", platform "triserve_pipeline": BYTES/FP32 inputs and request
  parameters become the REST request models (DetectOptions, ClassifyRequest, ForecastRequest) and run through the
  same pipeline methods as REST, so validation, limits, fallbacks and error codes are identical.

    detect:   IMAGE BYTES [n] (encoded images); parameters conf_threshold, iou_threshold, max_detections,
              class_aware, model  ->  DETECTIONS BYTES [n] (one JSON document per image, as in the REST response)
    classify: TEXT BYTES [n] (UTF-8); parameters top_k, model  ->  LABEL BYTES [n], SCORE FP32 [n],
              TOP_K_LABELS BYTES [n, k], TOP_K_SCORES FP32 [n, k]
    forecast: VALUES FP32|FP64 [n_points] (NaN = missing), optional TIMESTAMPS BYTES [n_points] (ISO 8601);
              parameters start, frequency, horizon, model  ->  TIMESTAMPS BYTES [h], MEAN, LOWER_50, UPPER_50,
              LOWER_90, UPPER_90 FP32 [h]

Every response carries parameters request_id, served_model, served_version, degraded (+ degraded_reason) and the
stage timings (*_ms). A request parameter "timeout" (microseconds, as Triton clients send it) can only shorten the
request's deadline. Errors are ApiError (services/common/errors.py): each transport writes them in its own format.
"""
from __future__ import annotations

import dataclasses
import json
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from models.manifest import Manifest, TensorSpec
from services.common.deadlines import Deadline
from services.common.errors import ApiError
from services.common.inference import run_task
from services.common.request_context import StageClock
from services.detection.postprocess import check_head
from services.detection.schemas import DetectOptions
from services.forecast.postprocess import check_forecast
from services.forecast.schemas import ForecastRequest
from services.protocols.calls import detect_encoded, ready_gateway
from services.text.postprocess import check_probabilities
from services.text.schemas import ClassifyRequest

SERVER_NAME = "triserve"
SERVER_VERSION = "0.1.0"
EXTENSIONS = ["binary_tensor_data", "parameters"]
TENSOR_PLATFORM = "onnxruntime_onnx"
PIPELINE_PLATFORM = "triserve_pipeline"
PIPELINE_VERSION = "1"
TASKS = ("detection", "text", "forecast")

# OIP datatype -> numpy dtype (BYTES: object arrays of bytes)
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_), "UINT8": np.dtype(np.uint8), "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32), "UINT64": np.dtype(np.uint64), "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16), "INT32": np.dtype(np.int32), "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16), "FP32": np.dtype(np.float32), "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(object),
}
NUMPY_TO_DATATYPE = {str(v): k for k, v in DATATYPES.items() if k != "BYTES"}
MAX_ELEMENTS = 1 << 31


# ---- data model ---------------------------------------------------------------------------------------------------
@dataclass
class Tensor:
    name: str
    datatype: str
    shape: list[int]
    data: np.ndarray  # already shaped; BYTES tensors are object arrays of bytes
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class RequestedOutput:
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class InferRequest:
    model_name: str
    model_version: str = ""
    id: str | None = None
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[RequestedOutput] | None = None  # None or empty: every output
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class InferResponse:
    model_name: str
    model_version: str
    id: str | None
    outputs: list[Tensor]
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TensorMeta:
    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ModelEntry:
    name: str
    kind: Literal["tensor", "pipeline"]
    task: str  # detection | text | forecast: the access/rate-limit and pipeline key
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    slot: str | None = None  # runner slot of a tensor model
    manifest: Manifest | None = None


def bad_request(code: str, message: str, details: Any = None) -> ApiError:
    return ApiError(400, code, message, details)


# ---- tensor codec -------------------------------------------------------------------------------------------------
def _dtype(datatype: str, name: str) -> np.dtype:
    dt = DATATYPES.get(datatype)
    if dt is None:
        raise bad_request("unsupported_datatype", f"input {name!r}: datatype {datatype!r} is not supported",
                          {"input": name, "supported": sorted(DATATYPES)})
    return dt


def _elements(shape: Iterable[Any], name: str) -> int:
    dims = list(shape)
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise bad_request("invalid_shape", f"tensor {name!r}: shape must be non-negative integers",
                          {"tensor": name, "shape": [str(d) for d in dims][:16]})
    count = math.prod(int(d) for d in dims)
    if count > MAX_ELEMENTS:
        raise bad_request("invalid_shape", f"tensor {name!r} is too large", {"tensor": name, "elements": count})
    return count


def _flatten(values: Any) -> Iterable[Any]:
    if isinstance(values, (list, tuple)):
        for v in values:
            yield from _flatten(v)
    else:
        yield values


def array_from_values(name: str, datatype: str, shape: list[int], values: Any) -> np.ndarray:
    """JSON `data` (flat row-major or nested lists) or typed gRPC contents -> a shaped array."""
    dt = _dtype(datatype, name)
    count = _elements(shape, name)
    if datatype == "BYTES":
        items = []
        for v in _flatten(values):
            if isinstance(v, str):
                items.append(v.encode("utf-8"))
            elif isinstance(v, (bytes, bytearray, memoryview)):
                items.append(bytes(v))
            else:
                raise bad_request("invalid_tensor_data", f"input {name!r}: BYTES elements must be strings",
                                  {"input": name})
        arr = np.empty(len(items), dtype=object)
        arr[:] = items
    else:
        try:
            given = np.asarray(values if isinstance(values, (list, tuple)) else [values])
        except (TypeError, ValueError) as exc:  # ragged nesting
            raise bad_request("invalid_tensor_data", f"input {name!r}: data is not a regular array",
                              {"input": name, "reason": type(exc).__name__}) from None
        if given.size and given.dtype.kind not in "biuf":
            raise bad_request("invalid_tensor_data", f"input {name!r}: {datatype} elements must be numbers",
                              {"input": name})
        if dt.kind in "iu" and given.size:
            if given.dtype.kind == "f" and not np.all(np.mod(given, 1) == 0):
                raise bad_request("invalid_tensor_data", f"input {name!r}: {datatype} elements must be integers",
                                  {"input": name})
            info = np.iinfo(dt)
            if given.min() < info.min or given.max() > info.max:
                raise bad_request("invalid_tensor_data", f"input {name!r}: values out of the {datatype} range",
                                  {"input": name})
        arr = given.reshape(-1).astype(dt)
    if arr.size != count:
        raise bad_request("shape_mismatch", f"input {name!r}: {arr.size} elements for shape {list(shape)}",
                          {"input": name, "shape": list(shape), "elements": int(arr.size)})
    return arr.reshape([int(d) for d in shape])


def deserialize_bytes(buf: bytes, name: str) -> list[bytes]:
    """BYTES raw encoding: each element is a 4-byte little-endian length followed by its bytes."""
    out, offset, view = [], 0, memoryview(buf)
    while offset < len(view):
        if offset + 4 > len(view):
            raise bad_request("invalid_tensor_data", f"input {name!r}: truncated BYTES element header",
                              {"input": name})
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > len(view):
            raise bad_request("invalid_tensor_data", f"input {name!r}: truncated BYTES element", {"input": name})
        out.append(bytes(view[offset: offset + length]))
        offset += length
    return out


def serialize_bytes(items: Iterable[Any]) -> bytes:
    parts = []
    for item in items:
        b = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        parts.append(struct.pack("<I", len(b)))
        parts.append(b)
    return b"".join(parts)


def array_from_raw(name: str, datatype: str, shape: list[int], raw: bytes) -> np.ndarray:
    """Binary tensor data (REST binary extension, gRPC raw_input_contents) -> a shaped array."""
    dt = _dtype(datatype, name)
    count = _elements(shape, name)
    if datatype == "BYTES":
        items = deserialize_bytes(raw, name)
        arr = np.empty(len(items), dtype=object)
        arr[:] = items
        if arr.size != count:
            raise bad_request("shape_mismatch", f"input {name!r}: {arr.size} elements for shape {list(shape)}",
                              {"input": name, "shape": list(shape), "elements": int(arr.size)})
    else:
        if len(raw) != count * dt.itemsize:
            raise bad_request("shape_mismatch", f"input {name!r}: {len(raw)} bytes for shape {list(shape)} of "
                              f"{datatype}", {"input": name, "shape": list(shape), "bytes": len(raw)})
        arr = np.frombuffer(raw, dtype=dt.newbyteorder("<")).astype(dt)
    return arr.reshape([int(d) for d in shape])


def raw_of(t: Tensor) -> bytes:
    if t.datatype == "BYTES":
        return serialize_bytes(t.data.reshape(-1))
    return np.ascontiguousarray(t.data, dtype=DATATYPES[t.datatype].newbyteorder("<")).tobytes()


def json_data_of(t: Tensor) -> list:
    """Row-major flat list, as the JSON `data` of an output."""
    if t.datatype == "BYTES":
        return [b.decode("utf-8", errors="replace") if isinstance(b, bytes) else str(b) for b in t.data.reshape(-1)]
    return t.data.reshape(-1).tolist()


def bytes_tensor(name: str, items: list[Any], shape: list[int] | None = None) -> Tensor:
    arr = np.empty(len(items), dtype=object)
    arr[:] = [i.encode("utf-8") if isinstance(i, str) else bytes(i) for i in items]
    shape = shape or [len(items)]
    return Tensor(name, "BYTES", shape, arr.reshape(shape))


def fp32_tensor(name: str, values: Any) -> Tensor:
    arr = np.asarray(values, dtype=np.float32)
    return Tensor(name, "FP32", list(arr.shape), arr)


# ---- catalog, metadata, readiness ---------------------------------------------------------------------------------
def _meta(spec: TensorSpec, manifest: Manifest) -> TensorMeta:
    pre = manifest.preprocess
    shape = []
    for dim in spec.shape:
        if isinstance(dim, int):
            shape.append(dim)
        elif dim in ("height", "width") and pre.kind == "detection":
            shape.append(pre.imgsz)  # the runner batches letterboxed images of exactly this size
        else:
            shape.append(-1)
    datatype = NUMPY_TO_DATATYPE.get(spec.dtype)
    if datatype is None:
        raise ValueError(f"{manifest.name}: dtype {spec.dtype} has no OIP datatype")
    return TensorMeta(spec.name, datatype, tuple(shape))


_B, _F = "BYTES", "FP32"
PIPELINES: dict[str, tuple[str, tuple[TensorMeta, ...], tuple[TensorMeta, ...]]] = {
    "detect": ("detection", (TensorMeta("IMAGE", _B, (-1,)),), (TensorMeta("DETECTIONS", _B, (-1,)),)),
    "classify": ("text", (TensorMeta("TEXT", _B, (-1,)),),
                 (TensorMeta("LABEL", _B, (-1,)), TensorMeta("SCORE", _F, (-1,)),
                  TensorMeta("TOP_K_LABELS", _B, (-1, -1)), TensorMeta("TOP_K_SCORES", _F, (-1, -1)))),
    "forecast": ("forecast", (TensorMeta("VALUES", _F, (-1,)),),
                 (TensorMeta("TIMESTAMPS", _B, (-1,)),) + tuple(TensorMeta(n, _F, (-1,)) for n in
                                                               ("MEAN", "LOWER_50", "UPPER_50", "LOWER_90",
                                                                "UPPER_90"))),
}


def catalog(gateway) -> dict[str, ModelEntry]:
    ready_gateway(gateway)
    entries: dict[str, ModelEntry] = {}
    for task in TASKS:
        for slot, m in gateway.active_manifests(task).items():
            entries[m.name] = ModelEntry(
                name=m.name, kind="tensor", task=task, versions=(m.version,), platform=TENSOR_PLATFORM,
                inputs=tuple(_meta(s, m) for s in m.inputs), outputs=tuple(_meta(s, m) for s in m.outputs),
                slot=slot, manifest=m)
    for name, (task, inputs, outputs) in PIPELINES.items():
        entries[name] = ModelEntry(name=name, kind="pipeline", task=task, versions=(PIPELINE_VERSION,),
                                   platform=PIPELINE_PLATFORM, inputs=inputs, outputs=outputs)
    return entries


def resolve(gateway, name: str, version: str = "") -> ModelEntry:
    entries = catalog(gateway)
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
    # The runner turns ready only when every slot is loaded and warm, so one model is ready when the server is.
    return await server_ready(gateway)


def repository_index(gateway) -> list[dict]:
    return [{"name": e.name, "version": v, "state": "READY"} for e in catalog(gateway).values() for v in e.versions]


# ---- inference ----------------------------------------------------------------------------------------------------
def _inputs(req: InferRequest, expected: dict[str, set[str]], required: set[str]) -> dict[str, Tensor]:
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


def _params(parameters: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {k: parameters[k] for k in keys if k in parameters and parameters[k] is not None}


def _with_timeout(call, parameters: dict[str, Any]):
    """A Triton-style `timeout` parameter (microseconds) may shorten the deadline, never extend it."""
    timeout_us = parameters.get("timeout")
    if isinstance(timeout_us, bool) or not isinstance(timeout_us, (int, float)) or timeout_us <= 0:
        return call
    budget_ms = max(1, int(min(timeout_us / 1000, call.deadline.remaining() * 1000)))
    return dataclasses.replace(call, deadline=Deadline.from_budget(budget_ms))


def _check_batch(n: int, cap: int, name: str) -> None:
    if n < 1:
        raise bad_request("empty_batch", f"input {name!r} has no items", {"input": name})
    if n > cap:
        raise ApiError(422, "too_many_items", f"{n} items exceed the limit of {cap}", {"limit": cap, "received": n})


def _finite(arr: np.ndarray, name: str) -> None:
    if not np.isfinite(arr).all():
        raise ApiError(422, "non_finite_value", f"input {name!r} contains NaN or infinity", {"input": name})


def _tensor_items(gateway, entry: ModelEntry, tensors: dict[str, Tensor]) -> list[np.ndarray]:
    """Input tensors -> one runner item per batch row, validated against the model's contract and the limits."""
    m, s = entry.manifest, gateway.settings
    assert m is not None
    if entry.task == "detection":
        spec = entry.inputs[0]
        arr = tensors[spec.name].data
        size = m.preprocess.imgsz
        if arr.ndim != 4 or tuple(arr.shape[1:]) != (3, size, size):
            raise bad_request("shape_mismatch", f"input {spec.name!r} must be [n, 3, {size}, {size}] (letterboxed "
                              f"RGB scaled to [0, 1]), got {list(arr.shape)}", {"expected": list(spec.shape),
                                                                                "received": list(arr.shape)})
        _check_batch(arr.shape[0], s.detection_limits.max_images, spec.name)
        _finite(arr, spec.name)
        return [np.ascontiguousarray(x, dtype=np.float32) for x in arr]
    if entry.task == "text":
        ids, mask = tensors["input_ids"].data, tensors["attention_mask"].data
        if ids.ndim != 2 or mask.shape != ids.shape:
            raise bad_request("shape_mismatch", "input_ids and attention_mask must both be [n, L]",
                              {"input_ids": list(ids.shape), "attention_mask": list(mask.shape)})
        _check_batch(ids.shape[0], s.text_limits.max_texts, "input_ids")
        max_len = m.preprocess.max_length
        if ids.shape[1] > max_len:
            raise ApiError(422, "sequence_too_long", f"sequences of {ids.shape[1]} tokens exceed {max_len}",
                           {"limit": max_len, "length": int(ids.shape[1])})
        if not np.isin(mask, (0, 1)).all():
            raise bad_request("invalid_attention_mask", "attention_mask values must be 0 or 1")
        tokenizer = gateway.pipeline("text").tokenizer(gateway.catalog.get(entry.slot, m.version))
        vocab = getattr(getattr(tokenizer, "_tok", None), "get_vocab_size", lambda: None)()
        items = []
        for i in range(ids.shape[0]):
            row = np.ascontiguousarray(ids[i][mask[i] == 1], dtype=np.int64)
            if row.size == 0:
                raise ApiError(422, "empty_sequence", f"row {i} has no unmasked tokens", {"index": i})
            if row.min() < 0 or (vocab and row.max() >= vocab):
                raise ApiError(422, "token_id_out_of_range", f"row {i} has token ids outside [0, {vocab})",
                               {"index": i, "vocab_size": vocab})
            items.append(row)
        return items
    spec = entry.inputs[0]
    arr = tensors[spec.name].data
    context = m.preprocess.context
    if arr.ndim != 2 or arr.shape[1] != context:
        raise bad_request("shape_mismatch", f"input {spec.name!r} must be [n, {context}], got {list(arr.shape)}",
                          {"expected": list(spec.shape), "received": list(arr.shape)})
    slot_cfg = s.forecast.fallback if entry.slot.endswith("_fallback") else s.forecast.primary
    _check_batch(arr.shape[0], slot_cfg.batching.max_batch_size, spec.name)
    _finite(arr, spec.name)
    return [np.ascontiguousarray(x, dtype=np.float32) for x in arr]


def _output_check(gateway, entry: ModelEntry):
    m = entry.manifest
    assert m is not None

    def validate(_model, outputs: list[np.ndarray]) -> None:
        for out in outputs:
            if entry.task == "detection":
                check_head(out, len(m.labels))
            elif entry.task == "text":
                check_probabilities(out, len(m.labels))
            else:
                check_forecast(out, m.preprocess.horizon)

    return validate


async def _infer_tensor_model(gateway, entry: ModelEntry, req: InferRequest, call) -> tuple[list[Tensor], dict, str]:
    tensors = _inputs(req, {t.name: {t.datatype} for t in entry.inputs}, {t.name for t in entry.inputs})
    items = _tensor_items(gateway, entry, tensors)
    clock = StageClock()
    choice = "fallback" if entry.slot.endswith("_fallback") else "primary"
    result = await run_task(gateway, entry.task, lambda _model: items, choice, clock, call.deadline,
                            _output_check(gateway, entry), request_id=call.request_id)
    out_meta = entry.outputs[0]
    ys = np.stack([np.asarray(y) for y in result.outputs]).astype(DATATYPES[out_meta.datatype])
    clock.stage("postprocess")
    timings = clock.timings(result.infer_ms)
    params = {"served_model": result.model, "served_version": result.version, "degraded": False,
              "batch": int(result.batch), **{k: float(v) for k, v in timings.model_dump().items()}}
    return [Tensor(out_meta.name, out_meta.datatype, list(ys.shape), ys)], params, result.version


def _envelope(resp) -> dict[str, Any]:
    params: dict[str, Any] = {"served_model": resp.model.name, "served_version": resp.model.version,
                              "degraded": bool(resp.degraded)}
    if resp.degraded_reason:
        params["degraded_reason"] = resp.degraded_reason
    params.update({k: float(v) for k, v in resp.timings.model_dump().items()})
    return params


def _utf8(items: np.ndarray, name: str) -> list[str]:
    out = []
    for i, b in enumerate(items.reshape(-1)):
        try:
            out.append(b.decode("utf-8") if isinstance(b, bytes) else str(b))
        except UnicodeDecodeError:
            raise ApiError(422, "invalid_utf8", f"{name}[{i}] is not valid UTF-8", {"index": i}) from None
    return out


async def _classify(gateway, req: InferRequest, call) -> tuple[list[Tensor], dict]:
    t = _inputs(req, {"TEXT": {"BYTES"}}, {"TEXT"})["TEXT"]
    body = ClassifyRequest(texts=_utf8(t.data, "TEXT"), **_params(req.parameters, ("top_k", "model")))
    resp = await gateway.pipeline("text").classify(gateway, body, call)
    k = len(resp.results[0].top_k)
    n = len(resp.results)
    outputs = [bytes_tensor("LABEL", [r.label for r in resp.results]),
               fp32_tensor("SCORE", [r.score for r in resp.results]),
               bytes_tensor("TOP_K_LABELS", [x.label for r in resp.results for x in r.top_k], [n, k]),
               fp32_tensor("TOP_K_SCORES", [[x.score for x in r.top_k] for r in resp.results])]
    return outputs, _envelope(resp)


async def _detect(gateway, req: InferRequest, call) -> tuple[list[Tensor], dict]:
    t = _inputs(req, {"IMAGE": {"BYTES"}}, {"IMAGE"})["IMAGE"]
    opts = DetectOptions(**_params(req.parameters, ("conf_threshold", "iou_threshold", "max_detections",
                                                    "class_aware", "model")))
    resp = await detect_encoded(gateway, list(t.data.reshape(-1)), opts, call)
    docs = [r.model_dump_json() for r in resp.results]
    return [bytes_tensor("DETECTIONS", docs)], _envelope(resp)


async def _forecast(gateway, req: InferRequest, call) -> tuple[list[Tensor], dict]:
    got = _inputs(req, {"VALUES": {"FP32", "FP64"}, "TIMESTAMPS": {"BYTES"}}, {"VALUES"})
    fields: dict[str, Any] = {"values": [float(v) for v in got["VALUES"].data.reshape(-1)]}
    if "TIMESTAMPS" in got:
        fields["timestamps"] = _utf8(got["TIMESTAMPS"].data, "TIMESTAMPS")
    fields.update(_params(req.parameters, ("start", "frequency", "horizon", "model")))
    body = ForecastRequest(**fields)
    resp = await gateway.pipeline("forecast").forecast(gateway, body, call)
    points = resp.forecast
    outputs = [bytes_tensor("TIMESTAMPS", [p.model_dump(mode="json")["timestamp"] for p in points])]
    for name in ("mean", "lower_50", "upper_50", "lower_90", "upper_90"):
        outputs.append(fp32_tensor(name.upper(), [getattr(p, name) for p in points]))
    params = _envelope(resp)
    params["input"] = json.dumps(resp.input.model_dump())
    return outputs, params


_PIPELINE_HANDLERS = {"detect": _detect, "classify": _classify, "forecast": _forecast}


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


async def infer(gateway, entry: ModelEntry, req: InferRequest, call) -> InferResponse:
    """Run one inference request; `call` (request id, deadline, client) comes from the transport's access guard."""
    _check_requested(entry, req.outputs)
    call = _with_timeout(call, req.parameters)
    if entry.kind == "tensor":
        outputs, params, version = await _infer_tensor_model(gateway, entry, req, call)
    else:
        outputs, params = await _PIPELINE_HANDLERS[entry.name](gateway, req, call)
        version = PIPELINE_VERSION
    params = {"request_id": call.request_id, **params}
    return InferResponse(model_name=entry.name, model_version=version, id=req.id,
                         outputs=_select(outputs, req.outputs), parameters=params)
