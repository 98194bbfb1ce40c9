"""Tiny ultralytics-like ONNX detectors built with onnx.helper, and photos to run them on (no network)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def build_detector(path: Path, nc: int = 2, size: int = 32, batch: int | str = 1, names: bool = True,
                   imgsz_meta: bool = True, task: str | None = "detect", pin_rows: bool = False, head: str = "detect",
                   dynamic_spatial: bool = False, baked_anchors: bool | None = None, seed: int = 0) -> Path:
    """images[batch,3,S,S] -> output0[batch,4+nc,(S/8)^2], shaped like ultralytics' Detect export.

    Fixed batch 1 with the constants that pin it, as real exports have them: Reshape [1, C, -1] (the -> 0 case) and
    Reshape [1, 4, anchors] (the -> -1 case). Nodes are named like ultralytics' ('/model.22/...').
    head: 'detect' | 'segment' (output0 4+nc+32 channels + a prototype output1) | 'end2end' ([b, anchors, 6]: x1, y1,
    x2, y2, sigmoid score, integral class id) | 'end2end_raw' (the [b, anchors, 6] layout with raw conv values).
    pin_rows: a Slice on axis 0 (rows 0:1) before the output: no constant rewrite can batch that graph.
    dynamic_spatial: height/width symbolic; the anchors Reshape then says [1, 4, -1] unless baked_anchors (a graph
    that claims any size but only runs at `size`).
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    baked = (not dynamic_spatial) if baked_anchors is None else baked_anchors
    grid = size // 8
    anchors = grid * grid
    extra = 32 if head == "segment" else 0
    ch = 6 if head.startswith("end2end") else 4 + nc + extra
    inits = [
        numpy_helper.from_array((rng.standard_normal((ch, 3, 8, 8)) * 0.05).astype(np.float32), "w"),
        numpy_helper.from_array((rng.standard_normal(ch) * 0.5).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([1, ch, -1], np.int64), "/model.22/Constant_output_0"),
        numpy_helper.from_array(np.array([1, 4, anchors if baked else -1], np.int64),
                                "/model.22/dfl/Constant_output_0"),
        numpy_helper.from_array(np.array([4, ch - 4], np.int64), "split"),
        numpy_helper.from_array(np.array(float(size), np.float32), "scale"),
    ]
    nodes = [
        helper.make_node("Conv", ["images", "w", "b"], ["conv"], name="/model.22/cv2.0/cv2.0.2/Conv",
                         kernel_shape=[8, 8], strides=[8, 8]),
        helper.make_node("Reshape", ["conv", "/model.22/Constant_output_0"], ["flat"], name="/model.22/Reshape"),
    ]
    if head == "end2end_raw":  # the layout without the values: raw conv outputs, no sigmoid, no class ids
        nodes.append(helper.make_node("Transpose", ["flat"], ["output0"], name="/model.22/Transpose", perm=[0, 2, 1]))
    elif head == "end2end":
        # rows like ultralytics' one-to-one head (without its top-k: one row per anchor): x1, y1, x2, y2 in pixels,
        # a sigmoid score and an integral class id in [0, nc)
        inits += [numpy_helper.from_array(np.array([4, 1, 1], np.int64), "e2e_split"),
                  numpy_helper.from_array(np.array(float(nc) - 1e-3, np.float32), "nc")]
        nodes += [
            helper.make_node("Transpose", ["flat"], ["rows"], name="/model.22/Transpose", perm=[0, 2, 1]),
            helper.make_node("Split", ["rows", "e2e_split"], ["r_box", "r_score", "r_cls"], name="/model.22/Split",
                             axis=2),
            helper.make_node("Sigmoid", ["r_box"], ["s_box"], name="/model.22/Sigmoid_box"),
            helper.make_node("Mul", ["s_box", "scale"], ["e_box"], name="/model.22/Mul_box"),
            helper.make_node("Sigmoid", ["r_score"], ["e_score"], name="/model.22/Sigmoid"),
            helper.make_node("Sigmoid", ["r_cls"], ["s_cls"], name="/model.22/Sigmoid_cls"),
            helper.make_node("Mul", ["s_cls", "nc"], ["m_cls"], name="/model.22/Mul_cls"),
            helper.make_node("Floor", ["m_cls"], ["e_cls"], name="/model.22/Floor"),
            helper.make_node("Concat", ["e_box", "e_score", "e_cls"], ["output0"], name="/model.22/Concat_5", axis=2),
        ]
    else:
        last = "head" if pin_rows else "output0"
        nodes += [
            helper.make_node("Split", ["flat", "split"], ["box_raw", "cls_raw"], name="/model.22/Split", axis=1),
            helper.make_node("Reshape", ["box_raw", "/model.22/dfl/Constant_output_0"], ["box_r"],
                             name="/model.22/dfl/Reshape"),
            helper.make_node("Sigmoid", ["box_r"], ["box_s"], name="/model.22/Sigmoid_box"),
            helper.make_node("Mul", ["box_s", "scale"], ["boxes"], name="/model.22/Mul_box"),
            helper.make_node("Sigmoid", ["cls_raw"], ["scores"], name="/model.22/Sigmoid"),
            helper.make_node("Concat", ["boxes", "scores"], [last], name="/model.22/Concat_5", axis=1),
        ]
        if pin_rows:
            inits += [numpy_helper.from_array(np.array([0], np.int64), n) for n in ("s0", "ax0")]
            inits.append(numpy_helper.from_array(np.array([1], np.int64), "e1"))
            nodes.append(helper.make_node("Slice", ["head", "s0", "e1", "ax0"], ["output0"], name="/model.22/Pin"))
    hw = ["height", "width"] if dynamic_spatial else [size, size]
    inputs = [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, *hw])]
    out_shape = [batch, anchors, 6] if head.startswith("end2end") else [batch, ch, anchors]
    outputs = [helper.make_tensor_value_info("output0", TensorProto.FLOAT, out_shape)]
    if head == "segment":
        inits.append(numpy_helper.from_array((rng.standard_normal((32, 3, 4, 4)) * 0.05).astype(np.float32), "wp"))
        nodes.append(helper.make_node("Conv", ["images", "wp"], ["output1"], name="/model.22/proto/Conv",
                                      kernel_shape=[4, 4], strides=[4, 4]))
        outputs.append(helper.make_tensor_value_info("output1", TensorProto.FLOAT, [batch, 32, size // 4, size // 4]))
    graph = helper.make_graph(nodes, "tiny-yolo", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch")
    model.ir_version = 8
    meta = {"author": "test", "stride": "8", "batch": str(batch)}
    if task:
        meta["task"] = task
    if names:
        meta["names"] = repr({i: f"class{i}" for i in range(nc)})
    if imgsz_meta:
        meta["imgsz"] = repr([size, size])
    for k, v in meta.items():
        model.metadata_props.add(key=k, value=v)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return Path(path)


@pytest.fixture
def make_detector(tmp_path):
    def make(name: str = "tiny.onnx", **kw) -> Path:
        return build_detector(tmp_path / name, **kw)

    return make


@pytest.fixture(scope="session")
def photo_dir(tmp_path_factory) -> Path:
    """Six generated photos (coloured rectangles on noise), JPEG, of mixed sizes."""
    import cv2

    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate([(48, 64), (64, 48), (40, 40), (80, 60), (50, 70), (32, 32)]):
        img = (rng.random((h, w, 3)) * 80).astype(np.uint8)
        for _ in range(3):
            x0, y0 = rng.integers(0, w // 2), rng.integers(0, h // 2)
            img[y0:y0 + h // 3, x0:x0 + w // 3] = rng.integers(60, 255, 3)
        cv2.imwrite(str(root / f"p{i}.jpg"), img)
    return root
