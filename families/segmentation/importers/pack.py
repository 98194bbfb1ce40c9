"""Graph surgery of a segment export for serving: float32 IO, and the two outputs packed into one row.

Why: the runner returns one output row per item (runners/compute.py), and ultralytics' segment export has two:
output0 [b, 4 + nc + nm, anchors] and the prototypes output1 [b, nm, S/4, S/4]. Appending Reshape([0, -1]) to
each and a Concat on axis 1 gives one output `output` [b, (4 + nc + nm) * anchors + nm * (S/4)^2], split back by
the family (postprocess.split_row) from the manifest's layout. A half-precision export (platedet's is) is turned into
float32 (weights, casts, IO): the runner feeds float32, and ONNX Runtime's CPU kernels are float32. Both rewrites are
checked by the importer against the original graph (onnx_graph.import_segmentation_onnx: the parity gate).
"""
from __future__ import annotations

from typing import Any

import numpy as np

PACKED = "output"


def to_float32(model: Any) -> bool:
    """Half-precision weights, constants, casts and IO -> float32, in place (an onnx.ModelProto; onnx is imported
    here, not at module level: `triserve import` lists its kinds without the export extra); True if anything was
    half."""
    import onnx
    from onnx import TensorProto, numpy_helper

    changed = False
    g = model.graph
    for i, init in enumerate(list(g.initializer)):
        if init.data_type == TensorProto.FLOAT16:
            g.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float32),
                                                              init.name))
            changed = True
    for node in g.node:
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.FLOAT16:
                attr.i = TensorProto.FLOAT
                changed = True
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == TensorProto.FLOAT16:
                attr.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(attr.t).astype(np.float32),
                                                        attr.t.name))
                changed = True
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT16:
            v.type.tensor_type.elem_type = TensorProto.FLOAT
            changed = True
    return changed


def pack_outputs(model: Any, head: str, protos: str) -> Any:
    """Replace the graph outputs `head` and `protos` with one float32 `output` [b, -1] (head first), in place."""
    from onnx import TensorProto, helper, numpy_helper

    g = model.graph
    shape = numpy_helper.from_array(np.array([0, -1], np.int64), "triserve_pack_shape")
    g.initializer.append(shape)
    g.node.extend([
        helper.make_node("Reshape", [head, shape.name], ["triserve_pack_head"], name="/triserve/pack/head"),
        helper.make_node("Reshape", [protos, shape.name], ["triserve_pack_protos"], name="/triserve/pack/protos"),
        helper.make_node("Concat", ["triserve_pack_head", "triserve_pack_protos"], [PACKED], name="/triserve/pack",
                         axis=1),
    ])
    batch = g.output[0].type.tensor_type.shape.dim[0]
    dim0: str | int = batch.dim_param if batch.HasField("dim_param") else (batch.dim_value or "batch")
    del g.output[:]
    g.output.append(helper.make_tensor_value_info(PACKED, TensorProto.FLOAT, [dim0, "values"]))
    return model
