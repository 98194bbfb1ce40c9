"""Import an ultralytics pose .pt checkpoint WITH its keypoints: read, exported whole, proved, verified, published.

    triserve import pose-pt --weights best-pose.pt --name my-pose --version 1.0.0 \\
        [--imgsz N] [--images DIR] [--alias canary] [--no-verify] [--license SPDX] \\
        [--custom-modules [PICKLED_NAME=]MODULE_OR_FILE ...]  # the training code's own layers (repeatable)

SECURITY: a .pt checkpoint is a pickle, and loading a pickle runs code; a --custom-modules file or module is code
too (models/importing/custom_modules.py, as for detection-pt). Import only what you trust.

Steps (nothing is published unless all pass; a refusal says why):
  1. read: the detection family's checkpoint reader (families/detection/importers/checkpoint_read.inspect_checkpoint:
     ultralytics' own loader, old omegaconf-pickled args read as plain data), asked to keep the pose head whole.
     Anything but a pose checkpoint is refused (detection-pt takes detectors, and serves a pose checkpoint's boxes
     only). NMS-free pose heads (YOLO26-pose's one-to-one branch) are refused: the pose family decodes anchors heads.
  2. keypoint schema: kpt_shape from the head; names from the checkpoint's `kpt_names`, else COCO-17 when the model
     is 17x3 keypoints of the COCO person class, else kp0.. (families/pose/keypoints.py); recorded in the manifest.
  3. export + parity (export.py): ONNX [b, 4 + nc + K * dims, anchors], dynamic batch and size; torch vs ONNX
     Runtime on batches 1/4/32 and several sizes (boxes and keypoints in pixels, scores and confidences).
  4. verification against ultralytics (verify.py): `YOLO(checkpoint).predict` vs triserve's letterbox -> ONNX
     Runtime -> capped NMS -> original pixels on real photos (ultralytics' bus.jpg and zidane.jpg and the other
     package photos of models/importing/photos.py, or --images): boxes matched (IoU >= 0.9, score within 0.02) and
     every visible keypoint of a matched person within 2 px.
  5. publish (immutable name:version), optional alias.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from triserve.families.detection.importers.checkpoint_read import inspect_checkpoint
from triserve.families.detection.importers.evaluate import detection_references
from triserve.families.detection.importers.pipeline import nms_params
from triserve.families.detection.importers.verify import require_agreement
from triserve.families.pose.importers.export import export_and_prove
from triserve.families.pose.importers.run import run_pose
from triserve.families.pose.importers.verify import POSE_CHECK, PoseCheckParams, verify_pose
from triserve.families.pose.manifest import PosePreprocess
from triserve.models.importing import custom_modules as custom_code
from triserve.models.importing.graphs import io_specs, opset_of, ort_session
from triserve.models.importing.licenses import add_license_option, resolve_license, spdx_from_text
from triserve.models.importing.photos import photos_to_verify, read_rgb, user_photos
from triserve.models.importing.provenance import git_commit, package_versions, stable_hash
from triserve.models.importing.publish import default_cache, importer_parser, run_cli
from triserve.models.importing.result import Artifact, ImportRefused, Laps
from triserve.models.importing.sandbox import publish_checkpoint_isolated
from triserve.models.manifest import Manifest, Source, utcnow


@dataclass(frozen=True)
class PosePtParams:
    parity_batches: tuple[int, ...] = (1, 4, 32)
    parity_sizes: tuple[tuple[int, int], ...] | None = None  # default: half, full and a wider size of imgsz
    tolerance: float = 1e-4
    check: PoseCheckParams = POSE_CHECK
    serving_conf: float = 0.25  # the service's defaults: drift references
    serving_iou: float = 0.45


POSE_PT_PARAMS = PosePtParams()


def import_pose_pt(weights: Path, name: str, version: str, work_dir: Path, *, imgsz: int | None = None,
                   photos=None, cache_dir: Path | None = None, verify_ultralytics: bool | None = None,
                   params: PosePtParams = POSE_PT_PARAMS, license: str | None = None,
                   require_license: bool = False, custom_modules: Sequence[str] = ()) -> tuple[Artifact, dict]:
    """Read, export (keypoint branch kept), prove, verify and describe an ultralytics pose .pt; staged in `work_dir`.

    `photos`: a triserve.models.importing.photos.PhotoSet for the ultralytics cross-check (default: the package photos).
    `verify_ultralytics`: False = skipped (recorded). `custom_modules`: '[PICKLED_NAME=]MODULE_OR_FILE' specs of the
    training code's own layers (models/importing/custom_modules.py), loaded while anything unpickles the checkpoint
    (reading, the export, ultralytics' predictor) and removed afterwards."""
    lap = Laps()
    cache_dir = Path(cache_dir) if cache_dir else default_cache()
    work_dir = Path(work_dir)
    with custom_code.custom_modules(list(custom_modules)) as loaded:
        info = inspect_checkpoint(weights, work_dir / "checkpoint", cache_dir / "pose-pt", full_head=("pose",))
        if info.task != "pose":
            raise ImportRefused(f"{info.path.name}: a {info.task} checkpoint ({info.model_class}), not pose; import "
                                f"it with detection-pt")
        if info.end2end_capable:
            raise ImportRefused(f"{info.path.name}: its {info.head} head has an NMS-free one-to-one branch (YOLO26-"
                                f"pose style); the pose family serves anchors heads [b, 4 + nc + K * dims, anchors]")
        weights_license = resolve_license(license, spdx_from_text(info.license), info.path.name,
                                          required=require_license)
        lap("read")
        staging = work_dir / "export" / name
        staging.mkdir(parents=True, exist_ok=True)
        onnx_path = staging / "model.onnx"
        try:
            made = export_and_prove(info.reference, onnx_path, imgsz or info.train_imgsz, params.parity_batches,
                                    [list(s) for s in params.parity_sizes] if params.parity_sizes else None,
                                    params.tolerance)
        except ValueError as exc:
            raise ImportRefused(str(exc)) from exc
        lap("export+parity")
        labels, schema = made["labels"], made["schema"]
        pre = PosePreprocess(imgsz=made["imgsz"], **schema)

        check = None
        photo_set = None
        if verify_ultralytics is not False:
            photo_set, images = photos_to_verify(photos, cache_dir)
            check = verify_pose(onnx_path, images, pre, len(labels), reference=info.reference, params=params.check,
                                cache_dir=cache_dir / "pose-pt")
            require_agreement(check, name, info.path.name, len(images), predictor="pose predictor", nothing="nobody")
        lap("ultralytics")

    metrics = {"ms_per_image": made["ms_per_image"]}
    gates = {"parity": True, "dynamic_batch": True}
    reference: dict = {}
    if check is not None and photo_set is not None:
        metrics.update(check.metrics())
        gates["ultralytics_agreement"] = check.passed
        sess = ort_session(onnx_path, threads=1)
        served = run_pose(sess, [read_rgb(p.path) for p in photo_set.all()], pre, len(labels),
                          nms_params(params.serving_conf, params.serving_iou, max_det=100, topk=1000), batch=4)
        reference = detection_references([d.dets for d in served])
    description = (
        f"user ultralytics pose checkpoint {info.path.name} (sha256 {info.sha256}; {info.model_class} with a "
        f"{info.head} head, {pre.kpt_shape[0]}x{pre.kpt_shape[1]} keypoints named from {pre.names_from}, saved by "
        f"ultralytics {info.ultralytics_version or '?'}; weights license per the checkpoint: "
        f"{info.license or 'not stated'}); exported with its keypoint branch by families/pose/importers/checkpoint.py")
    recipe = {"importer": "families/pose/importers/checkpoint.py", "checkpoint": info.describe(),
              "params": asdict(params), "custom_modules": [c.describe() for c in loaded],
              "photos": photo_set.describe() if photo_set is not None else None,
              "ultralytics_check": "skipped" if check is None else "passed"}
    inputs, outputs = io_specs(onnx_path)
    manifest = Manifest(
        name=name, version=version, task="pose", variant="primary", model_file="model.onnx", files=[],
        opset=opset_of(onnx_path), inputs=inputs, outputs=outputs, preprocess=pre, labels=labels,
        source=Source(kind="user", description=description, recipe=recipe, license=weights_license,
                      packages=package_versions("torch", "ultralytics", "onnx", "onnxruntime")),
        data_fingerprint=info.sha256, metrics=metrics, parity=made["parity"], gates=gates, reference=reference,
        recipe_hash=stable_hash({"weights": info.sha256, "imgsz": pre.imgsz, "schema": pre.keypoint_schema()}),
        created_at=utcnow(), git_commit=git_commit())
    lap("describe")
    report = {"name": name, "version": version, "checkpoint": info.describe(), "imgsz": pre.imgsz,
              "classes": len(labels), "kpt_shape": list(pre.kpt_shape), "keypoint_names_from": pre.names_from,
              "parity_worst": {c.case.rsplit("/", 1)[-1]: c.max_abs_diff for c in
                               sorted(made["parity"], key=lambda c: c.max_abs_diff)},
              "ultralytics": check.per_image if check is not None else "skipped",
              "photos_missing": photo_set.missing if photo_set is not None else [], "timings_s": lap.timings}
    return Artifact(staging=staging, manifest=manifest), report


def publish_pose_pt(weights: Path, name: str, version: str, registry, *, alias: str | None = None,
                    cache_dir: Path | None = None, images: Path | None = None, **kw) -> tuple[Manifest, dict]:
    """import_pose_pt, run isolated (models/importing/sandbox.py), + publish into `registry`; (published manifest,
    report). Existing versions are refused first."""
    cache = Path(cache_dir) if cache_dir else default_cache()
    return publish_checkpoint_isolated(f"{__name__}:isolated_import", "pose-pt", weights, name, version, registry,
                                       alias, cache, images, kw)


def isolated_import(work: Path, weights: Path, name: str, version: str, images: Path | None = None,
                    **kw) -> tuple[Artifact, dict]:
    """The isolated child's entry (models/importing/sandbox_child.py): import_pose_pt in its work folder."""
    return import_pose_pt(weights, name, version, work, photos=user_photos(images) if images else None, **kw)


def _cmd(args) -> int:
    from triserve.models.registry import LocalRegistry

    params = POSE_PT_PARAMS
    if args.parity_batches:
        params = PosePtParams(parity_batches=tuple(args.parity_batches))

    def answer(out: tuple[Manifest, dict]) -> None:
        m, report = out
        print(json.dumps({"name": m.name, "version": m.version, "labels": m.labels,
                          "preprocess": m.preprocess.model_dump(), "outputs": [o.model_dump() for o in m.outputs],
                          "gates": m.gates, "metrics": {k: round(v, 6) for k, v in m.metrics.items()},
                          "report": report}, indent=2, default=str))

    return run_cli(lambda: publish_pose_pt(
        args.weights, args.name, args.version, LocalRegistry(args.registry), alias=args.alias, cache_dir=args.cache,
        images=args.images, imgsz=args.imgsz, params=params, verify_ultralytics=False if args.no_verify else None,
        license=args.license, require_license=True, custom_modules=args.custom_modules or ()), answer,
        refused=(ValueError,))


def add_parser(subparsers) -> None:
    """Register `pose-pt` on the `triserve import` parser (triserve/importers.py)."""
    p = importer_parser(subparsers, "pose-pt", "import an ultralytics pose .pt with its keypoints", __doc__,
                        ("--weights", "the pose .pt checkpoint"))
    p.add_argument("--imgsz", type=int, default=None, help="letterbox size (default: the checkpoint's train imgsz)")
    p.add_argument("--images", type=Path, default=None,
                   help="photos of the model's own domain for the ultralytics cross-check (default: package photos)")
    p.add_argument("--custom-modules", action="append", default=None, metavar="[PICKLED_NAME=]MODULE_OR_FILE",
                   help="a module or .py file with the training code's own layers the checkpoint pickles "
                        "(repeatable; it runs as code)")
    p.add_argument("--alias", default=None, help="also point this alias at the new version")
    p.add_argument("--cache", type=Path, default=default_cache(), help="wheel, photo and ultralytics cache")
    p.add_argument("--parity-batches", type=int, nargs="+", default=None, help="torch parity batches (default 1 4 32)")
    p.add_argument("--no-verify", action="store_true", help="skip the ultralytics cross-check (recorded as skipped)")
    add_license_option(p)
    p.set_defaults(func=_cmd)
