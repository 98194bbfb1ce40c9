"""Import a user's ultralytics pose ONNX export: checked, made batch-dynamic (and proved), verified, published.

    triserve import pose-onnx --model best-pose.onnx --name my-pose --version 1.0.0 \\
        [--labels FILE] [--imgsz N] [--images DIR] [--alias canary] [--no-verify] [--license SPDX]

Accepted: one input `images[b, 3, S, S]` float32 RGB in 0..1 and one output `[b, 4 + nc + K * dims, anchors]`
(cx, cy, w, h, nc sigmoid class scores, then per keypoint x, y in input pixels and, dims 3, a sigmoid confidence):
ultralytics' Pose head exported with nms=None. kpt_shape, class names and the input size come from the metadata
ultralytics writes (`kpt_shape`, `names`, `imgsz`; `kpt_names` when the training data named its keypoints), or
`--labels` / `--imgsz`; the keypoint names follow families/pose/keypoints.py. Refused with the reason (nothing
published): a metadata task other than 'pose', no kpt_shape, an output whose channels are not 4 + nc + K * dims,
scores or keypoint confidences outside [0, 1], NMS-free/in-graph-NMS exports ([b, max_det, 6 + K * dims]).

Batch: a fixed-batch-1 export is rewritten by models/importing/batching.py and PROVED (rows of batch 4 and 2 against
batch-1 runs of the original graph: boxes and keypoints within 1e-4 x imgsz px, scores and confidences within
1e-4); if the proof fails the original is published with batch 1 (gates.dynamic_batch False).

Verification: ultralytics' pose predictor on the published file vs triserve's pipeline (verify.py): boxes matched
(IoU >= 0.9, score within 0.02) and every visible keypoint of a matched instance within 2 px. No fallback is built
here (pose-default builds the INT8 one of the default model).
"""
from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triserve.families.detection.importers.evaluate import detection_references
from triserve.families.detection.importers.pipeline import letterboxed, nms_params
from triserve.families.pose.importers.export import channel_groups
from triserve.families.pose.importers.onnx_inspect import PoseGraphInfo, inspect_pose_graph
from triserve.families.pose.importers.run import run_pose
from triserve.families.pose.importers.verify import POSE_CHECK, PoseCheckParams, verify_pose
from triserve.families.pose.manifest import PosePreprocess
from triserve.models.importing import batching
from triserve.models.importing.graphs import io_specs, opset_of, ort_session
from triserve.models.importing.labels import read_labels
from triserve.models.importing.licenses import add_license_option, resolve_license, spdx_from_text
from triserve.models.importing.photos import PhotoSet, package_photos, read_rgb, user_photos
from triserve.models.importing.provenance import data_fingerprint, git_commit, package_versions, stable_hash
from triserve.models.importing.publish import default_cache, import_and_publish, importer_parser, print_result, run_cli
from triserve.models.importing.result import Artifact, GateFailed, ImportResult
from triserve.models.manifest import Manifest, Source, utcnow

log = logging.getLogger("triserve.importer")


@dataclass(frozen=True)
class PoseOnnxParams:
    proof_batches: tuple[int, ...] = (4, 2)
    box_tolerance_rel: float = 1e-4  # x imgsz, pixels
    score_tolerance: float = 1e-4
    check: PoseCheckParams = POSE_CHECK


POSE_ONNX_PARAMS = PoseOnnxParams()


def _compare(nc: int, kpt_shape: list[int]):
    groups = channel_groups(nc, kpt_shape)

    def compare(ref: np.ndarray, got: np.ndarray) -> dict[str, float]:
        return {g: float(np.abs(ref[:, rows].astype(np.float64) - got[:, rows]).max(initial=0.0))
                for g, (rows, _) in groups.items()}

    return compare


def proof_parts(info: PoseGraphInfo, params: PoseOnnxParams) -> dict[str, tuple[None, float]]:
    px = params.box_tolerance_rel * info.imgsz
    return {g: (None, px if pixels else params.score_tolerance)
            for g, (_, pixels) in channel_groups(len(info.labels), info.kpt_shape).items()}


def make_served_graph(info: PoseGraphInfo, pre: PosePreprocess, images: list[np.ndarray], staging: Path,
                      params: PoseOnnxParams) -> tuple[Path, batching.BatchProof]:
    """The graph to publish: the batch-rewritten one when proved, else the original at batch 1."""
    import onnx

    served = staging / "model.onnx"
    if isinstance(info.batch, str):
        shutil.copy2(info.path, served)
        return served, batching.BatchProof(True, [], "already dynamic")
    candidate = staging.parent / f"{staging.name}.dynamic.onnx"
    original = ort_session(info.path, threads=1)
    try:
        rewritten, _ = batching.make_batch_dynamic(onnx.load(str(info.path)))
        batching.save(rewritten, candidate)
        session = ort_session(candidate, threads=1)
    except Exception as exc:  # noqa: BLE001  # a failed rewrite: serve the original, unbatched
        proof = batching.BatchProof(False, [], f"rewrite failed: {type(exc).__name__}: {exc}")
    else:
        n = max(params.proof_batches)
        rows = batching.distinct_rows(letterboxed(images[:n], pre)[0], n)
        proof = batching.prove_dynamic_batch(lambda f: original.run(None, f), lambda f: session.run(None, f),
                                             info.input_name, rows, proof_parts(info, params), params.proof_batches,
                                             compare=_compare(len(info.labels), info.kpt_shape))
    shutil.copy2(candidate if proof.passed else info.path, served)
    if not proof.passed:
        log.warning("%s: batch proof failed (%s): published with batch 1", info.path.name, proof.reason)
    return served, proof


def import_pose_onnx(model_path: Path, name: str, version: str, work_dir: Path, *, labels: list[str] | None = None,
                     imgsz: int | None = None, photos: PhotoSet | None = None, cache_dir: Path | None = None,
                     verify_ultralytics: bool | None = None, params: PoseOnnxParams = POSE_ONNX_PARAMS,
                     license: str | None = None, require_license: bool = False) -> ImportResult:
    """Check, batch, prove, verify and describe an ultralytics pose ONNX export; staged under `work_dir`."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache()
    info = inspect_pose_graph(model_path, labels, imgsz)
    weights_license = resolve_license(license, spdx_from_text(info.metadata.get("license")), info.path.name,
                                      required=require_license)
    pre = PosePreprocess(imgsz=info.imgsz, **info.schema)
    photos = photos if photos is not None else package_photos(cache_dir)
    if not photos.all():
        raise GateFailed("no photos: need ultralytics' assets, the photo wheels or --images DIR")
    images = [read_rgb(p.path) for p in photos.all()]
    staging = Path(work_dir) / name
    staging.mkdir(parents=True, exist_ok=True)
    served, proof = make_served_graph(info, pre, images, staging, params)
    check = None
    if verify_ultralytics is not False:
        from triserve.families.detection.importers.verify import ultralytics_available

        if ultralytics_available():
            check = verify_pose(served, [p.path for p in photos.all()], pre, len(info.labels), params=params.check,
                                cache_dir=cache_dir / "pose-onnx")
            if not check.passed:
                raise GateFailed(f"{name}: triserve's pipeline disagrees with ultralytics' pose predictor on the same "
                                 f"file: {check.describe()}")
        elif verify_ultralytics:
            raise GateFailed("ultralytics is not installed: cannot verify against its predictor")
    dets = run_pose(ort_session(served, threads=1), images, pre, len(info.labels),
                    nms_params(0.25, 0.45, max_det=100, topk=1000), batch=4 if proof.passed else 1)
    inputs, outputs = io_specs(served)
    gates = {"dynamic_batch": proof.passed, "batch_proof": proof.passed}
    metrics = {f"batch_proof_max_abs_diff_{k}": v for k, v in proof.worst.items()}
    if check is not None:
        gates["ultralytics_agreement"] = True
        metrics.update(check.metrics())
    recipe = {"importer": "families/pose/importers/onnx_graph.py", "source_sha256": info.sha256,
              "labels_from": info.labels_from, "batch_proof_reason": proof.reason,
              "onnx_metadata": {k: v for k, v in info.metadata.items() if k not in ("names", "kpt_names")},
              "photos": photos.describe()}
    source = Source(kind="user", license=weights_license, recipe=recipe,
                    packages=package_versions("onnx", "onnxruntime", "ultralytics"), description=(
                        f"user pose ONNX {info.path.name} (sha256 {info.sha256}), ultralytics export "
                        f"{info.metadata.get('version', '?')}; {pre.kpt_shape[0]}x{pre.kpt_shape[1]} keypoints named "
                        f"from {pre.names_from}. Imported by families/pose/importers/onnx_graph.py"))
    manifest = Manifest(
        name=name, version=version, task="pose", variant="primary", model_file="model.onnx", files=[],
        opset=opset_of(served), inputs=inputs, outputs=outputs, preprocess=pre, labels=info.labels, source=source,
        data_fingerprint=data_fingerprint(info.path), metrics=metrics, parity=proof.checks, gates=gates,
        reference=detection_references([d.dets for d in dets]),
        recipe_hash=stable_hash({"source": info.sha256, "labels": info.labels, "schema": pre.keypoint_schema(),
                                 "imgsz": info.imgsz}), created_at=utcnow(), git_commit=git_commit())
    report = {"name": name, "version": version, "imgsz": info.imgsz, "kpt_shape": info.kpt_shape,
              "keypoint_names_from": pre.names_from, "dynamic_batch": proof.passed, "batch_proof": proof.worst,
              "ultralytics": check.per_image if check is not None else "skipped"}
    return ImportResult(Artifact(staging=staging, manifest=manifest), None, report)


def _cmd(args) -> int:
    from triserve.models.registry import LocalRegistry

    def answer(out: tuple[list[Manifest], dict]) -> None:
        log.info("report: %s", json.dumps(out[1], default=str))
        print_result(*out)

    labels = read_labels(args.labels) if args.labels else None
    photos = user_photos(args.images) if args.images else None
    return run_cli(lambda: import_and_publish(
        LocalRegistry(args.registry), args.name, args.version, args.alias, "pose-onnx",
        lambda work: import_pose_onnx(args.model, args.name, args.version, work, labels=labels, imgsz=args.imgsz,
                                      photos=photos, cache_dir=args.cache,
                                      verify_ultralytics=False if args.no_verify else None, license=args.license,
                                      require_license=True)), answer)


def add_parser(subparsers) -> None:
    """Register `pose-onnx` on the `triserve import` parser (triserve/importers.py)."""
    p = importer_parser(subparsers, "pose-onnx", "import an ultralytics pose ONNX export (keypoints served)", __doc__,
                        ("--model", "the .onnx file"))
    p.add_argument("--labels", type=Path, default=None, help="class names; required without 'names' metadata")
    p.add_argument("--imgsz", type=int, default=None, help="letterbox size for a dynamic-size graph")
    p.add_argument("--images", type=Path, default=None, help="photos for the checks (default: package photos)")
    p.add_argument("--alias", default=None, help="also point this alias at the new version")
    p.add_argument("--cache", type=Path, default=default_cache(), help="wheel and photo cache")
    p.add_argument("--no-verify", action="store_true", help="skip the ultralytics cross-check (recorded)")
    add_license_option(p)
    p.set_defaults(func=_cmd)
