"""What masks cost: the default segmenter against the same network without its mask branch, on one core.

    taskset -c 0 python -m scripts.bench.seg_vs_det [--rounds 3] [--seconds 8] [--out docs/bench/seg_vs_det.json]

The `plates` model (platedet's YOLOv8s-seg at 640, from the registry) is served as one packed graph; its detection
twin is the same graph cut at the head's box and class outputs (onnx.utils.Extractor: the prototype branch and the
mask-coefficient convolutions are gone, the backbone and neck are the same weights). Per image, on the real photos
`make models` caches: segmentation = ONNX Runtime call + the family's postprocess (capped NMS, masks of the kept
instances, COCO RLE with the served limits); detection = ONNX Runtime call + detection's capped NMS. Both sessions
use one intra-op thread; rounds interleave the two; the ratio is taken within each round, then the median.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from scripts.bench.textmix import ROOT
from triserve.families.segmentation.limits import Limits
from triserve.families.segmentation.manifest import SegmentationPreprocess
from triserve.families.segmentation.postprocess import image_result, split_row
from triserve.families.vision.letterbox import boxes_to_original, preprocess_image
from triserve.families.vision.nms import NMSParams, nms
from triserve.models.importing.photos import package_photos, read_rgb
from triserve.models.manifest import preprocess_as
from triserve.models.registry import LocalRegistry

HEAD_OUTPUTS = ("/model.22/Mul_2_output_0", "/model.22/Sigmoid_output_0")  # boxes (xywh), class scores


def detection_twin(model: Path, out: Path) -> Path:
    """The segment graph cut at its box and class outputs, concatenated into detection's [b, 4 + nc, anchors]."""
    import onnx
    from onnx import helper

    inferred = onnx.shape_inference.infer_shapes(onnx.load(str(model)))  # the extractor needs the value infos
    sub = onnx.utils.Extractor(inferred).extract_model(["images"], list(HEAD_OUTPUTS))
    sub.graph.node.append(helper.make_node("Concat", list(HEAD_OUTPUTS), ["output"], axis=1))
    for o in list(sub.graph.output):
        sub.graph.output.remove(o)
    sub.graph.output.append(helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, None))
    onnx.save(sub, str(out))
    return out


def session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--registry", type=Path, default=ROOT / "models" / "store")
    ap.add_argument("--model", default="plates")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "seg_vs_det.json")
    args = ap.parse_args(argv)
    reg = LocalRegistry(args.registry)
    version = reg.resolve(args.model, "stable")
    manifest = reg.manifest(args.model, version)
    pre = preprocess_as(manifest, SegmentationPreprocess)
    model_path = args.registry / args.model / "versions" / version / "model.onnx"
    limits = Limits()
    params = NMSParams(conf_threshold=limits.conf_threshold, iou_threshold=limits.iou_threshold,
                       pre_nms_topk=limits.pre_nms_topk, max_detections=limits.max_detections)
    nc = len(manifest.labels)
    photos = package_photos(ROOT / ".cache" / "importer")
    images = [read_rgb(p.path) for p in photos.all()]
    prepared = [preprocess_image(img, pre.imgsz, pre.pad_value, pre.scale, pre.color_order) for img in images]
    with tempfile.TemporaryDirectory() as d:
        seg, det = session(model_path), session(detection_twin(model_path, Path(d) / "det.onnx"))

        def run_seg(x, meta):
            row = seg.run(None, {"images": x[None]})[0][0]
            return len(image_result(row, meta, pre, manifest.labels, params, "rle", limits.max_polygon_points,
                                    limits.max_mask_runs, limits.max_mask_samples).instances)

        def run_det(x, meta):
            raw = det.run(None, {"images": x[None]})[0][0]
            kept = nms(raw, params)
            boxes_to_original(kept.boxes, meta)
            return len(kept.boxes)

        # the twin finds the same instances: same head, same NMS
        same = all(run_seg(x, m) == run_det(x, m) for x, m in prepared)
        head_rows = split_row(seg.run(None, {"images": prepared[0][0][None]})[0][0], pre, nc)[0][:4 + nc]
        twin_rows = det.run(None, {"images": prepared[0][0][None]})[0][0]
        max_diff = float(np.abs(head_rows - twin_rows).max())

        def rate(fn) -> float:
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < args.seconds:
                x, meta = prepared[n % len(prepared)]
                fn(x, meta)
                n += 1
            return n / (time.perf_counter() - t0)

        rounds = []
        for r in range(args.rounds):
            s_rate, d_rate = rate(run_seg), rate(run_det)
            rounds.append({"segmentation_images_per_s": s_rate, "detection_images_per_s": d_rate,
                           "ratio": s_rate / d_rate})
            print(f"[seg_vs_det] round {r + 1}: segmentation {s_rate:.2f} images/s, detection twin {d_rate:.2f}, "
                  f"ratio {s_rate / d_rate:.3f}", flush=True)
    ratios = [r["ratio"] for r in rounds]
    res = {"command": "taskset -c 0 python -m scripts.bench.seg_vs_det " + " ".join(argv or sys.argv[1:]),
           "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "model": f"{args.model}:{version}", "photos": len(images), "same_instances": same,
           "head_max_abs_diff": max_diff, "rounds": rounds, "ratio_median": statistics.median(ratios),
           "ratio_range": [min(ratios), max(ratios)]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))
    med = statistics.median
    lines = ["# Segmentation vs detection on the same network (scripts/bench/seg_vs_det.py)", "",
             f"Reproduce: `{res['command']}` ({res['started_utc']}). Model `{res['model']}` (YOLOv8s-seg at 640); its "
             "detection twin is the same graph cut at the box and class outputs. One core, one intra-op thread, "
             f"{len(images)} real photos in turn, {args.rounds} interleaved rounds of {args.seconds:g} s each; per "
             "image: ONNX Runtime call + the family's postprocess (segmentation: NMS, masks, COCO RLE with the served "
             "limits; detection: NMS).", "",
             f"Same instances per photo from both: {same}; head outputs max abs diff {max_diff:.2e}.", "",
             "| round | segmentation images/s | detection twin images/s | ratio |", "|---|---|---|---|"]
    lines += [f"| {i + 1} | {r['segmentation_images_per_s']:.2f} | {r['detection_images_per_s']:.2f} | "
              f"{r['ratio']:.3f} |" for i, r in enumerate(rounds)]
    lines += ["", f"Median ratio segmentation / detection: **{med(ratios):.3f}** "
                  f"[{min(ratios):.3f}-{max(ratios):.3f}]."]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
