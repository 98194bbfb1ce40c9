"""Import an ultralytics segment .pt: loaded and checked by the detection family's checkpoint reader, exported WITH
its mask branch, then imported like a segment ONNX export (onnx_graph.py) and verified against ultralytics' segment
predictor running the .pt itself (boxes and masks).

    triserve import segmentation-pt --weights best.pt --name my-seg --version 1.0.0 [--imgsz 640] \
        [--custom-modules [PICKLED_NAME=]MODULE_OR_FILE ...] [--license SPDX]

SECURITY: a .pt checkpoint is a pickle, and loading a pickle runs code; a --custom-modules file or module is code
too (models/importing/custom_modules.py). Import only what you trust.

detection-pt serves a segment checkpoint as a detector (its mask branch cut before export); this importer keeps the
whole Segment head: output0 [b, 4 + nc + 32, anchors] and the prototypes output1 [b, 32, S/4, S/4].
Reused from families/detection/importers: checkpoint_read.inspect_checkpoint (safe loading, task and label checks; its
`reference` is the re-saved checkpoint in its own task, full head) and export.export_onnx (ultralytics' exporter).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from triserve.families.detection.importers.checkpoint_read import inspect_checkpoint
from triserve.families.detection.importers.export import export_onnx
from triserve.families.segmentation.importers.onnx_graph import import_segmentation_onnx
from triserve.models.importing import custom_modules as custom_code
from triserve.models.importing.licenses import spdx_from_text
from triserve.models.importing.photos import PhotoSet, user_photos
from triserve.models.importing.publish import (
    add_import_options,
    default_cache,
    import_and_publish,
    importer_parser,
    run_cli,
)
from triserve.models.importing.result import Artifact, ImportRefused, ImportResult
from triserve.models.importing.sandbox import absolute_specs, isolated_build, prefetch_photos

log = logging.getLogger("triserve.importer")
OPSET = 17


def import_segmentation_pt(weights: Path, name: str, version: str, work_dir: Path, *, imgsz: int | None = None,
                           photos: PhotoSet | None = None, cache_dir: Path | None = None,
                           verify_ultralytics: bool | None = None, license: str | None = None,
                           require_license: bool = False, custom_modules: Sequence[str] = ()) -> ImportResult:
    """Read, export with the mask branch, then segmentation-onnx's checks with ultralytics predicting on the .pt.
    `custom_modules`: '[PICKLED_NAME=]MODULE_OR_FILE' specs of the training code's own layers
    (models/importing/custom_modules.py), loaded while anything unpickles the checkpoint (reading, the export,
    ultralytics' predictor) and removed afterwards; recorded in the manifest's recipe with each file's sha256."""
    work_dir = Path(work_dir)
    with custom_code.custom_modules(list(custom_modules)) as loaded:
        info = inspect_checkpoint(Path(weights), work_dir / "checkpoint", cache_dir)
        if info.task != "segment":
            raise ImportRefused(f"{Path(weights).name}: task {info.task!r} ({info.head}), not 'segment' (a detection "
                                f"checkpoint: import it with detection-pt)")
        size = int(imgsz or info.train_imgsz or 640)
        onnx_path = export_onnx(info.reference, work_dir / f"{Path(weights).stem}.onnx", size, OPSET, dynamic=False)
        result = import_segmentation_onnx(onnx_path, name, version, work_dir, labels=info.labels, imgsz=size,
                                          photos=photos, cache_dir=cache_dir, verify_ultralytics=verify_ultralytics,
                                          reference=info.reference,
                                          license=license or spdx_from_text(info.license),  # as written -> SPDX
                                          require_license=require_license, importer="segmentation-pt")
    m = result.primary.manifest
    recipe = {**m.source.recipe, "checkpoint": info.describe(), "custom_modules": [c.describe() for c in loaded]}
    result.primary = Artifact(staging=result.primary.staging, manifest=m.model_copy(
        update={"source": m.source.model_copy(update={"recipe": recipe})}))
    result.report["checkpoint"] = info.describe()
    return result


def publish_segmentation_pt(weights: Path, name: str, version: str, registry, *, imgsz: int | None = None,
                            alias: str | None = None, cache_dir: Path | None = None, images: Path | None = None,
                            custom_modules: Sequence[str] = (), verify_ultralytics: bool | None = None,
                            license: str | None = None, require_license: bool = False) -> tuple[list, dict]:
    """import_segmentation_pt, run isolated (models/importing/sandbox.py: the pickle is read in a fenced child
    process), + publish into `registry`; (published manifests, report)."""
    cache = Path(cache_dir) if cache_dir else default_cache()
    prefetch_photos(Path(images) if images else None, cache)  # its checks run on photos even without verification
    return import_and_publish(registry, name, version, alias, "segmentation-pt", isolated_build(
        f"{__name__}:isolated_import", {
            "weights": Path(weights), "name": name, "version": version, "imgsz": imgsz,
            "images": Path(images) if images else None, "cache_dir": cache,
            "verify_ultralytics": verify_ultralytics, "license": license, "require_license": require_license,
            "custom_modules": absolute_specs(custom_modules)}, cache))


def isolated_import(work: Path, weights: Path, name: str, version: str, images: Path | None = None,
                    **kw) -> ImportResult:
    """The isolated child's entry (models/importing/sandbox_child.py): import_segmentation_pt in its work folder."""
    return import_segmentation_pt(weights, name, version, work, photos=user_photos(images) if images else None, **kw)


def _cmd(args) -> int:
    from triserve.models.registry import LocalRegistry

    return run_cli(lambda: publish_segmentation_pt(
        args.weights, args.name, args.version, LocalRegistry(args.registry), imgsz=args.imgsz, alias=args.alias,
        cache_dir=args.cache, images=args.images, custom_modules=args.custom_modules,
        verify_ultralytics=False if args.no_verify else None, license=args.license, require_license=True),
        refused=(ValueError,))


def add_parser(subparsers) -> None:
    """Register `segmentation-pt` on the `triserve import` parser (triserve/importers.py)."""
    p = importer_parser(subparsers, "segmentation-pt", "import an ultralytics segment .pt checkpoint (masks kept)",
                        __doc__, ("--weights", "the .pt file"), version_help="immutable version, e.g. 1.0.0")
    p.add_argument("--imgsz", type=int, default=None, help="export size (default: the training size, else 640)")
    p.add_argument("--custom-modules", action="append", default=[], metavar="[PICKLED_NAME=]MODULE_OR_FILE",
                   help="a module or .py file with the training code's own layers the checkpoint pickles "
                        "(repeatable; it runs as code)")
    add_import_options(p, _cmd, verify=True)
