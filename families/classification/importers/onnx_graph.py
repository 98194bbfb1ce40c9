"""Import any ONNX ImageNet-style classifier with its labels and declared preprocessing, verified against ONNX
Runtime on the raw graph.

    triserve import classification-onnx --model net.onnx --labels labels.json --name my-cls --version 1.0.0 \\
        --imgsz 224 [--resize center_crop|letterbox] [--resize-size 256] [--interpolation bilinear|bicubic] \\
        [--scale 0.00392156862745098] [--mean 0.485,0.456,0.406] [--std 0.229,0.224,0.225] [--color-order RGB] \\
        [--output probabilities|logits] [--fallback-name my-cls-int8] [--images DIR] [--alias stable] \\
        [--license SPDX]

Labels: a JSON/YAML list or {id: name} dict, or a text file with one name per line (models/importing/labels.py).
Normalisation as declared: a pixel reaches the graph as (value * scale - mean) / std (torchvision's ImageNet models:
scale 1/255, mean 0.485,0.456,0.406, std 0.229,0.224,0.225; TF-Lite style: scale 1, mean 127, std 128).

Steps (nothing is published unless all pass): the graph's IO (one [b, 3, S, S] float input, one [b, classes] output,
classes = labels); a batch axis pinned to 1 made dynamic and proved row by row; the reference: torchvision's own
Resize + CenterCrop (PIL) of each photo, normalised as declared, into the RAW graph at batch 1 with ONNX Runtime,
against the service's path (crop in the gateway, normalisation in the runner, the published graph batched): top-5
identical and every probability within 1e-4 on every photo (the package photos, or --images); optionally an INT8
sibling gated on top-1 agreement (finish.py). Then publish (immutable name:version), optional alias.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from triserve.families.classification.importers.finish import finish
from triserve.families.classification.manifest import ClassificationPreprocess
from triserve.families.classification.postprocess import probabilities
from triserve.families.classification.preprocess import FILTERS
from triserve.families.vision.letterbox import letterbox
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.labels import read_labels
from triserve.models.importing.licenses import onnx_license, resolve_license
from triserve.models.importing.photos import PhotoSet, package_photos, user_photos
from triserve.models.importing.provenance import package_versions
from triserve.models.importing.publish import add_import_options, import_and_publish, importer_parser, run_cli
from triserve.models.importing.result import ImportResult
from triserve.models.manifest import Source, sha256_file


def reference_input(image: np.ndarray, pre: ClassificationPreprocess) -> np.ndarray:
    """[1, 3, S, S] float32 by the reference transform: torchvision's Resize + CenterCrop on PIL (center_crop), or
    the letterbox (letterbox), then (value * scale - mean) / std in float64."""
    if pre.resize == "center_crop":
        from PIL import Image
        from torchvision import transforms as T

        mode = T.InterpolationMode.BILINEAR if FILTERS[pre.interpolation] == FILTERS["bilinear"] \
            else T.InterpolationMode.BICUBIC
        tf = T.Compose([T.Resize(pre.crop_from, interpolation=mode), T.CenterCrop(pre.imgsz)])
        img = np.asarray(tf(Image.fromarray(image)))
    else:
        img = letterbox(image, pre.imgsz, pre.pad_value)[0]
    if pre.color_order == "BGR":
        img = img[..., ::-1]
    x = (img.astype(np.float64) * pre.scale - np.asarray(pre.mean)) / np.asarray(pre.std)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)


def raw_graph_reference(graph: Path, pre: ClassificationPreprocess):
    """The reference of the check: the raw graph, one photo per call, fed reference_input."""
    session = ort_session(graph)
    name = session.get_inputs()[0].name

    def run(images: list[np.ndarray]) -> np.ndarray:
        return np.stack([probabilities(session.run(None, {name: reference_input(im, pre)})[0][0], pre.output)
                         for im in images])

    return run


def import_classification_onnx(model: Path, labels: list[str], pre: ClassificationPreprocess, name: str,
                               version: str, work: Path, photos: PhotoSet, source: Source,
                               fallback_name: str | None = None, require_fallback: bool = False) -> ImportResult:
    """Check, prove, verify and stage `model` (and its INT8 sibling when asked); nothing is published here."""
    recipe = {"importer": "classification-onnx", "source_sha256": sha256_file(model), "labels": len(labels),
              "preprocess": pre.model_dump(mode="json")}
    return finish(Path(model), labels, pre, name, version, Path(work), photos, source,
                  raw_graph_reference(Path(model), pre), recipe, fallback_name, require_fallback)


def publish_classification_onnx(args) -> tuple[list, dict]:
    from triserve.models.registry import LocalRegistry

    pre = preprocess_from_args(args)
    labels = read_labels(args.labels)
    license = resolve_license(args.license, onnx_license(args.model), str(args.model), required=True)
    photos = user_photos(args.images) if args.images else package_photos(args.cache)
    source = Source(kind="user", license=license, description=f"user ONNX classifier {Path(args.model).name} "
                    f"(sha256 {sha256_file(args.model)}), labels {Path(args.labels).name}",
                    packages=package_versions("onnx", "onnxruntime", "torchvision"))

    def build(work: Path) -> ImportResult:
        return import_classification_onnx(args.model, labels, pre, args.name, args.version, work, photos, source,
                                          args.fallback_name)

    return import_and_publish(LocalRegistry(args.registry), args.name, args.version, args.alias,
                              "classification-onnx", build)


def _triple(text: str) -> tuple[float, float, float]:
    values = [float(v) for v in text.split(",")]
    if len(values) == 1:
        values *= 3
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"one or three comma-separated numbers, got {text!r}")
    return values[0], values[1], values[2]


def preprocess_from_args(args) -> ClassificationPreprocess:
    return ClassificationPreprocess(imgsz=args.imgsz, resize=args.resize, resize_size=args.resize_size,
                                    interpolation=args.interpolation, scale=args.scale, mean=args.mean, std=args.std,
                                    color_order=args.color_order, output=args.output)


def _cmd(args) -> int:
    return run_cli(lambda: publish_classification_onnx(args), refused=(ValueError,))


def add_parser(subparsers) -> None:
    """Register `classification-onnx` on the `triserve import` parser (triserve/importers.py)."""
    p = importer_parser(subparsers, "classification-onnx", "import an ONNX image classifier with its labels", __doc__,
                        ("--model", "the .onnx file"), version_help="immutable version, e.g. 1.0.0")
    p.add_argument("--labels", type=Path, required=True, help="class names: JSON list or text, one per line")
    p.add_argument("--imgsz", type=int, required=True, help="square network input side")
    p.add_argument("--resize", choices=["center_crop", "letterbox"], default="center_crop")
    p.add_argument("--resize-size", type=int, default=None, help="short side before the crop (default: imgsz)")
    p.add_argument("--interpolation", choices=["bilinear", "bicubic"], default="bilinear")
    p.add_argument("--scale", type=float, default=1 / 255.0, help="multiplier of uint8 pixels (default 1/255)")
    p.add_argument("--mean", type=_triple, default=(0.0, 0.0, 0.0), help="per-channel mean after scale")
    p.add_argument("--std", type=_triple, default=(1.0, 1.0, 1.0), help="per-channel std after scale")
    p.add_argument("--color-order", choices=["RGB", "BGR"], default="RGB")
    p.add_argument("--output", choices=["probabilities", "logits"], default="probabilities",
                   help="what the graph outputs (logits: the service applies softmax)")
    add_import_options(p, _cmd, fallback=True)
