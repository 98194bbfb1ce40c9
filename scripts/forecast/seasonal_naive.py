"""The seasonal-naive fallback as a tiny ONNX graph (the runner only runs ONNX graphs, never numpy code).

It works in the SAME scaled space as the primary forecaster: input "window" [batch, context] is
(x - mean(window)) / scale, output "forecast" [batch, horizon] is unscaled by the service exactly like the primary's.
With m = season_length and h = 0 .. horizon-1:

    plain:       forecast[:, h] = window[:, context - m + (h mod m)]
    with drift:  forecast[:, h] = window[:, context - m + (h mod m)] + (h // m + 1) * d,
                 d = mean(window[:, m:] - window[:, :-m])          (the mean seasonal difference in the window)
                   = (sum(window[:, -m:]) - sum(window[:, :m])) / (context - m)

i.e. the value one season before the target (from the last full season of the window, repeated for h >= m), plus,
with drift, the window's average year-on-year change once per season ahead. Both are equivariant to the affine window
scaling, so unscale(graph(scaled window)) is exactly the seasonal-naive forecast in original units.

Graph: Gather with constant indices on axis 1; with drift also MatMul(window, constant [context, 1] weights) * steps
and an Add.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

INPUT_NAME = "window"
OUTPUT_NAME = "forecast"


def seasonal_naive_indices(context: int, horizon: int, season_length: int) -> np.ndarray:
    """Window positions the forecast copies: context - m + (h mod m) for every step h."""
    if season_length <= 0 or horizon <= 0:
        raise ValueError("season_length and horizon must be positive")
    if context < season_length:
        raise ValueError(f"context {context} must cover one season of {season_length} points")
    h = np.arange(horizon, dtype=np.int64)
    return (context - season_length + h % season_length).astype(np.int64)


def _drift_weights(context: int, season_length: int) -> np.ndarray:
    """w such that window @ w = mean seasonal difference (telescoped: last season sum - first season sum)."""
    if context <= season_length:
        raise ValueError(f"drift needs context > season_length ({context} <= {season_length})")
    j = np.arange(context)
    return ((j >= context - season_length).astype(np.float64) - (j < season_length)) / (context - season_length)


def _drift_steps(horizon: int, season_length: int) -> np.ndarray:
    return (np.arange(horizon) // season_length + 1).astype(np.float64)


def seasonal_naive_reference(windows: np.ndarray, horizon: int, season_length: int, drift: bool = False) -> np.ndarray:
    """The numpy reference the ONNX graph is gated against (any units: scaled or original), computed in float64."""
    w = np.atleast_2d(np.asarray(windows, dtype=np.float64))
    out = w[:, seasonal_naive_indices(w.shape[1], horizon, season_length)]
    if drift:
        d = (w[:, season_length:] - w[:, :-season_length]).mean(axis=1)
        out = out + d[:, None] * _drift_steps(horizon, season_length)[None, :]
    return out


def make_seasonal_naive_onnx(path: Path, context: int, horizon: int, season_length: int, drift: bool = False,
                             opset: int = 17) -> Path:
    """Write the graph ("window" float32 [batch, context] -> "forecast" float32 [batch, horizon])."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(seasonal_naive_indices(context, horizon, season_length), name="season_idx")]
    if drift:
        inits += [
            numpy_helper.from_array(_drift_weights(context, season_length).astype(np.float32)[:, None], "drift_w"),
            numpy_helper.from_array(_drift_steps(horizon, season_length).astype(np.float32)[None, :], "drift_steps"),
        ]
        nodes = [
            helper.make_node("Gather", [INPUT_NAME, "season_idx"], ["naive"], axis=1, name="seasonal_naive"),
            helper.make_node("MatMul", [INPUT_NAME, "drift_w"], ["drift"], name="mean_seasonal_difference"),
            helper.make_node("Mul", ["drift", "drift_steps"], ["drift_h"], name="drift_per_step"),
            helper.make_node("Add", ["naive", "drift_h"], [OUTPUT_NAME], name="add_drift"),
        ]
    else:
        nodes = [helper.make_node("Gather", [INPUT_NAME, "season_idx"], [OUTPUT_NAME], axis=1, name="seasonal_naive")]
    graph = helper.make_graph(
        nodes, "seasonal_naive",
        inputs=[helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", context])],
        outputs=[helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", horizon])],
        initializer=inits,
    )
    model = helper.make_model(graph, producer_name="triserve.scripts.forecast",
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # opset 17 era; readable by every onnxruntime >= 1.14
    model.doc_string = (f"seasonal naive{' with drift' if drift else ''}, m={season_length}, context={context}, "
                        f"horizon={horizon}, in the scaled window space")
    onnx.checker.check_model(model, full_check=True)
    path = Path(path)
    onnx.save(model, str(path))
    return path
