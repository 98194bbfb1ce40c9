"""The tiny segmentation model of the test servers (`python -m scripts.pipeline build --profile tiny`): a small
ultralytics-shaped segment graph (images[b,3,S,S] -> output0 [b, 4 + nc + 32, anchors], output1 [b, 32, S/4, S/4])
written with onnx.helper, imported through the family's own importer (segmentation-onnx: packing, batch proof) so the
test servers serve exactly what a user's import serves. Its weights are seeded random: it is a contract model, not a
segmenter (no photo, no training, no network). The default profile imports platedet instead (scripts/pipeline.py).
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from scripts.common import BuildContext
from triserve.models.importing.photos import user_photos
from triserve.models.importing.result import Artifact
from triserve.models.manifest import Source

RECIPES: dict[str, dict[str, Any]] = {"tiny": {"version": "0.1.0", "imgsz": 64, "classes": ["blob", "bar"], "seed": 0}}
ARTIFACTS = ("seg-tiny", "seg-tiny-lite")


def tiny_segment_graph(path: Path, imgsz: int, nc: int, seed: int = 0, nm: int = 32) -> Path:
    """One strided conv per output: boxes (sigmoid x imgsz), class scores (sigmoid), mask coefficients (raw) at
    stride 8, prototypes at stride 4; fixed batch 1 with ultralytics-like metadata."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    grid = imgsz // 8
    ch = 4 + nc + nm
    bias = rng.standard_normal(ch) * 0.5
    bias[4 + nc:] = np.abs(bias[4 + nc:]) * 0.2  # positive coefficients on positive prototypes: masks that are
    # mostly set, shaped by the image (a mask-less contract model would test nothing about masks)
    inits = [numpy_helper.from_array((rng.standard_normal((ch, 3, 8, 8)) * 0.05).astype(np.float32), "w"),
             numpy_helper.from_array(bias.astype(np.float32), "b"),
             numpy_helper.from_array((rng.standard_normal((nm, 3, 4, 4)) * 0.5).astype(np.float32), "wp"),
             numpy_helper.from_array((0.3 + rng.random(nm) * 0.2).astype(np.float32), "bp"),
             numpy_helper.from_array(np.array([1, ch, grid * grid], np.int64), "shape"),
             numpy_helper.from_array(np.array([4, nc, nm], np.int64), "split"),
             numpy_helper.from_array(np.array(float(imgsz), np.float32), "scale")]
    nodes = [helper.make_node("Conv", ["images", "w", "b"], ["conv"], kernel_shape=[8, 8], strides=[8, 8]),
             helper.make_node("Reshape", ["conv", "shape"], ["flat"]),
             helper.make_node("Split", ["flat", "split"], ["box_raw", "cls_raw", "coef"], axis=1),
             helper.make_node("Sigmoid", ["box_raw"], ["box_s"]),
             helper.make_node("Mul", ["box_s", "scale"], ["boxes"]),
             helper.make_node("Sigmoid", ["cls_raw"], ["scores"]),
             helper.make_node("Concat", ["boxes", "scores", "coef"], ["output0"], axis=1),
             helper.make_node("Conv", ["images", "wp", "bp"], ["output1"], kernel_shape=[4, 4], strides=[4, 4])]
    graph = helper.make_graph(
        nodes, "tiny-segment", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, imgsz, imgsz])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, ch, grid * grid]),
         helper.make_tensor_value_info("output1", TensorProto.FLOAT, [1, nm, imgsz // 4, imgsz // 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="triserve")
    model.ir_version = 8
    for k, v in {"task": "segment", "stride": "8", "batch": "1", "imgsz": repr([imgsz, imgsz]),
                 "names": repr(dict(enumerate(RECIPES["tiny"]["classes"][:nc]))), "license": "Apache-2.0"}.items():
        model.metadata_props.add(key=k, value=v)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _photos(root: Path, seed: int) -> Path:
    import cv2

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i, (h, w) in enumerate([(48, 64), (64, 48), (40, 40), (80, 60)]):
        img = (rng.random((h, w, 3)) * 80).astype(np.uint8)
        img[h // 4: h // 2, w // 4: w // 2] = rng.integers(60, 255, 3)
        cv2.imwrite(str(root / f"p{i}.png"), img)
    return root


def build(ctx: BuildContext, recipe: dict) -> list[Artifact]:
    from triserve.families.segmentation.importers.onnx_graph import import_segmentation_onnx

    src = tiny_segment_graph(ctx.work_dir / "tiny-seg.onnx", recipe["imgsz"], len(recipe["classes"]), recipe["seed"])
    source = Source(kind="recipe", license="Apache-2.0", description=(
        "seeded random tiny segment graph (scripts/segmentation/build.py) for the test servers, imported with "
        "segmentation-onnx"))
    result = import_segmentation_onnx(src, ARTIFACTS[0], ctx.version, ctx.work_dir / "import",
                                      photos=user_photos(_photos(ctx.work_dir / "photos", recipe["seed"])),
                                      source=source, verify_ultralytics=False)
    # its fallback: the same graph under the fallback's name (the test servers exercise degraded answers and the
    # fallback slot of every deployment; what makes a real fallback cheaper is fallback.py's INT8)
    lite = ctx.work_dir / "import" / ARTIFACTS[1]
    shutil.copytree(result.primary.staging, lite)
    manifest = result.primary.manifest.model_copy(update={"name": ARTIFACTS[1], "variant": "fallback",
                                                          "fallback_for": ARTIFACTS[0]})
    return [result.primary, Artifact(staging=lite, manifest=manifest)]
