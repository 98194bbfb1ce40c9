"""The tiny image classifier of the test servers (`python -m scripts.pipeline build --profile tiny`): a colour
classifier written with onnx.helper (global average pool -> a 3x4 linear layer -> softmax) whose weights are set by
hand, so a solid red, green, blue or black image is that label, imported through the family's own importer
(classification-onnx: IO checks, batch proof, the raw-graph reference, the INT8 gate) so the test servers serve
exactly what a user's import serves. No training, no network. The default profile imports EfficientNet-Lite0 instead
(scripts/classification/imagenet.py through scripts/pipeline.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from scripts.common import BuildContext
from triserve.models.importing.photos import user_photos
from triserve.models.importing.result import Artifact
from triserve.models.manifest import Source

LABELS = ["red", "green", "blue", "black"]
RECIPES: dict[str, dict[str, Any]] = {"tiny": {"version": "0.1.0", "imgsz": 32, "resize_size": 36, "seed": 0}}
ARTIFACTS = ("colors-tiny", "colors-tiny-int8")
# logits = W . mean RGB in [0, 1] + b: a pure primary wins its own row by 15, black wins on a dark image
WEIGHTS = np.array([[10, -5, -5], [-5, 10, -5], [-5, -5, 10], [-10, -10, -10]], dtype=np.float32)
BIAS = np.array([0, 0, 0, 8], dtype=np.float32)


def tiny_color_graph(path: Path, imgsz: int) -> Path:
    """images [1, 3, S, S] (RGB / 255) -> probs [1, 4]; fixed batch 1, as many users' exports are."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
             helper.make_node("Gemm", ["flat", "w", "b"], ["logits"], transB=1),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=1)]
    graph = helper.make_graph(
        nodes, "tiny-colors", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, imgsz, imgsz])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, len(LABELS)])],
        [numpy_helper.from_array(WEIGHTS, "w"), numpy_helper.from_array(BIAS, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="triserve")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def photos(root: Path, seed: int) -> Path:
    """Solid and noisy colour photos of assorted sizes (the checks' and the INT8 calibration's images)."""
    import cv2

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    colours = [(220, 20, 20), (20, 200, 30), (30, 40, 210), (10, 10, 10), (200, 60, 40), (40, 180, 90),
               (60, 60, 200), (30, 25, 20), (180, 30, 160), (90, 90, 90)]
    for i, rgb in enumerate(colours):
        h, w = [(48, 64), (64, 48), (40, 40), (80, 60), (33, 90)][i % 5]
        img = np.clip(np.asarray(rgb) + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
        cv2.imwrite(str(root / f"c{i}.png"), img[..., ::-1])
    return root


def build(ctx: BuildContext, recipe: dict) -> list[Artifact]:
    from triserve.families.classification.importers.onnx_graph import import_classification_onnx
    from triserve.families.classification.manifest import ClassificationPreprocess

    src = tiny_color_graph(ctx.work_dir / "tiny-colors.onnx", recipe["imgsz"])
    pre = ClassificationPreprocess(imgsz=recipe["imgsz"], resize_size=recipe["resize_size"])
    source = Source(kind="recipe", license="Apache-2.0", description=(
        "hand-set colour classifier (scripts/classification/build.py) for the test servers, imported with "
        "classification-onnx"), recipe=dict(recipe))
    result = import_classification_onnx(src, LABELS, pre, ARTIFACTS[0], ctx.version, ctx.work_dir / "import",
                                        user_photos(photos(ctx.work_dir / "photos", recipe["seed"])), source,
                                        fallback_name=ARTIFACTS[1], require_fallback=True)
    return result.artifacts
