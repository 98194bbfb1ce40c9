"""Import an ultralytics image-classification checkpoint (`yolov8n-cls.pt`, `yolo11s-cls.pt`, a user's `-cls`
training): read, exported to ONNX, verified against ultralytics' own predictor, published.

    triserve import classification-pt --weights best.pt --name my-cls --version 1.0.0 [--imgsz N] \\
        [--fallback-name my-cls-int8] [--images DIR] [--alias stable] [--license SPDX]

SECURITY: a .pt checkpoint is a pickle, and loading a pickle runs code: import only checkpoints you trust.

Steps (nothing is published unless all pass):
  1. read with the detection family's checkpoint reader (ultralytics' own loader; other tasks are refused: detect,
     segment and pose checkpoints go to detection-pt, pose-pt, segmentation-pt);
  2. preprocessing as ultralytics' ClassificationPredictor applies it: the checkpoint's own transforms when they
     match its training size (Resize short side, CenterCrop, Normalize mean/std), else classify_transforms(imgsz)
     (short side imgsz, centre crop imgsz, /255); RGB; the graph outputs probabilities (its Classify head's softmax);
  3. ONNX export by ultralytics (dynamic batch), then finish.py: the served path (gateway crop, runner
     normalisation, the published graph batched) against `YOLO(checkpoint).predict` on every photo (ultralytics'
     bus.jpg and zidane.jpg and the other package photos, or --images): top-5 identical and every probability within
     1e-4; optionally the INT8 sibling behind its top-1 agreement gate.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from triserve.families.classification.importers.finish import finish
from triserve.families.classification.manifest import ClassificationPreprocess
from triserve.families.detection.importers.checkpoint_read import load_checkpoint_dict
from triserve.families.detection.importers.export import class_names, export_onnx
from triserve.families.detection.importers.ultralytics_env import setup_ultralytics
from triserve.models.importing.licenses import resolve_license, spdx_from_text
from triserve.models.importing.photos import package_photos, user_photos
from triserve.models.importing.provenance import package_versions
from triserve.models.importing.publish import add_import_options, import_and_publish, importer_parser, run_cli
from triserve.models.importing.result import ImportRefused, ImportResult
from triserve.models.importing.sandbox import isolated_build, prefetch_photos
from triserve.models.manifest import Source, sha256_file

OPSET = 17


def read_classifier(weights: Path, cache: Path, imgsz: int | None = None):
    """(model, labels, preprocess, checkpoint dict) of an ultralytics classify checkpoint; any other is refused."""
    from ultralytics.nn.tasks import guess_model_task

    setup_ultralytics(cache)
    ckpt, _ = load_checkpoint_dict(weights)
    model: Any = ckpt.get("ema") or ckpt.get("model")
    model = model.float().eval()
    train_args = ckpt.get("train_args")
    args: dict = train_args if isinstance(train_args, dict) else {}
    own = getattr(model, "args", None)
    task = (own.get("task") if isinstance(own, dict) else None) or args.get("task") or guess_model_task(model)
    if task != "classify":
        raise ImportRefused(f"{weights.name}: a {task!r} checkpoint, not image classification (use the importer of "
                            f"its family: detection-pt, pose-pt or segmentation-pt)")
    size = imgsz or args.get("imgsz") or 224
    size = int(max(size)) if isinstance(size, (list, tuple)) else int(size)
    return model, class_names(model), predictor_preprocess(model, size), ckpt


def predictor_preprocess(model, imgsz: int) -> ClassificationPreprocess:
    """What ClassificationPredictor applies: the model's own transforms when their Resize matches imgsz, else
    classify_transforms(imgsz) (ultralytics 8.4 setup_source)."""
    tfs = getattr(getattr(model, "transforms", None), "transforms", None)
    size = getattr(tfs[0], "size", None) if tfs else None
    size = size[0] if isinstance(size, (list, tuple)) and len(size) == 1 else size
    if tfs and isinstance(size, int) and size == imgsz:
        kinds = [type(t).__name__ for t in tfs]
        if kinds != ["Resize", "CenterCrop", "ToTensor", "Normalize"]:
            raise ImportRefused(f"checkpoint transforms {kinds}: only Resize, CenterCrop, ToTensor, Normalize are "
                                f"served")
        crop = tfs[1].size
        crop = int(crop[0] if isinstance(crop, (list, tuple)) else crop)
        mode = str(tfs[0].interpolation.value).lower()
        if mode not in ("bilinear", "bicubic"):
            raise ImportRefused(f"checkpoint resize interpolation {mode!r} is not served (bilinear, bicubic)")
        mean, std = (tuple(float(v) for v in np.asarray(x).reshape(-1)) for x in (tfs[3].mean, tfs[3].std))
        return ClassificationPreprocess(imgsz=crop, resize_size=size, interpolation=mode, mean=mean, std=std)
    return ClassificationPreprocess(imgsz=imgsz, resize_size=imgsz)


def ultralytics_reference(weights: Path, imgsz: int):
    """ultralytics' own predictor on the checkpoint: RGB photos (given to it as BGR arrays, as it reads files) ->
    [n, classes] probabilities."""
    from ultralytics import YOLO

    model = YOLO(str(weights), task="classify")

    def run(images: list[np.ndarray]) -> np.ndarray:
        out = []
        for im in images:  # one by one: the predictor's batch is the photo
            res: Any = model.predict(np.ascontiguousarray(im[..., ::-1]), imgsz=imgsz, device="cpu", verbose=False)
            out.append(res[0].probs.data.cpu().numpy().astype(np.float64))
        return np.stack(out)

    return run


def import_classification_pt(weights: Path, name: str, version: str, work: Path, photos, cache: Path,
                             imgsz: int | None = None, fallback_name: str | None = None,
                             license: str | None = None) -> ImportResult:
    weights = Path(weights)
    if not weights.is_file():
        raise ImportRefused(f"{weights}: no such file")
    model, labels, pre, ckpt = read_classifier(weights, cache, imgsz)
    Path(work).mkdir(parents=True, exist_ok=True)
    graph = export_onnx(weights, Path(work) / "export.onnx", pre.imgsz, OPSET, dynamic=True)
    stated = spdx_from_text(ckpt.get("license"))
    source = Source(kind="user", license=resolve_license(license, stated, weights.name), description=(
        f"user ultralytics classify checkpoint {weights.name} (sha256 {sha256_file(weights)}, saved by ultralytics "
        f"{ckpt.get('version') or '?'}); exported by ultralytics and imported by "
        f"families/classification/importers/checkpoint.py"),
        packages=package_versions("ultralytics", "torch", "onnx", "onnxruntime"))
    recipe = {"importer": "classification-pt", "source_sha256": sha256_file(weights), "labels": len(labels),
              "preprocess": pre.model_dump(mode="json")}
    return finish(graph, labels, pre, name, version, Path(work), photos, source,
                  ultralytics_reference(weights, pre.imgsz), recipe, fallback_name)


def isolated_import(work: Path, weights: Path, name: str, version: str, images: Path | None, cache: Path,
                    **kw) -> ImportResult:
    """The isolated child's entry (models/importing/sandbox.py reads the pickle in a fenced child process)."""
    photos = user_photos(images) if images else package_photos(cache)
    return import_classification_pt(weights, name, version, work, photos, cache / "classification-pt", **kw)


def _cmd(args) -> int:
    from triserve.models.registry import LocalRegistry

    prefetch_photos(Path(args.images) if args.images else None, Path(args.cache))
    build = isolated_build(f"{__name__}:isolated_import", {
        "weights": Path(args.weights), "name": args.name, "version": args.version,
        "images": Path(args.images) if args.images else None, "cache": Path(args.cache), "imgsz": args.imgsz,
        "fallback_name": args.fallback_name, "license": args.license}, Path(args.cache))
    return run_cli(lambda: import_and_publish(LocalRegistry(args.registry), args.name, args.version, args.alias,
                                              "classification-pt", build))


def add_parser(subparsers) -> None:
    """Register `classification-pt` on the `triserve import` parser (triserve/importers.py)."""
    p = importer_parser(subparsers, "classification-pt", "import an ultralytics -cls checkpoint (.pt)", __doc__,
                        ("--weights", "the .pt checkpoint"), version_help="immutable version, e.g. 1.0.0")
    p.add_argument("--imgsz", type=int, default=None, help="input size (default: the training size)")
    add_import_options(p, _cmd, fallback=True)


