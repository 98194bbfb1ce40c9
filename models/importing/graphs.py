"""ONNX graphs as an importer handles them: a session with the runner's settings, the IO a manifest records, static
INT8 quantisation and latency measured fairly. onnx and onnxruntime.quantization are imported inside the functions
(the export extra); onnxruntime itself is the serving runtime."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from triserve.models.importing.labels import names_list
from triserve.models.importing.result import ImportRefused
from triserve.models.manifest import TensorSpec


def ort_session(model_path: Path, threads: int = 0):
    """A CPU ONNX Runtime session with full graph optimisation (the same settings the runner uses)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    return ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])


def read_export(path: Path, task: str | None = None, elsewhere: str = ""):
    """A user's ONNX export and its metadata (key -> value); any parse failure is a refusal, and so is an ultralytics
    export whose metadata records another task than `task` (`elsewhere`: which importer takes that one)."""
    import onnx

    try:
        model = onnx.load(str(path))
    except Exception as exc:  # any parse failure is a refusal
        raise ImportRefused(f"{path}: not a readable ONNX model ({type(exc).__name__}: {exc})") from exc
    meta = {p.key: p.value for p in model.metadata_props}
    found = meta.get("task", "").strip().lower()
    if task is not None and found and found != task:
        raise ImportRefused(f"{Path(path).name}: metadata task {found!r}, not {task!r} ({elsewhere})")
    return model, meta


def metadata_literal(meta: Mapping[str, str], key: str):
    """An ONNX metadata value written as a Python literal (ultralytics: names, imgsz, stride, kpt_shape)."""
    import ast

    try:
        return ast.literal_eval(meta[key])
    except (ValueError, SyntaxError) as exc:
        raise ImportRefused(f"ONNX metadata {key!r} is not a Python literal: {meta[key][:80]!r}") from exc


def value_dims(value_info) -> list[int | str | None]:
    """A graph input's or output's dims: the symbolic name, the fixed size, or None when neither is set."""
    out: list[int | str | None] = []
    for d in value_info.type.tensor_type.shape.dim:
        out.append(d.dim_param if d.HasField("dim_param") else (int(d.dim_value) if d.HasField("dim_value") else None))
    return out


def export_labels(name: str, labels, meta: Mapping[str, str], missing: str) -> tuple[list[str], str]:
    """An ultralytics export's class names and where they came from: the caller's labels file wins (its count must
    match the 'names' metadata when there is one), else the metadata; ImportRefused ending in `missing` without
    either."""
    meta_names = names_list(metadata_literal(meta, "names"), "ONNX metadata 'names'") if "names" in meta else None
    if labels is not None:
        labels = [str(x) for x in labels]
        if meta_names is not None and len(meta_names) != len(labels):
            raise ImportRefused(f"{name}: the labels file has {len(labels)} classes but the ONNX metadata names "
                                f"{len(meta_names)}")
        return labels, "labels file"
    if meta_names is not None:
        return meta_names, "metadata"
    raise ImportRefused(f"{name}: no class names{missing}")


def image_input(model, name: str):
    """A YOLO export's one real input (initializers left out) and its dims; ImportRefused when it has another count."""
    inits = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in inits]
    if len(inputs) != 1:
        raise ImportRefused(f"{name}: expected one input (images[b,3,S,S]), got {[v.name for v in inputs]}")
    return inputs[0], value_dims(inputs[0])


def io_specs(path: Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The graph's inputs and outputs as the manifest records them (symbolic dims by name)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph

    def spec(v) -> TensorSpec:
        t = v.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name
        return TensorSpec(name=v.name, dtype=dtype, shape=[d.dim_param or int(d.dim_value) for d in t.shape.dim])

    return [spec(v) for v in graph.input], [spec(v) for v in graph.output]


def opset_of(path: Path) -> int:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return int(next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")))


@contextmanager
def quiet_root_logger() -> Iterator[None]:
    """The quantiser logs one INFO line per tensor on the root logger."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        root.setLevel(level)


def quantize_qdq(src: Path, dst: Path, feeds: list[dict[str, np.ndarray]], work: Path,
                 exclude: Callable[[object], list[str]] | None = None) -> dict:
    """Static INT8 in QDQ format: per-channel QInt8 weights, QUInt8 activations, MinMax calibration on `feeds`.
    `exclude(model)` names the nodes kept FP32 (chosen on the pre-processed graph); returns what was done."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter(feeds)

        def get_next(self):
            return next(self._it, None)

    work.mkdir(parents=True, exist_ok=True)
    pre = work / "preprocessed.onnx"
    with quiet_root_logger():
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        nodes = exclude(onnx.load(str(pre))) if exclude else []
        quantize_static(str(pre), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax, nodes_to_exclude=nodes)
    return {"tool": "onnxruntime.quantization.quantize_static", "format": "QDQ", "per_channel": True,
            "activation_type": "QUInt8", "weight_type": "QInt8", "calibrate_method": "MinMax",
            "pre_process": "quant_pre_process(skip_symbolic_shape=True)", "excluded_nodes": len(nodes),
            "calibration_samples": len(feeds)}


def time_interleaved(paths: Mapping[str, Path], feeds: Mapping[str, dict[str, np.ndarray]], threads: int,
                     warmup: int, repeats: int, min_sample_ms: float) -> dict[str, dict[str, dict[str, float]]]:
    """ms per call for every graph and feed: {label: {feed: {median, min, max, calls_per_sample}}}.

    Same session options for all; the graphs take turns sample by sample (order rotated each round) so load from
    other processes hits all of them alike. Each sample repeats the call `calls_per_sample` times (chosen from one
    timed call of the first graph, the base, so a sample lasts ~min_sample_ms) and is divided by it.
    """
    sessions = {label: ort_session(p, threads=threads) for label, p in paths.items()}
    labels = list(sessions)
    out: dict[str, dict[str, dict[str, float]]] = {label: {} for label in labels}
    for key, feed in feeds.items():
        for label in labels:
            for _ in range(max(1, warmup)):
                sessions[label].run(None, feed)
        t0 = time.perf_counter()
        sessions[labels[0]].run(None, feed)
        one = max((time.perf_counter() - t0) * 1e3, 1e-3)
        calls = int(min(200, max(1, round(min_sample_ms / one))))
        samples: dict[str, list[float]] = {label: [] for label in labels}
        for r in range(repeats):
            for label in labels[r % len(labels):] + labels[:r % len(labels)]:
                sess = sessions[label]
                t0 = time.perf_counter()
                for _ in range(calls):
                    sess.run(None, feed)
                samples[label].append((time.perf_counter() - t0) * 1e3 / calls)
        for label, v in samples.items():
            out[label][key] = {"median": float(np.median(v)), "min": float(np.min(v)), "max": float(np.max(v)),
                               "calls_per_sample": float(calls)}
    return out
