"""The Open Inference Protocol's tensors, as both transports (oip_rest.py, grpc_oip.py) carry them: the request and
response data model and the codec (JSON `data`, binary/raw contents, BYTES length-prefixed elements) to and from
shaped numpy arrays, checked (datatype, shape, element count and range) with a 400 that names the tensor; and a
family's declared pipeline tensors (triserve.kernel.tensors.TensorMeta) to and from its request fields."""
from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from triserve.kernel.errors import ApiError
from triserve.kernel.tensors import TensorMeta, bad_request

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


def output_tensor(meta: TensorMeta, values: Any) -> Tensor:
    """A pipeline output as its family declares it: `values` (a nested list or an array) in `meta.datatype`."""
    if meta.datatype == "BYTES":
        arr = np.asarray(values, dtype=object)
        return bytes_tensor(meta.name, list(arr.reshape(-1)), list(arr.shape))
    arr = np.asarray(values, dtype=DATATYPES[meta.datatype])
    return Tensor(meta.name, meta.datatype, list(arr.shape), arr)


def request_field(meta: TensorMeta, tensor: Tensor) -> list[Any]:
    """A pipeline input tensor -> the value of the request field it fills (flat, row-major)."""
    if meta.datatype != "BYTES":
        return tensor.data.reshape(-1).tolist()
    if meta.binary:
        return [bytes(b) for b in tensor.data.reshape(-1)]
    return utf8(tensor.data, meta.name)


def utf8(items: np.ndarray, name: str) -> list[str]:
    out = []
    for i, b in enumerate(items.reshape(-1)):
        try:
            out.append(b.decode("utf-8") if isinstance(b, bytes) else str(b))
        except UnicodeDecodeError:
            raise ApiError(422, "invalid_utf8", f"{name}[{i}] is not valid UTF-8", {"index": i}) from None
    return out
