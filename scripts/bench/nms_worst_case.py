"""Capped NMS on adversarial heads: every anchor above threshold, all boxes overlapping or all disjoint.

    python -m scripts.bench.nms_worst_case [--runs 200] [--out docs/bench/nms_worst_case.json]

Prints p50/p99 per case and saves them; the claim under test is that the cap bounds the cost whatever the model emits.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from triserve.families.vision.nms import NMSParams, nms


def adversarial_head(anchors: int, classes: int, overlapping: bool, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if overlapping:
        xy, wh = rng.uniform(300, 340, (anchors, 2)), rng.uniform(50, 60, (anchors, 2))
    else:
        xy, wh = rng.uniform(0, 100_000, (anchors, 2)), np.full((anchors, 2), 4.0)
    scores = rng.uniform(0.5, 1.0, (anchors, classes))
    return np.concatenate([np.c_[xy, wh].T, scores.T]).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--out", type=Path, default=Path("docs/bench/nms_worst_case.json"))
    args = ap.parse_args()
    params = NMSParams(conf_threshold=0.001, pre_nms_topk=1000, max_detections=100)
    results = {}
    for anchors, classes in ((1344, 3), (8400, 80), (33600, 80)):
        for overlapping in (True, False):
            raw = adversarial_head(anchors, classes, overlapping)
            nms(raw, params)  # warm
            times = []
            for _ in range(args.runs):
                t = time.perf_counter()
                nms(raw, params)
                times.append((time.perf_counter() - t) * 1000)
            key = f"{anchors}x{classes}-{'overlap' if overlapping else 'disjoint'}"
            results[key] = {"p50_ms": float(np.percentile(times, 50)), "p99_ms": float(np.percentile(times, 99)),
                            "max_ms": float(np.max(times)), "runs": args.runs}
            print(f"{key:<24} p50 {results[key]['p50_ms']:7.3f} ms   p99 {results[key]['p99_ms']:7.3f} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"params": params.__dict__, "results": results}, indent=2))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
