"""Import an ultralytics-exported ONNX detector: checked, made batch-dynamic (and proved), verified, published.

    triserve import detection-onnx --model best.onnx --name my-det --version 1.0.0 \
        [--fallback-name my-det-int8] [--license SPDX]   # required when the ONNX metadata states no licence
    triserve import coco-default           # the default COCO-80 detector (coco.py: yolov8n-coco + yolov8n-coco-int8)

What is accepted: one input `images[b, 3, S, S]` float32 RGB in 0..1 and one output, either
  * an anchors head `[b, 4 + nc, anchors]` (cx, cy, w, h in input pixels, then nc sigmoid class scores):
    ultralytics' Detect head exported with nms=None (YOLOv5u/v8/v9/v11/v12, or the one-to-many branch of YOLOv10 /
    YOLO26); served with the family's capped NMS (manifest preprocess.head 'anchors'), or
  * an end-to-end head `[b, max_det, 6]` (x1, y1, x2, y2 in input pixels, score, class id): the NMS-free
    one-to-one branch of YOLOv10 / YOLO26 (ultralytics `export(nms=False)`), recognised by its shape or the
    'end2end' metadata and checked for its values (scores in [0, 1], integral class ids in [0, nc)); served with
    the family's confidence filter and cap, no NMS (manifest preprocess.head 'end2end').
Class names and the input size come from the ONNX metadata ultralytics writes (`names`: a Python dict literal,
`imgsz`), or from `--labels FILE` and `--imgsz` when the metadata lacks them. Everything else is refused with the
reason and nothing is published (ImportRefused):
  * segmentation exports (task 'segment', or output0 with 4 + nc + 32 channels beside a mask-prototype output1):
    refused, not sliced. Their box and class channels are a Detect head, but serving them as detection would publish
    a model whose masks are thrown away at every call (the 32 coefficient channels and the prototype branch still
    cost compute, and they cannot be cut out of the exported graph without surgery on ultralytics' final Concat);
    serve it with its masks through `segmentation-onnx` (families/segmentation), or import the .pt with `detection-pt`
    (which cuts the mask branch before export) for boxes only.
  * pose (task 'pose' or 4 + nc + keypoint channels), oriented boxes (task 'obb', 4 + nc + 1 channels) and
    classification (task 'classify', a [b, nc] output): other families' heads (`detection-pt` serves a pose .pt
    as detection, see docs/importers/detection_pt.md).
  * transposed heads [b, anchors, 4 + nc], fixed batches other than 1, non-square or stride-misaligned input sizes,
    class scores outside [0, 1] (no sigmoid: not an ultralytics head), [b, k, 6] outputs whose rows are not
    x1, y1, x2, y2, score, class.

Batch: a fixed-batch-1 export is rewritten (models/importing/batching.py) and the rewrite is PROVED: the rewritten
graph at batch 4 and 2, each row against a batch-1 run of the ORIGINAL graph, boxes within 1e-4 x imgsz pixels and
scores within 1e-4 (ParityCheck entries in the manifest). For an end-to-end head (TopK/GatherElements at the end) the
rows are compared order-insensitively (end2end.compare_rows: near-tied rows may come out in another order). If the
proof fails, the ORIGINAL graph is published with its fixed batch 1 in the manifest inputs and
`gates["dynamic_batch"] = False`: the runner must feed it one item at a time.

Verification against ultralytics: ultralytics' own predictor on the published ONNX file (verify.py) and triserve's
pipeline must find the same boxes on the agreement photos (ultralytics' bus.jpg and zidane.jpg, the street and
office scenes of gradio-yolov8-det, or --images): every box matched, IoU >= 0.9, score within 0.02; a disagreement
refuses the import. A model that finds nothing on those photos makes the check vacuous (logged; use --images).

Fallback (with a fallback name): static INT8 (onnxruntime quantize_static, QDQ, per-channel weights, MinMax calibration
on real photos that ship in packages, models/importing/photos.py), the Detect head's decode kept FP32 (quantize.py).
Gated on agreement with the FP32 graph on held-out photos and on one-core latency (FALLBACK_GATES); if it fails, a
second INT8 attempt also keeps the head's last convolutions FP32; then the FP32 graph at a smaller letterbox size, but
only where the graph has dynamic height/width: a fixed export bakes the anchor count (8400 at 640) into Reshape
constants and anchor tables, and that is refused rather than patched (an end-to-end graph also bakes its top-k k).
"""
from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from triserve.families.detection.importers.evaluate import detection_references
from triserve.families.detection.importers.onnx_batch import serve_batched
from triserve.families.detection.importers.onnx_fallback import build_fallback, latency
from triserve.families.detection.importers.onnx_inspect import inspect_detector
from triserve.families.detection.importers.params import FALLBACK_GATES, PARAMS, FallbackGates, ImportParams
from triserve.families.detection.importers.pipeline import decode_photos, letterboxed, nms_params, run_detector
from triserve.families.detection.manifest import DetectionPreprocess
from triserve.models.importing import batching
from triserve.models.importing.graphs import io_specs, opset_of, ort_session
from triserve.models.importing.labels import read_labels
from triserve.models.importing.licenses import add_license_option, resolve_license, spdx_from_text
from triserve.models.importing.photos import PhotoSet, package_photos, user_photos
from triserve.models.importing.provenance import (
    data_fingerprint,
    export_source,
    git_commit,
    package_versions,
    source_digest,
    stable_hash,
)
from triserve.models.importing.publish import default_cache, import_and_publish, importer_parser, print_result, run_cli
from triserve.models.importing.result import Artifact, GateFailed, ImportResult, Laps
from triserve.models.manifest import Manifest, Source, utcnow

log = logging.getLogger("triserve.importer")

# the code that makes a detection import (part of its recipe hash): this folder and the generic machinery
CODE = (Path(__file__).resolve().parent, Path(batching.__file__).resolve().parent)


def import_detection_onnx(model_path: Path, name: str, version: str, work_dir: Path, *,
                          labels: Sequence[str] | None = None, imgsz: int | None = None,
                          photos: PhotoSet | None = None, cache_dir: Path | None = None,
                          source: Source | None = None, fallback_name: str | None = None,
                          require_fallback: bool = False, verify_ultralytics: bool | None = None,
                          params: ImportParams = PARAMS, gates: FallbackGates = FALLBACK_GATES,
                          recipe_hash: str | None = None, license: str | None = None,
                          require_license: bool = False) -> ImportResult:
    """Check, rewrite, prove, verify and describe an ultralytics ONNX detector; artifacts staged under `work_dir`.

    `photos`: calibration/agreement photos (default: the package photos, downloaded into `cache_dir`).
    `verify_ultralytics`: None = when ultralytics is installed; True = required; False = skipped (recorded).
    `require_fallback`: with `fallback_name`, a fallback that fails every attempt raises GateFailed.
    `license`: SPDX expression of the weights (else the ONNX metadata's `license`, else NOASSERTION, or
    LicenseRequired with `require_license`: models/importing/licenses.py); it overrides a given `source`'s.
    """
    lap = Laps()
    model_path = Path(model_path)
    cache_dir = Path(cache_dir) if cache_dir else default_cache()
    info = inspect_detector(model_path, labels=labels, imgsz=imgsz)
    weights_license = resolve_license(license, spdx_from_text(info.metadata.get("license")), model_path.name,
                                      required=require_license and source is None)
    pre = DetectionPreprocess(imgsz=info.imgsz, letterbox=True, pad_value=114, color_order="RGB", scale=1 / 255.0,
                              head=info.head)
    photos = photos if photos is not None else package_photos(cache_dir)
    imgs = decode_photos(photos)
    lap("inspect+photos")

    # 1. batch: rewrite, prove against the original, or keep the original at batch 1
    work_dir = Path(work_dir)
    staging = work_dir / name
    staging.mkdir(parents=True, exist_ok=True)
    served = staging / "model.onnx"
    n = max(params.proof_batches)
    rows = batching.distinct_rows(letterboxed((imgs.agreement + imgs.calibration)[:n], pre)[0], n)
    proof, rewrite = serve_batched(model_path, info, rows, served, work_dir / f"{name}.dynamic.onnx", params, name)
    dynamic = proof.passed
    lap("batch")

    # 2. the served graph through triserve's pipeline: references, latency, ultralytics cross-check
    session = ort_session(served, threads=1)
    serving = nms_params(params.serving_conf, params.serving_iou, max_det=100, topk=1000)  # NMSParams() defaults
    batch = 4 if dynamic else 1
    fp32_agree = run_detector(session, imgs.agreement, pre, serving, batch=batch)
    fp32_cal = run_detector(session, imgs.calibration, pre, serving, batch=batch)
    feed = {info.input_name: letterboxed(imgs.agreement[:1], pre)[0]}
    lap("detect")

    ultra = None
    if verify_ultralytics is not False:
        from triserve.families.detection.importers.verify import ultralytics_available, verify_against_ultralytics

        if ultralytics_available():
            ultra = verify_against_ultralytics(served, imgs.verify, pre, info.labels, cache_dir=cache_dir,
                                               conf=params.ultralytics_conf, iou=params.ultralytics_iou,
                                               min_iou=params.ultralytics_min_iou,
                                               max_score_diff=params.ultralytics_max_score_diff)
            if not ultra.passed:
                raise GateFailed(f"{name}: triserve's pipeline disagrees with ultralytics' predictor on the same "
                                 f"file: {ultra.describe()}")
            if ultra.agreement.reference_boxes == 0:
                log.warning("%s: ultralytics found no box on the %d agreement photos: the cross-check is vacuous; "
                            "pass --images with photos of the model's own domain", name, len(imgs.verify))
        elif verify_ultralytics:
            raise GateFailed("ultralytics is not installed: cannot verify against its predictor")
    lap("ultralytics")

    inputs, outputs = io_specs(served)
    metadata_license = info.metadata.get("license", "not stated in the ONNX metadata")
    source = export_source(source, license, weights_license, model_path, info.sha256, info.metadata, "export",
                           f"weights license per the ONNX metadata: {metadata_license}. Imported by "
                           f"families/detection/importers/onnx_graph.py")
    recipe = {
        "importer": "families/detection/importers/onnx_graph.py", "source_sha256": info.sha256, "opset": info.opset,
        "labels_from": info.labels_from, "onnx_metadata": {k: v for k, v in info.metadata.items() if k != "names"},
        "batch_rewrite": {**rewrite.as_dict(), "proved": dynamic, "reason": proof.reason},
        "params": asdict(params), "photos": photos.describe(),
    }
    recipe_hash = recipe_hash or stable_hash({"source": info.sha256, "labels": info.labels, "imgsz": info.imgsz,
                                              "params": asdict(params), "code": source_digest(CODE)})
    primary_metrics = {"batch_proof_max_abs_diff_boxes": proof.worst.get("boxes", 0.0),
                       "batch_proof_max_abs_diff_scores": proof.worst.get("scores", 0.0),
                       "photos": float(len(fp32_agree) + len(fp32_cal)),
                       "boxes_per_photo": float(np.mean([len(d) for d in fp32_agree + fp32_cal]))}
    primary_gates = {"dynamic_batch": dynamic, "batch_proof": proof.passed}
    if ultra is not None:
        primary_metrics.update(ultra.metrics())
        primary_gates["ultralytics_agreement"] = ultra.passed
    report = {"name": name, "version": version, "imgsz": info.imgsz, "classes": len(info.labels),
              "dynamic_batch": dynamic, "batch_rewrite": rewrite.as_dict(), "batch_proof_reason": proof.reason,
              "batch_proof": {c.case: c.max_abs_diff for c in proof.checks},
              "ultralytics": ultra.report() if ultra is not None else "skipped",
              "photos_missing": photos.missing}

    # 3. the fallback
    fallback_art = None
    fb_metrics: dict[str, float] = {}
    if fallback_name:
        fb = build_fallback(served, info, pre, imgs, fp32_agree, feed, work_dir / "fallback", params, gates,
                             dynamic, rows)
        report["fallback_attempts"] = fb["attempts"]
        lap("fallback")
        if fb["chosen"] is None:
            msg = f"{name}: no fallback passed its gates: {[a['reason'] for a in fb['attempts']]}"
            if require_fallback:
                raise GateFailed(msg)
            log.warning(msg)
        else:
            chosen = fb["chosen"]
            fb_staging = work_dir / fallback_name
            fb_staging.mkdir(parents=True, exist_ok=True)
            shutil.copy2(chosen["path"], fb_staging / "model.onnx")
            fb_inputs, fb_outputs = io_specs(fb_staging / "model.onnx")
            fb_metrics = chosen["metrics"]
            fb_pre = DetectionPreprocess(imgsz=chosen["imgsz"])
            fb_sess = ort_session(fb_staging / "model.onnx", threads=1)
            fb_dets = (run_detector(fb_sess, imgs.agreement, fb_pre, serving, batch=batch)
                       + run_detector(fb_sess, imgs.calibration, fb_pre, serving, batch=batch))
            fb_source = source.model_copy(update={
                "description": f"{source.description}. Fallback: {chosen['method']['summary']}",
                "recipe": {**recipe, "fallback": chosen["method"]},
                "packages": {**source.packages, **package_versions("onnxruntime")}})
            fallback_art = Artifact(staging=fb_staging, manifest=Manifest(
                name=fallback_name, version=version, task="detection", variant="fallback", fallback_for=name,
                model_file="model.onnx", files=[], opset=opset_of(fb_staging / "model.onnx"), inputs=fb_inputs,
                outputs=fb_outputs, preprocess=fb_pre, labels=info.labels, source=fb_source,
                data_fingerprint=data_fingerprint(model_path, *[p.path for p in photos.calibration]),
                metrics=fb_metrics, parity=[], gates=chosen["gates"], reference=detection_references(fb_dets),
                recipe_hash=stable_hash({"primary": recipe_hash, "fallback": chosen["method"]}),
                created_at=utcnow(), git_commit=git_commit()))
            report["fallback"] = {"name": fallback_name, "method": chosen["method"]["summary"], **fb_metrics}
    if fb_metrics.get("fp32_ms_per_image"):
        primary_metrics["ms_per_image"] = fb_metrics["fp32_ms_per_image"]
    else:
        lat = latency({"fp32": served}, {"b1": feed}, params.latency_repeats)
        primary_metrics["ms_per_image"] = lat["fp32"]["b1"]["median"]
    lap("latency")

    primary = Manifest(
        name=name, version=version, task="detection", variant="primary", model_file="model.onnx", files=[],
        opset=opset_of(served), inputs=inputs, outputs=outputs, preprocess=pre, labels=info.labels,
        source=source.model_copy(update={"recipe": {**source.recipe, **recipe}}),
        data_fingerprint=data_fingerprint(model_path), metrics=primary_metrics, parity=proof.checks,
        gates=primary_gates, reference=detection_references(fp32_agree + fp32_cal), recipe_hash=recipe_hash,
        created_at=utcnow(), git_commit=git_commit())
    report["primary_metrics"] = primary_metrics
    report["timings_s"] = lap.timings
    return ImportResult(Artifact(staging=staging, manifest=primary), fallback_art, report)


# -- publishing -------------------------------------------------------------------------------------------------------
def publish_detection_onnx(model: Path, name: str, version: str, registry, *, labels_file: Path | None = None,
                           imgsz: int | None = None, alias: str | None = None, fallback_name: str | None = None,
                           cache_dir: Path | None = None, images: Path | None = None,
                           verify_ultralytics: bool | None = None, license: str | None = None,
                           require_license: bool = False) -> tuple[list[Manifest], dict]:
    """import_detection_onnx + publish into `registry` (triserve.models.registry.LocalRegistry); (published, report).

    `images`: a folder of the model's own-domain photos for calibration/agreement/references (default: the package
    photos). Versions are immutable: an existing name:version is refused before any work.
    """
    return import_and_publish(registry, name, version, alias, "detection-onnx", lambda work: import_detection_onnx(
        model, name, version, work, labels=read_labels(labels_file) if labels_file else None, imgsz=imgsz,
        photos=user_photos(images) if images else None, cache_dir=cache_dir, fallback_name=fallback_name,
        verify_ultralytics=verify_ultralytics, license=license, require_license=require_license),
        fallback_name=fallback_name)


def log_report(report: dict) -> None:
    """The report's headline numbers, one line each (the whole report at DEBUG)."""
    log.info("batch: dynamic=%s, %d Reshape constants rewritten, proof %s", report["dynamic_batch"],
             len(report["batch_rewrite"]["reshapes"]),
             {k: f"{v:.3g}" for k, v in report["batch_proof"].items()} or report["batch_proof_reason"])
    if isinstance(report.get("ultralytics"), list):
        for row in report["ultralytics"]:
            log.info("ultralytics vs triserve %s: %d vs %d boxes, %d matched, min IoU %.6f, max score diff %.2g",
                     row["image"], row["reference"], row["candidate"], row["matched"], row["min_iou"],
                     row["max_score_diff"])
    for a in report.get("fallback_attempts", []):
        m = a.get("metrics", {})
        log.info("fallback %s: %s%s", a["method"], "passed" if a["passed"] else f"refused ({a['reason']})",
                 f"; share {m['fp32_agreement_share']:.3f}, mean IoU {m['fp32_agreement_mean_iou']:.3f}, "
                 f"{m['ms_per_image']:.1f} vs {m['fp32_ms_per_image']:.1f} ms" if m else "")
    log.info("timings (s): %s", report.get("timings_s"))
    log.debug("report: %s", json.dumps(report, default=str))


# -- CLI --------------------------------------------------------------------------------------------------------------
def _cmd_onnx(args) -> int:
    from triserve.models.registry import LocalRegistry

    def answer(out: tuple[list[Manifest], dict]) -> None:
        log_report(out[1])
        print_result(*out)

    return run_cli(lambda: publish_detection_onnx(
        args.model, args.name, args.version, LocalRegistry(args.registry), labels_file=args.labels, imgsz=args.imgsz,
        alias=args.alias, fallback_name=args.fallback_name, cache_dir=args.cache, images=args.images,
        verify_ultralytics=False if args.no_verify else None, license=args.license, require_license=True), answer)


def add_parser(subparsers) -> None:
    """Register `detection-onnx` on the `triserve import` parser (triserve/importers.py)."""
    p = importer_parser(subparsers, "detection-onnx", "import an ultralytics ONNX detection export", __doc__,
                        ("--model", "the .onnx file"),
                        name_help="registry model name, e.g. my-detector", version_help="immutable version, e.g. 1.0.0")
    p.add_argument("--labels", type=Path, default=None,
                   help="class names (one per line, or JSON/YAML list/dict/'names'); required without ONNX metadata")
    p.add_argument("--imgsz", type=int, default=None, help="letterbox size; required for a dynamic-size graph "
                                                           "without 'imgsz' metadata")
    p.add_argument("--alias", default=None, help="also point this alias (e.g. canary) at the new version(s)")
    p.add_argument("--fallback-name", default=None,
                   help="also build, gate and publish a cheaper fallback (INT8, or a smaller size) under this name")
    p.add_argument("--images", type=Path, default=None,
                   help="photos of the model's own domain for calibration/agreement (default: package photos)")
    p.add_argument("--cache", type=Path, default=default_cache(), help="wheel and photo cache")
    p.add_argument("--no-verify", action="store_true", help="skip the ultralytics cross-check (recorded as absent)")
    add_license_option(p)
    p.set_defaults(func=_cmd_onnx)
