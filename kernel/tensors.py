"""Tensor metadata and the checks every raw-tensor contract shares (transport-neutral, numpy only).

A family declares its pipeline's tensors (kernel/family.py: `api.oip.inputs/outputs`) as TensorMeta: the
Open Inference Protocol adapter (services/protocols/oip.py) decodes and encodes them generically from these
declarations, and its model metadata and Triton model config are written from them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

import numpy as np

from triserve.kernel.errors import ApiError


@dataclass(frozen=True)
class TensorMeta:
    """A tensor's name, datatype and shape (-1 = any); inputs may be optional or accept other datatypes.

    For a family pipeline's tensors: an input names the request field it fills (`field`; BYTES inputs are decoded
    as UTF-8 text unless `binary`), an output says how to read it from the response model (`value`).
    """

    name: str
    datatype: str
    shape: tuple[int, ...]
    optional: bool = False
    also: tuple[str, ...] = ()  # further accepted datatypes (e.g. FP64 where FP32 is declared)
    field: str = ""  # input: the request field it fills
    binary: bool = False  # input: BYTES items stay bytes (encoded images), not UTF-8 text
    value: Callable[[Any], Any] | None = dataclass_field(default=None, compare=False)  # output: response -> values


# The OIP outputs of a classifier's response (the text and image classification families): `results`, each with its
# top label and score and its `top_k` list of labels and scores, best first.
TOP_K_OUTPUTS = (
    TensorMeta("LABEL", "BYTES", (-1,), value=lambda r: [x.label for x in r.results]),
    TensorMeta("SCORE", "FP32", (-1,), value=lambda r: [x.score for x in r.results]),
    TensorMeta("TOP_K_LABELS", "BYTES", (-1, -1), value=lambda r: [[t.label for t in x.top_k] for x in r.results]),
    TensorMeta("TOP_K_SCORES", "FP32", (-1, -1), value=lambda r: [[t.score for t in x.top_k] for x in r.results]))


def bad_request(code: str, message: str, details: Any = None) -> ApiError:
    return ApiError(400, code, message, details)


def check_batch(n: int, cap: int, name: str) -> None:
    """A raw tensor batch has 1..cap rows."""
    if n < 1:
        raise bad_request("empty_batch", f"input {name!r} has no items", {"input": name})
    if n > cap:
        raise ApiError(422, "too_many_items", f"{n} items exceed the limit of {cap}", {"limit": cap, "received": n})


def check_finite(arr: np.ndarray, name: str) -> None:
    if not np.isfinite(arr).all():
        raise ApiError(422, "non_finite_value", f"input {name!r} contains NaN or infinity", {"input": name})
