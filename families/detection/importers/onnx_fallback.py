"""A detection import's cheaper fallback, gated against the FP32 graph it serves beside: static INT8 with the decode
kept FP32, then also the head's last convolutions, then the FP32 graph at a smaller letterbox where the graph allows
it (onnx_graph.py's docstring; the bars: params.FallbackGates)."""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from triserve.families.detection.importers.end2end import compare_batch
from triserve.families.detection.importers.onnx_batch import proof_parts, runner
from triserve.families.detection.importers.onnx_inspect import DetectorInfo
from triserve.families.detection.importers.params import FallbackGates, ImportParams
from triserve.families.detection.importers.pipeline import Photos, letterboxed, nms_params, run_detector
from triserve.families.detection.importers.quantize import quantize_int8
from triserve.families.detection.manifest import DetectionPreprocess
from triserve.models.importing import batching
from triserve.models.importing.agreement import Agreement, Dets, agreement
from triserve.models.importing.graphs import io_specs, ort_session, time_interleaved

log = logging.getLogger("triserve.importer")


def latency(paths: dict[str, Path], feeds: dict[str, dict[str, np.ndarray]], repeats: int) -> dict:
    """One-core batch-1 latency, interleaved (models/importing/graphs.time_interleaved)."""
    return time_interleaved(paths, feeds, threads=1, warmup=2, repeats=repeats, min_sample_ms=50.0)


def _finite_same_io(base: Path, variant: Path, feed: dict[str, np.ndarray]) -> list[str]:
    problems = []
    if io_specs(base) != io_specs(variant):
        problems.append("graph IO differs from the FP32 graph")
    y = ort_session(variant, threads=1).run(None, feed)[0]
    if not np.isfinite(y).all():
        problems.append(f"{int((~np.isfinite(y)).sum())} non-finite outputs")
    return problems


def build_fallback(served: Path, info: DetectorInfo, pre: DetectionPreprocess, imgs: Photos,
                    fp32_agree: list[Dets], feed: dict, work: Path, params: ImportParams, gates: FallbackGates,
                    dynamic: bool, rows: np.ndarray) -> dict:
    """Try INT8 (decode FP32), INT8 (decode + last convs FP32), then FP32 at smaller sizes; first passing wins."""
    work.mkdir(parents=True, exist_ok=True)
    reference_boxes = sum(len(d) for d in fp32_agree)
    if reference_boxes < gates.min_reference_boxes:  # no variant can be judged: do not build any
        return {"attempts": [{"method": "any", "passed": False, "reason": (
            f"only {reference_boxes} FP32 boxes on the {len(fp32_agree)} agreement photos (min "
            f"{gates.min_reference_boxes}): nothing to judge a cheaper variant on; pass --images with photos of the "
            f"model's own domain")}], "chosen": None}
    serving = nms_params(params.serving_conf, params.serving_iou, max_det=100, topk=1000)
    cal_x, _ = letterboxed(imgs.calibration, pre)
    cal_x = np.concatenate([cal_x, cal_x[:, :, :, ::-1]])  # and their mirror images
    cal_feeds = [{info.input_name: cal_x[i:i + 1]} for i in range(len(cal_x))]
    attempts: list[dict] = []

    def judge(agree: Agreement, speedup: float, size_variant: bool) -> tuple[dict[str, bool], list[str]]:
        ok = {"cheaper": speedup >= gates.min_speedup,
              "agreement_evidence": agree.reference_boxes >= gates.min_reference_boxes}
        bars: tuple[float | str, float | str, float]  # share, mean IoU ("-": not gated), confident recall
        if size_variant:
            ok["agreement"] = (agree.share >= gates.min_size_share
                               and agree.confident_recall >= gates.min_size_confident_recall)
            bars = (gates.min_size_share, "-", gates.min_size_confident_recall)
        else:
            ok["agreement"] = (agree.share >= gates.min_share and agree.mean_iou >= gates.min_mean_iou
                               and agree.confident_recall >= gates.min_confident_recall)
            bars = (gates.min_share, gates.min_mean_iou, gates.min_confident_recall)
        why = []
        if not ok["cheaper"]:
            why.append(f"speedup x{speedup:.2f} < x{gates.min_speedup}")
        if not ok["agreement_evidence"]:
            why.append(f"only {agree.reference_boxes} FP32 boxes on the agreement photos (min "
                       f"{gates.min_reference_boxes}): nothing to judge on; use photos of the model's domain")
        if not ok["agreement"]:
            why.append(f"agreement share {agree.share:.3f} (min {bars[0]}), mean IoU {agree.mean_iou:.3f} "
                       f"(min {bars[1]}), confident recall {agree.confident_recall:.3f} (min {bars[2]})")
        return ok, why

    for keep in ("decode", "decode+last-convs"):
        path = work / f"int8-{keep.replace('+', '-')}.onnx"
        started = time.monotonic()
        try:
            method = quantize_int8(served, path, cal_feeds, work / f"q-{keep.replace('+', '-')}", keep)
        except Exception as exc:  # noqa: BLE001  # a quantiser failure is a refused attempt, not a crash
            attempts.append({"method": f"int8-qdq keep {keep} FP32", "passed": False,
                             "reason": f"quantize_static failed: {type(exc).__name__}: {exc}"})
            continue
        quant_s = time.monotonic() - started
        problems = _finite_same_io(served, path, feed)
        q = ort_session(path, threads=1)
        dets = run_detector(q, imgs.agreement, pre, serving, batch=4 if dynamic else 1)
        agree = agreement(fp32_agree, dets, imgs.agreement_names, min_iou=gates.min_iou)
        lat = latency({"fp32": served, "int8": path}, {"b1": feed}, params.latency_repeats)
        fp32_ms, q_ms = lat["fp32"]["b1"]["median"], lat["int8"]["b1"]["median"]
        speedup = fp32_ms / max(q_ms, 1e-9)
        ok, why = judge(agree, speedup, size_variant=False)
        ok["finite_same_io"] = not problems
        why += problems
        # batching: rows of the INT8 graph at batch 4 vs the same graph at batch 1
        batch_diff = {"boxes": 0.0, "scores": 0.0}
        if dynamic:
            q_parts, q_compare = proof_parts(info, params)
            proof = batching.prove_dynamic_batch(runner(q), runner(q), info.input_name, rows, q_parts,
                                                 (max(params.proof_batches),), compare=q_compare)
            batch_diff = proof.worst
            ok["dynamic_batch"] = proof.passed
            if not proof.passed:
                why.append(f"INT8 rows differ across batch sizes: {proof.reason}")
        else:
            ok["dynamic_batch"] = False  # the FP32 graph is served unbatched; so is this one
        metrics = {**agree.metrics("fp32_agreement"), "fp32_agreement_min_iou": gates.min_iou,
                   "fp32_ms_per_image": fp32_ms, "ms_per_image": q_ms, "speedup_vs_fp32": speedup,
                   "int8_batch_rows_max_abs_diff_boxes": batch_diff.get("boxes", 0.0),
                   "int8_batch_rows_max_abs_diff_scores": batch_diff.get("scores", 0.0),
                   "quantize_seconds": quant_s}
        required = [k for k in ok if k != "dynamic_batch" or dynamic]
        passed = all(ok[k] for k in required)
        method["summary"] = (f"static INT8 (QDQ, per-channel, MinMax on {len(cal_feeds)} letterboxed package "
                             f"photos incl. mirrors), {keep} kept FP32")
        attempts.append({"method": f"int8-qdq keep {keep} FP32", "passed": passed, "reason": "; ".join(why),
                         "metrics": metrics, "per_image": agree.per_image})
        log.info("fallback int8 (%s FP32): share %.3f mean IoU %.3f confident recall %.3f, %.1f vs %.1f ms (x%.2f)%s",
                 keep, agree.share, agree.mean_iou, agree.confident_recall, q_ms, fp32_ms, speedup,
                 "" if passed else f": refused ({'; '.join(why)})")
        if passed:
            return {"attempts": attempts, "chosen": {"path": path, "imgsz": info.imgsz, "metrics": metrics,
                                                     "gates": ok,
                                                     "method": method}}

    # smaller letterbox, same FP32 graph: only where height/width are dynamic
    if not info.dynamic_spatial:
        attempts.append({"method": "fp32 smaller imgsz", "passed": False, "reason": (
            f"input fixed at {info.imgsz}x{info.imgsz}: the anchor count ({info.head_shape[2]}) is baked into Reshape "
            f"constants and anchor/stride tables; re-export with dynamic=True for a smaller-size fallback")})
        return {"attempts": attempts, "chosen": None}
    sess = ort_session(served, threads=1)
    for size in [s for s in params.fallback_sizes if s < info.imgsz]:
        small = DetectionPreprocess(imgsz=size)
        bad = _runs_at_size(sess, info, size, dynamic, params)
        if bad:
            attempts.append({"method": f"fp32 imgsz {size}", "passed": False, "reason": bad})
            continue
        dets = run_detector(sess, imgs.agreement, small, serving, batch=4 if dynamic else 1)
        agree = agreement(fp32_agree, dets, imgs.agreement_names, min_iou=gates.min_iou)
        small_feed = {info.input_name: letterboxed(imgs.agreement[:1], small)[0]}
        lat = latency({"fp32": served}, {"big": feed, "small": small_feed}, params.latency_repeats)
        fp32_ms, s_ms = lat["fp32"]["big"]["median"], lat["fp32"]["small"]["median"]
        speedup = fp32_ms / max(s_ms, 1e-9)
        ok, why = judge(agree, speedup, size_variant=True)
        ok["dynamic_batch"] = dynamic
        metrics = {**agree.metrics("fp32_agreement"), "fp32_agreement_min_iou": gates.min_iou,
                   "fp32_ms_per_image": fp32_ms, "ms_per_image": s_ms, "speedup_vs_fp32": speedup}
        passed = ok["cheaper"] and ok["agreement"] and ok["agreement_evidence"]
        attempts.append({"method": f"fp32 imgsz {size}", "passed": passed, "reason": "; ".join(why),
                         "metrics": metrics})
        if passed:
            return {"attempts": attempts, "chosen": {
                "path": served, "imgsz": size, "metrics": metrics, "gates": ok,
                "method": {"tool": "same FP32 graph", "imgsz": size,
                           "summary": f"the same FP32 graph at letterbox {size} (dynamic height/width)"}}}
    return {"attempts": attempts, "chosen": None}


def _runs_at_size(session, info: DetectorInfo, size: int, dynamic: bool, params: ImportParams) -> str:
    """'' when the graph really runs at `size`: no error, anchors scaling with the area, rows independent of the
    batch; else the reason. A graph can declare dynamic height/width and still bake the anchor count in."""
    rng = np.random.default_rng(0)
    n = max(params.proof_batches) if dynamic else 1
    x = rng.random((n, 3, size, size), dtype=np.float32)
    try:
        y = session.run(None, {info.input_name: x})[0]
        singles = [session.run(None, {info.input_name: x[i:i + 1]})[0] for i in range(n)]
    except Exception as exc:  # noqa: BLE001  # any failure to run at this size is the answer
        return f"the graph does not run at {size}x{size}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    if info.head == "end2end":  # [n, max_det, 6]: the top-k's k is fixed, the rows may reorder on near ties
        if tuple(y.shape) != (n, info.head_shape[1], 6):
            return f"output {list(y.shape)} at {size}x{size}, expected [{n}, {info.head_shape[1]}, 6]"
        d = [compare_batch(singles[i], y[i:i + 1], params.score_tolerance) for i in range(n)]
        worst = max(max(r["boxes"], r["scores"]) for r in d)
        if worst > params.box_tolerance_rel * size:
            return f"rows at batch {n} differ from batch 1 by {worst:.3g} at {size}x{size}"
        return ""
    expected = info.head_shape[2] * size * size / (info.imgsz * info.imgsz)
    if y.shape[0] != n or y.shape[1] != info.head_shape[1] or y.shape[2] != expected:
        return (f"output {list(y.shape)} at {size}x{size}, expected [{n}, {info.head_shape[1]}, {expected:g}]: the "
                f"anchor count does not follow the input size")
    worst = max(float(np.abs(y[i:i + 1] - singles[i]).max()) for i in range(n))
    if worst > params.box_tolerance_rel * size:
        return f"rows at batch {n} differ from batch 1 by {worst:.3g} at {size}x{size}"
    return ""
