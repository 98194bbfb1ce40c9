"""Make a fixed-batch-1 ONNX graph batch-dynamic, then prove it row by row against the original.

Why: most user exports (ultralytics `export(format="onnx")` without `dynamic=True`) are pinned to batch 1, not only in
the graph IO but inside: the Detect head reshapes with constants such as [1, 64, -1], [1, 4, 16, 8400], [1, 4, 8400].
The runner batches requests, so such a graph either fails at batch > 1 or, worse, reshapes rows into each other.

The rewrite (make_batch_dynamic):
  * graph inputs and outputs whose leading dim is 1 get the symbolic dim 'batch';
  * every Reshape whose target shape is a constant (an initializer or a Constant node) starting with 1 gets a copy of
    that constant with the leading 1 replaced: by -1 when the shape has no other -1 and no 0 (the batch is then
    inferred from the element count, whatever the input's layout), else by 0 (copy the input's dim 0: valid when the
    reshaped tensor still carries the batch first, which the proof below checks);
  * intermediate value_info (shape annotations computed at batch 1) is dropped; unused constants are removed.
Other ops that may pin the batch (Expand/Tile/ConstantOfShape/Resize 'sizes' with a leading 1, Slice/Split/Gather on
axis 0) are not rewritten; they are listed in `suspects` and the proof decides.

The proof (prove_dynamic_batch): run the rewritten graph on batches of distinct real inputs (4 and 2 by default) and
compare each row with a batch-1 run of the ORIGINAL graph on that row alone. A graph that fails (an error or a row
beyond tolerance) is not served batched: the caller publishes the original, fixed-batch graph instead. End-to-end
heads ([b, max_det, 6], a TopK at the end) are compared row set against row set (`compare=`, the detection family's
importers/end2end.compare_batch): near-tied rows may legitimately come out in another order.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from triserve.models.manifest import ParityCheck

if TYPE_CHECKING:
    import onnx

BATCH = "batch"
# a ParityCheck's max_abs_diff when there is nothing to compare (the run failed, NaN/Inf, wrong shape):
# finite so the manifest stays standard JSON (json.dumps would write `Infinity`, which strict JSON parsers reject)
NO_RESULT = 1e30
_PINNING_OPS = {"Expand", "Tile", "ConstantOfShape", "Resize"}
_AXIS0_OPS = {"Slice", "Split", "Gather", "Concat", "Squeeze", "Unsqueeze", "Flatten"}


@dataclass
class Rewrite:
    """What make_batch_dynamic changed (recorded in the manifest's source recipe)."""

    already_dynamic: bool = False
    io: list[str] = field(default_factory=list)  # 'images[0]: 1 -> batch'
    reshapes: list[str] = field(default_factory=list)  # '/model.22/dfl/Reshape: [1, 4, 16, 8400] -> [-1, 4, 16, 8400]'
    suspects: list[str] = field(default_factory=list)  # ops that might pin the batch (left alone; the proof decides)

    def as_dict(self) -> dict:
        return {"already_dynamic": self.already_dynamic, "io": self.io, "reshapes": self.reshapes,
                "suspects": self.suspects}


class NotBatchOne(ValueError):
    """The graph's leading input dim is a fixed size other than 1: nothing here knows what its rows are."""


def leading_dim(value_info) -> int | str | None:
    dims = value_info.type.tensor_type.shape.dim
    if not dims:
        return None
    d = dims[0]
    return d.dim_param if d.HasField("dim_param") else (int(d.dim_value) if d.HasField("dim_value") else None)


def _graph_inputs(model) -> list:
    inits = {i.name for i in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in inits]


def make_batch_dynamic(model: onnx.ModelProto) -> tuple[onnx.ModelProto, Rewrite]:
    """A copy of `model` (onnx.ModelProto) with a symbolic leading batch dim; see the module docstring."""
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    rw = Rewrite()
    inputs = _graph_inputs(out)
    leads = [leading_dim(v) for v in inputs]
    if all(isinstance(d, str) and d for d in leads):
        rw.already_dynamic = True
        for v in list(inputs) + list(g.output):  # one name for the runner ('batch' is what it sizes at warm-up)
            d = v.type.tensor_type.shape.dim
            if d and d[0].HasField("dim_param") and d[0].dim_param != BATCH:
                rw.io.append(f"{v.name}[0]: {d[0].dim_param} -> {BATCH}")
                d[0].dim_param = BATCH
        return out, rw
    bad = [(v.name, d) for v, d in zip(inputs, leads) if d != 1 and not isinstance(d, str)]
    if bad:
        raise NotBatchOne(f"leading input dims {bad}: only batch-1 (or already dynamic) graphs can be made dynamic")

    for v in list(inputs) + list(g.output):
        dims = v.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value == 1:
            dims[0].ClearField("dim_value")
            dims[0].dim_param = BATCH
            rw.io.append(f"{v.name}[0]: 1 -> {BATCH}")
    del g.value_info[:]

    inits = {t.name: t for t in g.initializer}
    consts = {n.output[0]: n for n in g.node if n.op_type == "Constant" and n.output}

    def const_value(name: str) -> np.ndarray | None:
        if name in inits:
            return numpy_helper.to_array(inits[name])
        node = consts.get(name)
        if node is not None:
            for a in node.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
        return None

    new_names: dict[tuple[str, str], str] = {}
    for node in g.node:
        if node.op_type == "Reshape" and len(node.input) >= 2:
            shape = const_value(node.input[1])
            if shape is None or shape.ndim != 1 or shape.size < 2 or int(shape[0]) != 1:
                continue
            target = shape.astype(np.int64).copy()
            target[0] = -1 if not (np.any(target[1:] == -1) or np.any(target[1:] == 0)) else 0
            key = (node.input[1], str(target.tolist()))
            if key not in new_names:
                name = f"{node.input[1]}__dynbatch{len(new_names)}"
                g.initializer.append(numpy_helper.from_array(target, name))
                new_names[key] = name
            rw.reshapes.append(f"{node.name or node.output[0]}: {shape.tolist()} -> {target.tolist()}")
            node.input[1] = new_names[key]
        elif node.op_type in _PINNING_OPS:
            for i in node.input[1:]:
                v = const_value(i) if i else None
                if v is not None and v.ndim == 1 and v.size >= 2 and v.dtype.kind in "iu" and int(v[0]) == 1:
                    rw.suspects.append(f"{node.op_type} {node.name}: constant {v.tolist()}")
        elif node.op_type in _AXIS0_OPS:
            axis = next((a.i for a in node.attribute if a.name == "axis"), None)
            if axis == 0:
                rw.suspects.append(f"{node.op_type} {node.name}: axis 0")
    _drop_unused_constants(out)
    return out, rw


def _drop_unused_constants(model) -> None:
    g = model.graph
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    keep = [t for t in g.initializer if t.name in used]
    if len(keep) != len(g.initializer):
        del g.initializer[:]
        g.initializer.extend(keep)
    dead = [n for n in g.node if n.op_type == "Constant" and not (set(n.output) & used)]
    for n in dead:
        g.node.remove(n)


# -- the proof --------------------------------------------------------------------------------------------------------
Runner = Callable[[dict[str, np.ndarray]], list[np.ndarray]]
RowCompare = Callable[[np.ndarray, np.ndarray], dict[str, float]]


@dataclass
class BatchProof:
    passed: bool
    checks: list[ParityCheck]
    reason: str = ""

    @property
    def worst(self) -> dict[str, float]:
        """Largest diff per component ('boxes', 'scores') over all cases."""
        out: dict[str, float] = {}
        for c in self.checks:
            part = c.case.rsplit("/", 1)[-1]
            out[part] = max(out.get(part, 0.0), c.max_abs_diff)
        return out


def _diff(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return NO_RESULT
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    if not d.size:
        return 0.0
    return float(d.max()) if np.isfinite(d).all() else NO_RESULT


def prove_dynamic_batch(original: Runner, rewritten: Runner, input_name: str, rows: np.ndarray,
                        parts: Mapping[str, tuple[slice | None, float]], batches: Sequence[int] = (4, 2),
                        compare: RowCompare | None = None) -> BatchProof:
    """Each row of the rewritten graph's batch-b output vs the ORIGINAL graph's batch-1 output on that row alone.

    `rows`: [n, ...] distinct real inputs, n >= max(batches). `parts`: component name -> (slice of output0's axis 1,
    tolerance), e.g. {'boxes': (slice(0, 4), 1e-4 * imgsz), 'scores': (slice(4, None), 1e-4)}. Also checks the
    rewritten graph at batch 1 against the original. Errors (a Reshape that cannot take the batch) fail the proof.
    `compare`: for outputs that are not channel slices (end-to-end heads [1, max_det, 6], whose near-tied rows may
    come out in another order: the detection family's end2end.compare_batch), a function (reference row [1, ...],
    row [1, ...]) -> {part: diff}; the slices in `parts` are then unused, only the tolerances.
    """
    if len(rows) < max(batches):
        raise ValueError(f"need {max(batches)} distinct rows, got {len(rows)}")
    singles = [original({input_name: rows[i:i + 1]})[0] for i in range(max(batches))]
    checks: list[ParityCheck] = []
    reason = ""

    def row_diffs(got: np.ndarray, i: int) -> dict[str, float]:
        if i >= got.shape[0]:
            return {part: NO_RESULT for part in parts}
        if compare is not None:
            return compare(singles[i], got[i:i + 1])
        return {part: _diff(got[i:i + 1][:, sl], singles[i][:, sl]) for part, (sl, _) in parts.items()}

    for b in (1, *batches):
        case = f"batch{b}-vs-original-batch1"
        try:
            got = rewritten({input_name: rows[:b]})[0]
        except Exception as exc:  # noqa: BLE001  # any runtime failure at this batch size refutes the rewrite
            reason = reason or f"{case}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            for part, (_, tol) in parts.items():
                checks.append(ParityCheck(case=f"{case}/{part}", max_abs_diff=NO_RESULT, tolerance=tol,
                                          passed=False))
            continue
        if got.shape[0] != b:
            reason = reason or f"{case}: output batch {got.shape[0]} != {b}"
        per_row = [row_diffs(got, i) for i in range(b)]
        for part, (_, tol) in parts.items():
            diff = max(min(float(r.get(part, NO_RESULT)), NO_RESULT) for r in per_row)
            checks.append(ParityCheck(case=f"{case}/{part}", max_abs_diff=diff, tolerance=tol, passed=diff <= tol))
    failed = [c for c in checks if not c.passed]
    if failed and not reason:
        worst = max(failed, key=lambda c: c.max_abs_diff)
        reason = f"{worst.case}: max abs diff {worst.max_abs_diff:.3g} > {worst.tolerance:.3g}"
    return BatchProof(passed=not failed, checks=checks, reason=reason)


def distinct_rows(base: np.ndarray, n: int) -> np.ndarray:
    """n distinct proof inputs (a row mixed up with another must show) from [k, ...] letterboxed photos: the photos,
    then, when there are too few, their mirror images, negatives and mirrored negatives."""
    rows = [base]
    for make in (lambda r: r[..., ::-1], lambda r: 1.0 - r, lambda r: (1.0 - r)[..., ::-1]):
        if sum(len(r) for r in rows) >= n:
            break
        rows.append(np.ascontiguousarray(make(base)))
    return np.concatenate(rows)[:n]


def save(model, path: Path) -> Path:
    import onnx

    onnx.save(model, str(path))
    return Path(path)
