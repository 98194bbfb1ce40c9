"""INT8 for an ultralytics detector: the Detect head's decode stays FP32, the rest is quantised (static QDQ).

Why: quantising the decode (DFL, anchors, strides, sigmoid, Concat) loses every box (measured on yolov8n-coco: no box
at all), while the convolutions before it quantise well. The nodes are found by ultralytics' module names, or by a
graph walk where the export has none. Used by the detection-onnx importer's fallback and scripts/variants.py.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from triserve.models.importing.graphs import quantize_qdq


def detect_decode_nodes(model) -> list[str]:
    """Nodes of the ultralytics Detect head that decode boxes and scores (kept FP32 in the INT8 graph).

    The head is the module that produces the graph output (e.g. '/model.22/'); its per-level conv stacks
    ('cv2.*' boxes, 'cv3.*' classes) are ordinary convolutions and are quantised, everything after them is not.
    """
    out = model.graph.output[0].name
    producer = next(n for n in model.graph.node if out in n.output)
    prefix = producer.name.rsplit("/", 1)[0] + "/"
    keep = (prefix + "cv2.", prefix + "cv3.")
    return [n.name for n in model.graph.node if n.name.startswith(prefix) and not n.name.startswith(keep)]


def decode_nodes(model) -> list[str]:
    """The Detect head's decode (DFL, anchors, strides, sigmoid, Concat): kept FP32 under INT8.

    ultralytics names its nodes by module ('/model.22/dfl/...'): detect_decode_nodes finds them by
    that prefix. A graph without such names: everything downstream of the first Reshape (the head's flattening).
    """
    out = model.graph.output[0].name
    producer = next((n for n in model.graph.node if out in n.output), None)
    if producer is not None and "/" in (producer.name or ""):
        prefix = producer.name.rsplit("/", 1)[0] + "/"
        convs = (prefix + "one2one_cv2.", prefix + "one2one_cv3.")  # an end-to-end head's branch: plain convs
        return [n for n in detect_decode_nodes(model) if not n.startswith(convs)]
    first = next((n for n in model.graph.node if n.op_type == "Reshape"), None)
    if first is None:
        return []
    tainted, names = set(first.output), [first.name]
    for n in model.graph.node:  # ONNX nodes are topologically sorted
        if set(n.input) & tainted:
            tainted |= set(n.output)
            names.append(n.name)
    return [n for n in names if n]


def last_head_convs(model) -> list[str]:
    """The head's final 1x1 convolutions (ultralytics 'cv2.<i>.2' boxes, 'cv3.<i>.2' classes): their outputs feed the
    decode directly, so their quantisation error lands in the scores one to one."""
    return [n.name for n in model.graph.node if n.op_type == "Conv" and
            any(f"/cv{k}.{i}.2/" in n.name or n.name.endswith(f"/cv{k}.{i}.2") for k in (2, 3) for i in range(8))]


def quantize_int8(src: Path, dst: Path, feeds: list[dict[str, np.ndarray]], work: Path, keep_fp32: str) -> dict:
    """Static INT8 with the QDQ settings of models/importing/graphs.quantize_qdq; keep_fp32: 'decode' or
    'decode+last-convs' (the head's box decode, and optionally its last 1x1 convolutions, stay FP32)."""
    def exclude(model) -> list[str]:
        return decode_nodes(model) + (last_head_convs(model) if keep_fp32 == "decode+last-convs" else [])

    return {**quantize_qdq(src, dst, feeds, work, exclude), "fp32_nodes": keep_fp32}
