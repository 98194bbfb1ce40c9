"""Import an ultralytics .pt checkpoint as a detector: read, decided, exported, proved, verified, published.

    triserve import detection-pt --weights best.pt --name my-det --version 1.0.0 \\
        [--head auto|anchors|end2end] [--imgsz N] [--images DIR] [--data data.yaml] [--alias canary] [--no-verify] \\
        [--license SPDX]                             # required when the checkpoint states no licence
        [--custom-modules [PICKLED_NAME=]MODULE_OR_FILE ...]  # the training code's own layers (repeatable)

SECURITY: a .pt checkpoint is a pickle, and loading a pickle runs code; a --custom-modules file or module is code
too. Both run with your rights during the import (never at serving time: the published model is an ONNX graph).
Import only checkpoints and custom modules from sources you trust.

Steps (nothing is published unless all pass; a refusal says why):
  0. custom layers: a checkpoint whose training script defined its own layers pickles them as `__main__.<Class>`
     (or under the training project's module, `mytrain.layers.<Class>`). The classes the pickle needs are listed
     first (pickletools: nothing is unpickled) and a missing one is refused by name, with the flag that supplies it:
     --custom-modules layers.py (or an importable module) puts the file's public classes and functions in
     `__main__`; --custom-modules mytrain.layers=layers.py also registers it under the name the pickle recorded.
     They stay loaded for the whole import (read, export, ultralytics' predictor) and are removed afterwards
     (models/importing/custom_modules.py); the manifest records each file's sha256. A C2f subclass must override
     forward_split as well as forward: ultralytics' ONNX exporter runs every C2f through forward_split, so a change
     made in forward alone is not exported (the parity gate below then refuses the import).
  1. read: the checkpoint is loaded as ultralytics loads it and re-saved into the work dir with plain-dict training
     args (old 8.0.x checkpoints pickle them as omegaconf DictConfig; when omegaconf is not installed a stand-in
     reads them: only that container, the weights are ultralytics' own classes). Task and head decide:
       detect     YOLOv3u/v5u/v8/v9/v11/v12 heads -> anchors head [b, 4 + nc, anchors], the service's capped NMS;
                  YOLOv10 / YOLO26 heads (a one-to-one branch) -> the NMS-free end-to-end head [b, max_det, 6]
                  (x1, y1, x2, y2, score, class; manifest preprocess.head 'end2end'), or with --head anchors their
                  one-to-many branch as an anchors head
       segment    SERVED AS DETECTION: the head is cut down to its Detect part (box and class branches, the same
       pose       weights; the mask-coefficient / keypoint branch and the mask prototypes are dropped before export,
                  so they cost nothing at serving time). The boxes and classes are exactly what ultralytics'
                  segmentation / pose predictor reports (verified below against the ORIGINAL checkpoint); masks and
                  keypoints are not served (the manifest says so).
       obb        REFUSED: an oriented box (cx, cy, w, h, angle) is not an axis-aligned box. Its enclosing box
                  would be served, and the family's axis-aligned NMS would suppress neighbouring rotated objects
                  (ships in a harbour, cars in a car park seen from above) whose enclosing boxes overlap while the
                  rotated boxes do not: other boxes than ultralytics' rotated NMS keeps.
       classify   REFUSED: one class distribution per image, no boxes (`triserve import classification-pt`);
       semantic, depth: refused (no boxes); RT-DETR (RTDETRDecoder: [b, queries, 4 + nc] normalised
                  cxcywh with its own query selection), YOLO-World / YOLOE (open vocabulary: classes from text
                  embeddings): refused, other heads than this family decodes.
  2. export + parity (export.py export_user_model): ONNX with dynamic batch/size, torch vs ONNX
     Runtime on batches 1/4/32 and several sizes; an end-to-end graph's rows are also proved independent of the batch
     (else it is re-exported and served with a fixed batch of 1).
  3. verification against ultralytics (verify.py): `YOLO(checkpoint).predict` (nms=False for end-to-end heads:
     its one-to-one branch) vs triserve's letterbox -> ONNX Runtime -> decode on real photos (the package photos of
     models/importing/photos.py, or --images): every box matched by class with IoU >= 0.9 and a score within 0.02.
  4. publish (immutable name:version), optional alias.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from triserve.families.detection.importers.checkpoint_read import inspect_checkpoint
from triserve.families.detection.importers.evaluate import detection_references
from triserve.families.detection.importers.export import export_user_model
from triserve.families.detection.importers.params import PARAMS, ImportParams
from triserve.families.detection.importers.pipeline import nms_params, run_detector
from triserve.families.detection.importers.verify import require_agreement, verify_against_ultralytics
from triserve.families.detection.manifest import DetectionPreprocess
from triserve.models.importing import custom_modules as custom_code
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.licenses import add_license_option, resolve_license, spdx_from_text
from triserve.models.importing.photos import photos_to_verify, read_rgb, user_photos
from triserve.models.importing.provenance import package_versions
from triserve.models.importing.publish import default_cache, importer_parser, run_cli
from triserve.models.importing.result import Artifact, ImportRefused, Laps
from triserve.models.importing.sandbox import publish_checkpoint_isolated
from triserve.models.manifest import Manifest, Source, preprocess_as

log = logging.getLogger("triserve.importer")

@dataclass(frozen=True)
class PtParams:
    """Parity cases of the export and the ultralytics cross-check (its tolerances come from ImportParams)."""

    parity_batches: tuple[int, ...] = (1, 4, 32)
    parity_sizes: tuple[tuple[int, int], ...] | None = None  # default: half, full and a wider size of imgsz
    proof_batches: tuple[int, ...] = (4, 2)
    tolerance: float = 1e-4
    check: ImportParams = PARAMS


PT_PARAMS = PtParams()


# -- the import -------------------------------------------------------------------------------------------------------
def _photo_paths(photos) -> list[Path]:
    return [p.path for p in photos.all()]


def import_detection_pt(weights: Path, name: str, version: str, work_dir: Path, *, imgsz: int | None = None,
                        head: str = "auto", data: Path | None = None, photos=None, cache_dir: Path | None = None,
                        verify_ultralytics: bool | None = None, params: PtParams = PT_PARAMS,
                        license: str | None = None, require_license: bool = False,
                        custom_modules: Sequence[str] = ()) -> tuple[Artifact, dict]:
    """Read, decide, export, prove, verify and describe an ultralytics .pt; the artifact is staged in `work_dir`.

    `photos`: a triserve.models.importing.photos.PhotoSet for the ultralytics cross-check (default: the package photos,
    downloaded into `cache_dir`). `verify_ultralytics`: None = when ultralytics is installed (it is: the export
    needs it); False = skipped (recorded). `license`: SPDX expression of the weights (else the checkpoint's
    `license` entry, else NOASSERTION, or LicenseRequired with `require_license`: models/importing/licenses.py).
    `custom_modules`: '[PICKLED_NAME=]MODULE_OR_FILE' specs of the training code's own layers
    (models/importing/custom_modules.py), loaded for every step that unpickles the checkpoint (reading, the ONNX
    export, ultralytics' predictor; all in this process) and removed afterwards. They run as code.
    """
    with custom_code.custom_modules(custom_modules) as loaded:
        return _import_detection_pt(weights, name, version, work_dir, imgsz=imgsz, head=head, data=data,
                                    photos=photos, cache_dir=cache_dir, verify_ultralytics=verify_ultralytics,
                                    params=params, license=license, require_license=require_license, loaded=loaded)


def _import_detection_pt(weights: Path, name: str, version: str, work_dir: Path, *, imgsz: int | None,
                         head: str, data: Path | None, photos, cache_dir: Path | None,
                         verify_ultralytics: bool | None, params: PtParams, license: str | None,
                         require_license: bool, loaded: list[custom_code.CustomModule]) -> tuple[Artifact, dict]:
    lap = Laps()
    cache_dir = Path(cache_dir) if cache_dir else default_cache()
    work_dir = Path(work_dir)
    info = inspect_checkpoint(weights, work_dir / "checkpoint", cache_dir / "detection-pt")
    if head == "end2end" and not info.end2end_capable:
        raise ImportRefused(f"{info.path.name}: --head end2end, but its {info.head} head has no one-to-one (NMS-free) "
                            f"branch (only YOLOv10 / YOLO26-style heads do); use --head auto or anchors")
    weights_license = resolve_license(license, spdx_from_text(info.license), info.path.name, required=require_license)
    lap("read")
    description = (
        f"user ultralytics checkpoint {info.path.name} (sha256 {info.sha256}; task {info.task}, {info.model_class} "
        f"with a {info.head} head, saved by ultralytics {info.ultralytics_version or '?'}; weights license per the "
        f"checkpoint: {info.license or 'not stated'}); {info.served_as}. Imported by "
        f"families/detection/importers/checkpoint.py")
    try:
        art = export_user_model(info.served, name, version, work_dir / "export", imgsz=imgsz, data=data,
                                batches=params.parity_batches,
                                sizes=[list(s) for s in params.parity_sizes] if params.parity_sizes else None,
                                tolerance=params.tolerance, cache_dir=cache_dir / "detection-pt",
                                head=head, proof_batches=params.proof_batches, description=description)
    except ValueError as exc:
        raise ImportRefused(str(exc)) from exc
    m = art.manifest
    onnx_path = art.staging / m.model_file
    lap("export+parity")

    c = params.check
    ultra = None
    photo_set = None
    if verify_ultralytics is not False:
        photo_set, images = photos_to_verify(photos, cache_dir)
        ultra = verify_against_ultralytics(onnx_path, images, m.preprocess, m.labels, conf=c.ultralytics_conf,
                                           iou=c.ultralytics_iou, min_iou=c.ultralytics_min_iou,
                                           max_score_diff=c.ultralytics_max_score_diff,
                                           cache_dir=cache_dir / "detection-pt", reference=info.reference)
        require_agreement(ultra, name, info.path.name, len(images))
    lap("ultralytics")

    metrics = dict(m.metrics)
    gates = dict(m.gates)
    reference = m.reference
    if ultra is not None:
        metrics.update(ultra.metrics())
        gates["ultralytics_agreement"] = ultra.passed
        if not reference:  # drift references from the served pipeline on the photos (no labelled data given)
            sess = ort_session(onnx_path, threads=1)
            batch = 1 if isinstance(m.inputs[0].shape[0], int) else 4
            dets = run_detector(sess, [read_rgb(p) for p in _photo_paths(photo_set)], m.preprocess,
                                nms_params(c.serving_conf, c.serving_iou, max_det=100, topk=1000), batch=batch)
            reference = detection_references(dets)
    recipe = {**m.source.recipe, "importer": "families/detection/importers/checkpoint.py",
              "checkpoint": info.describe(), "params": asdict(params),
              "photos": photo_set.describe() if photo_set is not None else None,
              "custom_modules": [c.describe() for c in loaded],
              "ultralytics_check": "skipped" if ultra is None else "passed"}
    manifest = m.model_copy(update={
        "metrics": metrics, "gates": gates, "reference": reference,
        "source": Source(kind="user", description=description, recipe=recipe, license=weights_license,
                         packages=package_versions("torch", "ultralytics", "onnx", "onnxruntime"))})
    Manifest.model_validate(manifest.model_dump())
    lap("describe")
    pre = preprocess_as(m, DetectionPreprocess)
    report = {"name": name, "version": version, "checkpoint": info.describe(), "head": pre.head,
              "imgsz": pre.imgsz, "classes": len(m.labels), "dynamic_batch": gates.get("dynamic_batch"),
              "parity_worst": _worst(m.parity), "ultralytics": ultra.report() if ultra is not None else "skipped",
              "photos_missing": photo_set.missing if photo_set is not None else [],
              "custom_modules": [c.describe() for c in loaded], "timings_s": lap.timings}
    return Artifact(staging=art.staging, manifest=manifest), report


def _worst(parity) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in parity:
        key = ("batch-proof/" if "-vs-" in c.case else "torch/") + c.case.rsplit("/", 1)[-1]
        out[key] = max(out.get(key, 0.0), c.max_abs_diff)
    return out


def publish_detection_pt(weights: Path, name: str, version: str, registry, *, alias: str | None = None,
                         cache_dir: Path | None = None, images: Path | None = None, **kw) -> tuple[Manifest, dict]:
    """import_detection_pt, run isolated (models/importing/sandbox.py: the pickle is read in a fenced child process),
    + publish into `registry` (triserve.models.registry.LocalRegistry); (published manifest, report). `images`: a
    folder of
    the model's own-domain photos for the ultralytics cross-check. Versions are immutable: an existing name:version is
    refused before any work."""
    cache = Path(cache_dir) if cache_dir else default_cache()
    return publish_checkpoint_isolated(f"{__name__}:isolated_import", "detection-pt", weights, name, version, registry,
                                       alias, cache, images, kw)


def isolated_import(work: Path, weights: Path, name: str, version: str, images: Path | None = None,
                    **kw) -> tuple[Artifact, dict]:
    """The isolated child's entry (models/importing/sandbox_child.py): import_detection_pt in its work folder."""
    return import_detection_pt(weights, name, version, work, photos=user_photos(images) if images else None, **kw)


def log_report(report: dict) -> None:
    ck = report["checkpoint"]
    log.info("%s: task %s (%s, %s head) -> %s head, imgsz %d, dynamic batch %s; %s", ck["path"], ck["task"],
             ck["model_class"], ck["head"], report["head"], report["imgsz"], report["dynamic_batch"], ck["served_as"])
    log.info("parity (worst): %s", {k: f"{v:.3g}" for k, v in report["parity_worst"].items()})
    if isinstance(report.get("ultralytics"), list):
        for row in report["ultralytics"]:
            log.info("ultralytics vs triserve %s: %d vs %d boxes, %d matched, min IoU %.6f, max score diff %.2g",
                     row["image"], row["reference"], row["candidate"], row["matched"], row["min_iou"],
                     row["max_score_diff"])
    log.info("timings (s): %s", report.get("timings_s"))


# -- CLI --------------------------------------------------------------------------------------------------------------
def _cmd(args) -> int:
    from triserve.models.registry import LocalRegistry

    params = PT_PARAMS
    if args.parity_batches:
        params = PtParams(parity_batches=tuple(args.parity_batches))

    def answer(out: tuple[Manifest, dict]) -> None:
        m, report = out
        log_report(report)
        pre = preprocess_as(m, DetectionPreprocess)
        print(json.dumps({"name": m.name, "version": m.version, "labels": m.labels, "head": pre.head,
                          "imgsz": pre.imgsz, "inputs": [i.model_dump() for i in m.inputs],
                          "outputs": [o.model_dump() for o in m.outputs], "gates": m.gates,
                          "metrics": {k: round(v, 6) for k, v in m.metrics.items()},
                          "parity_max_abs_diff": max((c.max_abs_diff for c in m.parity), default=None),
                          "report": report}, indent=2, default=str))

    return run_cli(lambda: publish_detection_pt(
        args.weights, args.name, args.version, LocalRegistry(args.registry), alias=args.alias, cache_dir=args.cache,
        images=args.images, imgsz=args.imgsz, head=args.head, data=args.data, params=params,
        verify_ultralytics=False if args.no_verify else None, license=args.license, require_license=True,
        custom_modules=args.custom_modules or ()), answer, refused=(ValueError,))


def add_parser(subparsers) -> None:
    """Register `detection-pt` on the `triserve import` parser (triserve/importers.py)."""
    p = importer_parser(subparsers, "detection-pt", "import an ultralytics .pt (detect; segment/pose served as "
                        "detection; YOLOv10/YOLO26 end-to-end heads)", __doc__, ("--weights", "the .pt checkpoint"))
    p.add_argument("--head", choices=("auto", "anchors", "end2end"), default="auto",
                   help="auto: the NMS-free end-to-end branch where the head has one (YOLOv10, YOLO26), else anchors")
    p.add_argument("--imgsz", type=int, default=None, help="letterbox size (default: the checkpoint's train imgsz)")
    p.add_argument("--data", type=Path, default=None, help="ultralytics data yaml to score the model on")
    p.add_argument("--images", type=Path, default=None,
                   help="photos of the model's own domain for the ultralytics cross-check (default: package photos)")
    p.add_argument("--alias", default=None, help="also point this alias at the new version")
    p.add_argument("--cache", type=Path, default=default_cache(), help="wheel, photo and ultralytics cache")
    p.add_argument("--parity-batches", type=int, nargs="+", default=None, help="torch parity batches (default 1 4 32)")
    p.add_argument("--no-verify", action="store_true", help="skip the ultralytics cross-check (recorded as skipped)")
    p.add_argument("--custom-modules", action="append", default=None, metavar="[PICKLED_NAME=]MODULE_OR_FILE",
                   help="the training code's own layers, for a checkpoint that pickles them (e.g. __main__.C2fX): a "
                        ".py file or an importable module whose public classes and functions are put in __main__; "
                        "PICKLED_NAME= also registers it under the module name the pickle recorded "
                        "(mytrain.layers=layers.py). Repeatable. SECURITY: this is code, run during the import, "
                        "as loading the pickle itself is: pass only files you trust")
    add_license_option(p)
    p.set_defaults(func=_cmd)
