"""The Open Inference Protocol v2 documents over REST (/v2: services/protocols/oip_rest.py writes them as plain
dicts), typed for the client; as tolerant as triserve_client.models (extra fields kept)."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from triserve_client.models import Answer


class OipTensorMeta(Answer):
    name: str
    datatype: str
    shape: list[int] = Field(description="-1 marks a variable dimension.")


class OipModelMetadata(Answer):
    """GET /v2/models/{name}[/versions/{v}]."""

    name: str
    versions: list[str] = Field(default_factory=list)
    platform: str = ""
    inputs: list[OipTensorMeta] = Field(default_factory=list)
    outputs: list[OipTensorMeta] = Field(default_factory=list)


class OipServerMetadata(Answer):
    """GET /v2."""

    name: str
    version: str
    extensions: list[str] = Field(default_factory=list)


class OipTensor(Answer):
    """One output tensor; `data` is flat, row-major (`nested()` shapes it). BYTES elements are str (bytes when they
    came as binary data and are not UTF-8)."""

    name: str
    datatype: str
    shape: list[int]
    data: list[Any] = Field(default_factory=list)
    parameters: dict[str, Any] = Field(default_factory=dict)

    def nested(self) -> Any:
        """`data` as nested lists of `shape` (a scalar for shape [])."""
        return nest(self.data, self.shape)


class OipInferResponse(Answer):
    """POST /v2/models/{name}[/versions/{v}]/infer. `parameters` carries request_id, served_model, served_version,
    degraded (+ degraded_reason) and the stage timings (*_ms)."""

    model_name: str
    model_version: str = ""
    id: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    outputs: list[OipTensor] = Field(default_factory=list)

    @property
    def request_id(self) -> str | None:
        rid = self.parameters.get("request_id")
        return None if rid is None else str(rid)

    def output(self, name: str) -> OipTensor:
        """The output called `name` (KeyError if the answer has none)."""
        for t in self.outputs:
            if t.name == name:
                return t
        raise KeyError(f"no output {name!r}; outputs: {[t.name for t in self.outputs]}")


def nest(flat: list[Any], shape: list[int]) -> Any:
    """Row-major flat values -> nested lists of `shape`."""
    if not shape:
        return flat[0] if flat else None
    if len(shape) == 1:
        return list(flat)
    step = len(flat) // shape[0] if shape[0] else 0
    return [nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]
