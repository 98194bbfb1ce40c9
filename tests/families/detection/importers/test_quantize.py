"""INT8 for ultralytics detectors keeps the Detect head's decode FP32 (families/detection/importers/quantize.py)."""
from __future__ import annotations

import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper

from triserve.families.detection.importers.quantize import detect_decode_nodes


def test_detect_decode_nodes_keep_the_head_decode_fp32():
    """Nodes of the output's module stay FP32 except its per-level conv stacks (cv2.* boxes, cv3.* classes)."""
    def node(op, name, inputs, output):
        return helper.make_node(op, inputs, [output], name=name)

    nodes = [node("Conv", "/model.21/cv2/conv/Conv", ["x", "w"], "a"),
             node("Conv", "/model.22/cv2.0/cv2.0.0/conv/Conv", ["a", "w"], "b"),
             node("Conv", "/model.22/cv3.0/cv3.0.2/Conv", ["a", "w"], "c"),
             node("Softmax", "/model.22/dfl/Softmax", ["b"], "d"),
             node("Sigmoid", "/model.22/Sigmoid", ["c"], "e"),
             helper.make_node("Concat", ["d", "e"], ["output0"], name="/model.22/Concat_26", axis=1)]
    f = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [f("x", TensorProto.FLOAT, None), f("w", TensorProto.FLOAT, None)],
                              [f("output0", TensorProto.FLOAT, None)])
    assert detect_decode_nodes(helper.make_model(graph)) == [
        "/model.22/dfl/Softmax", "/model.22/Sigmoid", "/model.22/Concat_26"]
