"""Mask assembly at its worst: max_det kept instances, each box covering the whole image, on 640x640 and a large
original (4000x3000), for one core. Measures the post-NMS mask stage only (families/segmentation/postprocess:
masks of the kept instances inside their boxes + COCO RLE), the part the NMS cap cannot bound by itself.

    taskset -c 0 python -m scripts.bench.mask_worst_case [--runs 50] [--max-det 100]
        [--out docs/bench/mask_worst_case.json]          # also writes the .md beside it

Goal: p99 <= 10 ms at max_det for 640x640. Throughput of segmentation vs detection on the same backbone (the
--throughput note): serve one segment model and its detection-only export (detection-pt cuts the mask branch of the
same .pt) side by side and run scripts/bench/wrk.py against /v1/segment and /v1/detect with the same images; the
ratio of the two requests/s is the cost of masks (not automated here).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from triserve.families.segmentation.limits import Limits
from triserve.families.segmentation.manifest import SegmentationPreprocess
from triserve.families.segmentation.postprocess import image_result, select
from triserve.families.vision.letterbox import letterbox
from triserve.families.vision.nms import NMSParams

IMGSZ = 640
PRE = SegmentationPreprocess(imgsz=IMGSZ, anchors=8400, mask_dim=32, proto_size=IMGSZ // 4)


def smooth_protos(rng: np.random.Generator) -> np.ndarray:
    """Prototypes like a trained model's (smooth fields): random values on an 8x8 grid, upsampled bilinearly."""
    import cv2

    coarse = rng.standard_normal((PRE.mask_dim, 8, 8)).astype(np.float32)
    return np.stack([cv2.resize(c, (PRE.proto_size,) * 2, interpolation=cv2.INTER_LINEAR) for c in coarse])


def worst_row(n: int, seed: int = 0, noise: bool = False) -> np.ndarray:
    """n instances of n classes (class-aware NMS keeps all) whose boxes cover the whole input: the most pixels the
    mask stage can be asked for. noise=True: white-noise prototypes (the most runs per column: an adversarial model)."""
    rng = np.random.default_rng(seed)
    nc = n  # one class each: NMS suppresses nothing
    head = np.zeros((4 + nc + PRE.mask_dim, PRE.anchors), np.float32)
    head[:4, :n] = np.array([[IMGSZ / 2], [IMGSZ / 2], [IMGSZ], [IMGSZ]], np.float32)
    head[4 + np.arange(n), np.arange(n)] = 0.9
    head[4 + nc:, :n] = rng.standard_normal((PRE.mask_dim, n))
    protos = (rng.standard_normal((PRE.mask_dim, PRE.proto_size, PRE.proto_size)).astype(np.float32) if noise
              else smooth_protos(rng))
    return np.concatenate([head.reshape(-1), protos.reshape(-1)])


def typical_row(n: int, side: int = 64, seed: int = 0) -> np.ndarray:
    """n instances of one class on a grid, boxes side x side network pixels (disjoint: NMS keeps them all)."""
    rng = np.random.default_rng(seed)
    head = np.zeros((4 + 1 + PRE.mask_dim, PRE.anchors), np.float32)
    per_row = IMGSZ // side
    for i in range(n):
        cx, cy = (i % per_row + 0.5) * side, ((i // per_row) % per_row + 0.5) * side
        head[:4, i] = (cx, cy, side - 2, side - 2)
    head[4, :n] = 0.9
    head[5:, :n] = rng.standard_normal((PRE.mask_dim, n))
    return np.concatenate([head.reshape(-1), smooth_protos(rng).reshape(-1)])


def measure(row: np.ndarray, n: int, orig_hw: tuple[int, int], runs: int, fmt: str, case: str,
            nc: int | None = None, budget: int | None = None, samples: int | None = None) -> dict:
    _, meta = letterbox(np.zeros((*orig_hw, 3), np.uint8), IMGSZ)
    nc = n if nc is None else nc
    labels = [str(i) for i in range(nc)]
    params = NMSParams(conf_threshold=0.25, max_detections=n, pre_nms_topk=1000)
    nms_ms, total_ms = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        select(row, PRE, nc, params)
        t1 = time.perf_counter()
        res = image_result(row, meta, PRE, labels, params, fmt, 1000, budget, samples)
        t2 = time.perf_counter()
        nms_ms.append((t1 - t0) * 1000)
        total_ms.append((t2 - t1) * 1000)
    assert len(res.instances) == n, (case, len(res.instances))
    mask_ms = np.maximum(np.array(total_ms) - np.array(nms_ms), 0)  # the post-NMS mask stage
    return {"case": case, "masks_skipped": res.masks_skipped, "budget": budget, "samples": samples,
            "encoded_chars": sum(len(i.rle.counts) for i in res.instances if i.rle is not None),
            "image": f"{orig_hw[1]}x{orig_hw[0]}", "instances": n, "format": fmt, "runs": runs,
            "mask_stage_p50_ms": float(np.percentile(mask_ms, 50)),
            "mask_stage_p99_ms": float(np.percentile(mask_ms, 99)),
            "nms_p50_ms": float(np.percentile(nms_ms, 50)), "total_p99_ms": float(np.percentile(total_ms, 99))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--max-det", type=int, default=100)
    ap.add_argument("--out", type=Path, default=Path("docs/bench/mask_worst_case.json"))
    args = ap.parse_args()
    n, big = args.max_det, max(3, args.runs // 10)
    budget, samples = Limits().max_mask_runs, Limits().max_mask_samples  # the served defaults
    # (name, row, classes, original h x w, runs, format, mask run budget, samples per instance)
    cases = [("typical 62px boxes", typical_row(n), 1, (640, 640), args.runs, "rle", budget, samples),
             ("full boxes, smooth", worst_row(n), n, (640, 640), args.runs, "rle", budget, samples),
             ("full boxes, smooth", worst_row(n), n, (640, 640), args.runs, "polygons", budget, samples),
             ("full boxes, noise", worst_row(n, noise=True), n, (640, 640), args.runs, "rle", budget, samples),
             ("full boxes, smooth, no run budget", worst_row(n), n, (640, 640), args.runs, "rle", None, samples),
             ("full boxes, smooth, one sample per pixel, no budget", worst_row(n), n, (640, 640), big, "rle", None,
              None),
             ("full boxes, smooth", worst_row(n), n, (3000, 4000), big, "rle", budget, samples)]
    results = []
    for case, row, nc, hw, runs, fmt, cap, per_instance in cases:
        r = measure(row, n, hw, runs, fmt, case, nc, cap, per_instance)
        results.append(r)
        print(f"{case:>27} {r['image']:>10} {n} instances ({fmt}, {r['masks_skipped']} masks skipped): mask stage "
              f"p50 {r['mask_stage_p50_ms']:.1f} ms, p99 {r['mask_stage_p99_ms']:.1f} ms", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"goal": "p99 <= 10 ms at max_det on 640x640", "results": results}, indent=2))
    lines = ["# Mask assembly worst case (scripts/bench/mask_worst_case.py)", "",
             "Post-NMS mask stage (masks + encoding of the kept instances), one core. 'full boxes': every instance's "
             "box covers the whole image (the most pixels NMS can leave: one class each). Served defaults: "
             f"limits.max_mask_samples {samples} per instance (a larger box is sampled on a coarser grid), "
             f"limits.max_mask_runs {budget} per image (the first instance past it and all after it keep their "
             "box, mask_skipped). "
             "'encoded chars': the COCO RLE strings' total length, the response's mask payload.", "",
             f"Reproduce: `{' '.join(['taskset -c 0 python -m scripts.bench.mask_worst_case', *sys.argv[1:]])}`", "",
             "| case | image | instances | masks skipped | format | encoded chars | p50 ms | p99 ms |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['image']} | {r['instances']} | {r['masks_skipped']} | {r['format']} | "
              f"{r['encoded_chars']:,} | {r['mask_stage_p50_ms']:.1f} | {r['mask_stage_p99_ms']:.1f} |"
              for r in results]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
