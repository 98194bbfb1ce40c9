"""Open Inference Protocol v2 tensors without numpy: Python (nested) lists -> the V2 JSON request (name, shape,
datatype, data), and the V2 answer -> OipInferResponse, with the protocol's binary tensor data extension both ways
where JSON cannot carry the data (raw bytes elements of a BYTES input; outputs asked for in binary).

The layouts are the service's (services/protocols/oip.py, oip_rest.py): `data` flat row-major (nested lists are
flattened here), BYTES elements in binary as a 4-byte little-endian length then the bytes, numbers little-endian.
"""
from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from triserve_client.oip_models import OipInferResponse

HEADER_LENGTH = "Inference-Header-Content-Length"
# datatype -> struct format character (little-endian raw tensor data)
STRUCT_FORMATS = {"BOOL": "?", "UINT8": "B", "UINT16": "H", "UINT32": "I", "UINT64": "Q", "INT8": "b", "INT16": "h",
                  "INT32": "i", "INT64": "q", "FP16": "e", "FP32": "f", "FP64": "d"}
DATATYPES = frozenset({*STRUCT_FORMATS, "BYTES"})


@dataclass(frozen=True)
class OipInput:
    """One input tensor. `data`: nested lists (the shape is read from the nesting) or a flat list with `shape`; a
    single value is a tensor of shape []. `datatype`: one of the protocol's (BOOL, UINT8..UINT64, INT8..INT64, FP16,
    FP32, FP64, BYTES); when None it is read from the values: str or bytes -> BYTES, bool -> BOOL, int -> INT64, any
    float -> FP64 (give "FP32" for a model that declares FP32). BYTES elements are str (sent as JSON) or bytes (the
    tensor is then sent as binary data)."""

    name: str
    data: Any
    datatype: str | None = None
    shape: Sequence[int] | None = None
    parameters: Mapping[str, Any] | None = None


InputsLike = Mapping[str, Any] | Sequence[OipInput]


def _is_nested(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _flatten(value: Any) -> Iterator[Any]:
    if _is_nested(value):
        for v in value:
            yield from _flatten(v)
    else:
        yield value


def shape_of(data: Any, name: str = "") -> list[int]:
    """The shape of regular nested lists (ValueError for ragged ones)."""
    if not _is_nested(data):
        return []
    if not data:
        return [0]
    inner = [shape_of(v, name) for v in data]
    if any(s != inner[0] for s in inner[1:]):
        raise ValueError(f"input {name!r}: ragged nested lists (rows of different shapes {inner[0]} and "
                         f"{next(s for s in inner if s != inner[0])})")
    return [len(data), *inner[0]]


def datatype_of(items: Sequence[Any], name: str = "") -> str:
    if not items:
        raise ValueError(f"input {name!r}: no values to read a datatype from; give OipInput(..., datatype=...)")
    if all(isinstance(v, (str, bytes, bytearray, memoryview)) for v in items):
        return "BYTES"
    if all(isinstance(v, bool) for v in items):
        return "BOOL"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        return "INT64"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
        return "FP64"
    kinds = sorted({type(v).__name__ for v in items})
    raise TypeError(f"input {name!r}: cannot read one datatype from values of types {kinds}")


def _as_inputs(inputs: InputsLike) -> list[OipInput]:
    if isinstance(inputs, Mapping):
        out = []
        for k, v in inputs.items():
            if isinstance(v, OipInput) and v.name != k:
                raise ValueError(f"inputs[{k!r}] is an OipInput named {v.name!r}")
            out.append(v if isinstance(v, OipInput) else OipInput(k, v))
        return out
    given = list(inputs)
    for i, inp in enumerate(given):
        if not isinstance(inp, OipInput):
            raise TypeError(f"inputs[{i}]: an OipInput, not {type(inp).__name__} (or pass a mapping name -> data)")
    return given


def _encode_bytes(items: Sequence[Any]) -> bytes:
    parts = []
    for item in items:
        b = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        parts += [struct.pack("<I", len(b)), b]
    return b"".join(parts)


def encode_request(inputs: InputsLike, *, outputs: Sequence[str] | None = None,
                   parameters: Mapping[str, Any] | None = None, infer_id: str | None = None,
                   binary_outputs: bool = False) -> tuple[bytes, dict[str, str]]:
    """The infer request body and its headers: JSON, or JSON + binary tensor data (with Inference-Header-Content-
    Length) when a BYTES input holds raw bytes."""
    tensors, blobs = [], []
    for inp in _as_inputs(inputs):
        flat = list(_flatten(inp.data))
        shape = [int(d) for d in inp.shape] if inp.shape is not None else shape_of(inp.data, inp.name)
        if math.prod(shape) != len(flat):
            raise ValueError(f"input {inp.name!r}: {len(flat)} values for shape {shape}")
        datatype = (inp.datatype or datatype_of(flat, inp.name)).upper()
        if datatype not in DATATYPES:
            raise ValueError(f"input {inp.name!r}: datatype {datatype!r} is not one of {sorted(DATATYPES)}")
        if datatype != "BYTES" and any(isinstance(v, (str, bytes, bytearray, memoryview)) for v in flat):
            raise TypeError(f"input {inp.name!r}: {datatype} values must be numbers")
        entry: dict[str, Any] = {"name": inp.name, "shape": shape, "datatype": datatype}
        params = dict(inp.parameters or {})
        if datatype == "BYTES" and any(not isinstance(v, str) for v in flat):
            raw = _encode_bytes(flat)
            params["binary_data_size"] = len(raw)
            blobs.append(raw)
        else:
            entry["data"] = flat
        if params:
            entry["parameters"] = params
        tensors.append(entry)
    doc: dict[str, Any] = {"inputs": tensors}
    if infer_id is not None:
        doc["id"] = infer_id
    params = dict(parameters or {})
    if binary_outputs:
        params["binary_data_output"] = True
    if params:
        doc["parameters"] = params
    if outputs is not None:
        doc["outputs"] = [{"name": n} for n in outputs]
    header = json.dumps(doc, separators=(",", ":")).encode()  # NaN/Infinity as the service's json.loads reads them
    if not blobs:
        return header, {"Content-Type": "application/json"}
    return header + b"".join(blobs), {"Content-Type": "application/octet-stream",
                                      HEADER_LENGTH: str(len(header))}


def _decode_raw(datatype: str, shape: list[int], raw: bytes, name: str) -> list[Any]:
    if datatype == "BYTES":
        out: list[Any] = []
        view, offset = memoryview(raw), 0
        while offset < len(view):
            (length,) = struct.unpack_from("<I", view, offset)
            item = bytes(view[offset + 4: offset + 4 + length])
            offset += 4 + length
            try:
                out.append(item.decode("utf-8"))
            except UnicodeDecodeError:
                out.append(item)
        return out
    fmt = STRUCT_FORMATS.get(datatype)
    if fmt is None:
        raise ValueError(f"output {name!r}: unknown datatype {datatype!r}")
    count = math.prod(shape)
    return list(struct.unpack(f"<{count}{fmt}", raw))


def decode_response(content: bytes, header_length: str | None) -> OipInferResponse:
    """An infer answer (JSON, or JSON + binary tensor data) -> OipInferResponse with every output's data as a list."""
    binary = b""
    if header_length is not None:
        n = int(header_length)
        content, binary = content[:n], content[n:]
    doc = json.loads(content)  # json, not pydantic's parser: the service writes NaN for missing forecast bands
    offset = 0
    for out in doc.get("outputs", ()):
        size = (out.get("parameters") or {}).get("binary_data_size")
        if size is not None and "data" not in out:
            out["data"] = _decode_raw(out["datatype"], out["shape"], binary[offset: offset + size], out["name"])
            offset += size
    return OipInferResponse.model_validate(doc)
