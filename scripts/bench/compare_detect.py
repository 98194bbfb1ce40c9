"""Object detection, one model, seven ways, one run: how close does triserve get to the ONNX Runtime ceiling?
The detection twin of scripts/bench/compare.py (same method, same placement: both run on scripts/bench/harness.py).

    python -m scripts.bench.compare_detect                     # ~9 min: what docs/bench/compare_detect.* holds
    python -m scripts.bench.compare_detect --rounds 1 --duration 2 --warmup 1 --concurrency 1,8 \\
        --out /tmp/compare_detect_dev/compare_detect         # quick look (~2 min)
    python -m scripts.bench.compare_detect --systems inproc,naive,pytriton,kserve,mlserver,triserve \\
        --concurrency 1,4,16 --goal-concurrency 16             # the side-by-side of issue 32 part 3

Requests: one image per request, JPEG (quality 90), sizes from --seed: 30% 320x240, 40% 640x480, 30% 1280x720 (exact
shares, shuffled). The pictures: real photos of COCO scenes when --photos names a folder of them (default: the
importer's package photos, .cache/importer/photos, filled by `make models`: ultralytics/gradio-yolov8-det street,
office and animal photos and scikit-image's data photos), each cycled, centre-cropped to the size's aspect and
resized; with no photo there (or --photos none), a landscape canvas holding a square of 1-6 drawn shapes from the
shapes detector's synthetic-data generator (families/detection/importers/scenes.draw_image), on which a COCO model
finds next to nothing (so NMS and the agreement check have little to work on). Sent as base64 JSON:
triserve and the naive peer get POST /v1/detect {"images": [{"data": <b64>}]}
(families/detection/schemas.DetectRequest), PyTriton and MLServer the same base64 string as a V2 BYTES tensor, KServe
as a V1 instance {"image_bytes": {"b64": ...}}. Every system decodes, letterboxes, runs and NMSes on the server side.

Systems (all on the same ONNX file: the model of the default detection deployment in configs/models.yaml, today
`coco` = yolov8n-coco:stable at 640 from models/store; same session options, CPU execution provider,
the same families/detection functions for decode, letterbox, capped NMS and the mapping back to original pixels):
  inproc            in-process ONNX Runtime: base64 + image decode + letterbox + run + NMS at batch sizes 1,4,8,16
                    back to back (intra-op threads --intra-op and the other of 0/1); the best images/s is the ceiling,
                    the batch-1 call latency (servers' thread setting) is the floor for c=1 latency
  naive             scripts/bench/peers/naive_fastapi_detect.py under uvicorn: FastAPI, one session.run per request
  pytriton          scripts/bench/peers/pytriton_detect.py: NVIDIA PyTriton (Triton + DynamicBatcher, max batch 16
                    as triserve's detection slot), own venv (--pytriton-python, default
                    .cache/bench/pytriton-venv/bin/python); skipped with the reason if it cannot start
  kserve            scripts/bench/peers/kserve_detect.py: KServe's Python model server, a kserve.Model with a V1
                    predict(), no batching (its Python server has none), own venv (--kserve-python)
  mlserver          scripts/bench/peers/mlserver_detect.py: MLServer custom runtime, adaptive batching on (max batch
                    --pytriton-max-batch, max_batch_time --mlserver-batch-time-ms), own venv (--mlserver-python)
  triserve_nobatch  `bentoml serve triserve.services.gateway:Gateway` with batching off for the detection slot:
                    TRISERVE_SLOTS__<DETECTION DEPLOYMENT>__BATCHING__MAX_BATCH_SIZE=1; --nobatch-env changes it
  triserve          the same, default config (gateway batching while busy, max_batch_size 16)
  triserve_local    the same with TRISERVE_RUNNER__PLACEMENT=local (runner code in the API worker, no hop)
Every triserve system runs with harness.RAISED_LIMITS (per-client rate limit raised: one load generator is one
client address; gRPC off: its fixed port would collide), the overload spill off (harness.SPILL_OFF) and a BENTOML_HOME
of its own; nothing else is changed. Counted as in compare.py: images/s and latency are primary answers only,
degraded answers (a fallback model answered) apart.

Placement: every server (and the in-process measurement) pinned to --server-cpu (default 0), this process (the load
generator) to --load-cpu (default 1). Closed loop (harness.load_cell: wrk when installed, else --load-generator
aiohttp; a fixed number of connections each sending its next request when the previous answer arrived) at each
--concurrency; each cell is --warmup seconds
unmeasured then --duration seconds measured. Rounds interleave the systems; tables report medians over rounds with
[min-max]; goal ratios are computed within each round, then summarised the same way.

Also: the detection batch-size histograms of both triserve instances per concurrency (deltas of /metrics around each
cell: triserve_runner_batch_size and triserve_gateway_batch_requests, slot detection, summed over rounds), an
agreement check (every system's boxes and classes on --agree-images images against in-process batch 1: same count,
same classes, boxes within --agree-tol-px pixels), and c=1 stage timings of triserve fresh and after the rounds.

Writes <out>.json, <out>.md and, with matplotlib, <out>_throughput.png, <out>_latency.png and <out>_batch_sizes.png.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from scripts.bench import batch_hist, harness
from scripts.bench.harness import TRISERVE_SYSTEMS, Family, RoundView, cell, shown
from scripts.bench.peers import common as peers
from scripts.bench.textmix import ROOT, model_dir
from scripts.common import default_deployment, default_model

SLOT = default_deployment("detection")
MODEL = default_model("detection")  # the default deployment's primary model (coco: yolov8n-coco)
SYSTEMS = harness.SYSTEMS
FAMILY = Family(tag="compare_detect", model=MODEL, slot=SLOT, unit="images",
                naive_app="scripts.bench.peers.naive_fastapi_detect:app",
                pytriton_script="scripts/bench/peers/pytriton_detect.py", pytriton_model="detector",
                kserve_script="scripts/bench/peers/kserve_detect.py",
                mlserver_runtime="scripts.bench.peers.mlserver_detect.DetectorRuntime",
                log_prefix="detect_", pytriton_args=lambda args: ["--max-batch-size", str(args.pytriton_max_batch)],
                mlserver_max_batch=lambda args: args.pytriton_max_batch)
V2_SYSTEMS = ("pytriton", "mlserver")  # speak the V2 inference protocol: one BYTES image in, padded tensors out
SIZE_MIX = ((320, 240, 0.3), (640, 480, 0.4), (1280, 720, 0.3))  # (width, height, share)
GOALS = {  # name: (description with {c} for the goal concurrency, comparison, threshold): issue 32's goals
    "batching_on_vs_off": ("(no goal on CPU) triserve default / triserve batching off (detection max_batch_size 1, "
                           "queue control off), throughput at c={c}", ">=", 1.0),
    "triserve_vs_best_peer": ("triserve / the best of naive FastAPI, PyTriton, KServe, MLServer, throughput at c={c}",
                              ">=", 1.1),
    "triserve_p99_vs_naive": ("triserve p99 / naive FastAPI p99 at c={c} (p99 no worse than naive)", "<=", 1.0),
    "triserve_vs_ceiling": ("triserve throughput at c={c} / in-process ceiling", ">=", 0.85),
    "c1_p50_overhead_ms": ("triserve p50 at c=1 minus in-process batch-1 call p50 (ms)", "<=", 2.0),
    "local_vs_best_peer": ("triserve_local / the best of naive FastAPI, PyTriton, KServe, MLServer, "
                           "throughput at c={c}",
                           ">=", 1.1),
    "local_vs_ceiling": ("triserve_local throughput at c={c} / in-process ceiling", ">=", 0.85),
    "local_c1_p50_overhead_ms": ("triserve_local p50 at c=1 minus in-process batch-1 call p50 (ms)", "<=", 1.2),
}


# --------------------------------------------------------------------------------------------------------------------
# request mix
# --------------------------------------------------------------------------------------------------------------------
def image_sizes(n: int, seed: int = 0, mix=SIZE_MIX) -> list[tuple[int, int]]:
    """n (width, height) pairs with exactly the mix's shares (largest remainders), in a seeded shuffled order."""
    quotas = [share * n for _, _, share in mix]
    counts = [math.floor(q) for q in quotas]
    for i in sorted(range(len(mix)), key=lambda i: quotas[i] - counts[i], reverse=True)[: n - sum(counts)]:
        counts[i] += 1
    sizes = [(w, h) for (w, h, _), k in zip(mix, counts) for _ in range(k)]
    random.Random(seed).shuffle(sizes)
    return sizes


def make_image(width: int, height: int, rng: np.random.Generator, max_objects: int = 6
               ) -> tuple[np.ndarray, list[tuple[int, list[float]]]]:
    """A width x height RGB image: a noisy gradient canvas holding a min(w, h) square of 1..max_objects shapes drawn
    by the detector's training-data generator. Objects as (class, [x1, y1, x2, y2]) in image pixels."""
    from triserve.families.detection.importers.scenes import draw_image

    side = min(width, height)
    c0, c1 = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    t = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :, None]
    canvas = np.broadcast_to(c0 * (1 - t) + c1 * t, (height, width, 3)).astype(np.float32)
    canvas = np.clip(canvas + rng.normal(0, 6, canvas.shape), 0, 255).astype(np.uint8)
    square, objects = draw_image(rng, side, max_objects)
    x0, y0 = int(rng.integers(0, width - side + 1)), int(rng.integers(0, height - side + 1))
    canvas[y0:y0 + side, x0:x0 + side] = square
    return canvas, [(int(c), [float(b[0] + x0), float(b[1] + y0), float(b[2] + x0), float(b[3] + y0)])
                    for c, b in objects]


def image_mix(n: int = 60, seed: int = 0, quality: int = 90) -> list[dict]:
    """The request mix: n images, each {"width", "height", "b64" (JPEG), "jpeg_bytes", "objects"}; image i depends
    only on (seed, i) and its size, so the same arguments give byte-identical requests."""
    from PIL import Image

    out = []
    for i, (w, h) in enumerate(image_sizes(n, seed)):
        rgb, objects = make_image(w, h, np.random.default_rng([seed, i]))
        buf = io.BytesIO()
        Image.fromarray(rgb).save(buf, format="JPEG", quality=quality)
        raw = buf.getvalue()
        out.append({"width": w, "height": h, "b64": base64.b64encode(raw).decode("ascii"), "jpeg_bytes": len(raw),
                    "objects": objects})
    return out


PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")


def photo_files(folder: Path | None) -> list[Path]:
    """The photos under `folder` (recursive, sorted by relative path: the same order on every host); none when the
    folder is None or missing."""
    if folder is None or not folder.is_dir():
        return []
    return sorted((p for p in folder.rglob("*") if p.suffix.lower() in PHOTO_SUFFIXES),
                  key=lambda p: p.relative_to(folder).as_posix())


def fit_photo(rgb: np.ndarray, width: int, height: int) -> np.ndarray:
    """The photo centre-cropped to width:height and resized to width x height (no padding, no distortion)."""
    import cv2

    h, w = rgb.shape[:2]
    scale = min(w / width, h / height)
    cw, ch = max(1, round(width * scale)), max(1, round(height * scale))
    x0, y0 = (w - cw) // 2, (h - ch) // 2
    crop = rgb[y0:y0 + ch, x0:x0 + cw]
    return cv2.resize(crop, (width, height), interpolation=cv2.INTER_AREA if scale >= 1 else cv2.INTER_LINEAR)


def photo_mix(photos: list[Path], n: int = 60, seed: int = 0, quality: int = 90) -> list[dict]:
    """The request mix from real photos: image i is photo i mod len(photos) fitted to the i-th size of
    image_sizes(n, seed), as JPEG; same keys as image_mix ("objects" empty: no ground truth is needed, the systems
    are checked against each other) plus "photo"."""
    from PIL import Image

    from triserve.models.importing.photos import read_rgb

    out = []
    for i, (w, h) in enumerate(image_sizes(n, seed)):
        src = photos[i % len(photos)]
        buf = io.BytesIO()
        Image.fromarray(fit_photo(read_rgb(src), w, h)).save(buf, format="JPEG", quality=quality)
        raw = buf.getvalue()
        out.append({"width": w, "height": h, "b64": base64.b64encode(raw).decode("ascii"), "jpeg_bytes": len(raw),
                    "objects": [], "photo": src.name})
    return out


def describe_mix(images: list[dict], seed: int, quality: int, photos_from: str | None = None) -> str:
    by_size: dict[str, int] = {}
    for im in images:
        key = f"{im['width']}x{im['height']}"
        by_size[key] = by_size.get(key, 0) + 1
    kb = np.mean([im["jpeg_bytes"] for im in images]) / 1024
    sizes = ", ".join(f"{v} x {k}" for k, v in by_size.items())
    if photos_from:
        n_photos = len({im["photo"] for im in images})
        return (f"photo mix ({n_photos} photos from {photos_from}, centre-cropped and resized; seed {seed}, "
                f"{len(images)} JPEGs at quality {quality}: {sizes}; mean {kb:.0f} KiB)")
    objs = np.mean([len(im["objects"]) for im in images])
    return (f"generated mix (seed {seed}, {len(images)} JPEGs at quality {quality}: {sizes}; mean {kb:.0f} KiB, "
            f"{objs:.1f} shapes each)")


def request_for(system: str, base: str, b64: str) -> tuple[str, bytes]:
    """The same work for every system, in its own protocol: one base64 JPEG, its detections back."""
    if system in V2_SYSTEMS:
        body = {"inputs": [{"name": "image", "shape": [1, 1], "datatype": "BYTES", "data": [b64]}]}
        return f"{base}/v2/models/{FAMILY.pytriton_model}/infer", json.dumps(body).encode()
    if system == "kserve":  # KServe V1, binary data as {"b64": ...}
        v1 = {"instances": [{"image_bytes": {"b64": b64}}]}
        return f"{base}/v1/models/{FAMILY.pytriton_model}:predict", json.dumps(v1).encode()
    ours: dict = {"images": [{"data": b64}]}
    if system in TRISERVE_SYSTEMS:  # the primary or a refusal: never the cheaper fallback (the peers have none)
        ours["model"] = "primary"
    return f"{base}/v1/detect", json.dumps(ours).encode()


def parse_detections(system: str, payload: dict) -> list[tuple[int, list[float], float]]:
    """One image's detections as (class_id, [x1, y1, x2, y2], score) from a system's answer."""
    if system in V2_SYSTEMS:
        out = {o["name"]: o["data"] for o in payload["outputs"]}
        k = int(out["count"][0])
        boxes = np.asarray(out["boxes"], dtype=np.float64).reshape(-1, 4)
        return [(int(out["classes"][i]), [float(v) for v in boxes[i]], float(out["scores"][i])) for i in range(k)]
    first = payload["predictions"][0] if system == "kserve" else payload["results"][0]
    return [(int(d["class_id"]), [float(v) for v in d["box"]], float(d["score"])) for d in first["detections"]]


# --------------------------------------------------------------------------------------------------------------------
# the pipeline, in process (the ceiling and the agreement reference)
# --------------------------------------------------------------------------------------------------------------------
def open_session(intra_op: int):
    d, manifest = model_dir(name=MODEL)
    return peers.session(d, manifest, intra_op), manifest  # as the runner's (intra-op threads vary here)


def run_pipeline(sess, manifest: dict, b64s: list[str]) -> tuple[list[list[tuple]], dict[str, float]]:
    """What every server does for a batch of images: base64 + image decode, letterbox, one ONNX Runtime call,
    capped NMS, boxes back to original pixels (triserve's default limits and thresholds). Returns the detections per
    image and the milliseconds per stage."""
    from triserve.families.detection.limits import Limits
    from triserve.families.vision.decode import decode_base64, decode_image
    from triserve.families.vision.letterbox import boxes_to_original, preprocess_image
    from triserve.families.vision.nms import NMSParams, nms

    lim = Limits()  # the family's defaults (configs/serving.yaml sets the same)
    pre = manifest["preprocess"]
    params = NMSParams(lim.conf_threshold, lim.iou_threshold, lim.pre_nms_topk, lim.max_detections, True)
    t0 = time.perf_counter()
    images = [decode_image(decode_base64(s, i, lim.max_image_bytes), i, lim.max_image_bytes, lim.max_pixels)
              for i, s in enumerate(b64s)]
    t1 = time.perf_counter()
    tensors, metas = zip(*(preprocess_image(im, pre["imgsz"], pre["pad_value"], pre["scale"], pre["color_order"])
                           for im in images))
    batch = np.stack(tensors)
    t2 = time.perf_counter()
    heads = sess.run(None, {sess.get_inputs()[0].name: batch})[0]
    t3 = time.perf_counter()
    out = []
    for raw, meta in zip(heads, metas):
        det = nms(raw, params)
        boxes = boxes_to_original(det.boxes, meta)
        out.append([(int(c), [float(v) for v in b], float(s)) for b, s, c in zip(boxes, det.scores, det.classes)])
    t4 = time.perf_counter()
    return out, {"decode": (t1 - t0) * 1e3, "letterbox": (t2 - t1) * 1e3, "run": (t3 - t2) * 1e3,
                 "nms": (t4 - t3) * 1e3}


def inproc_measure(b64s: list[str], batch_sizes: list[int], seconds_per_size: float, intra_ops: list[int]) -> dict:
    """run_pipeline back to back for each (intra-op threads, batch size); the ceiling is the best images/s."""
    out: dict = {}
    for intra in intra_ops:
        sess, manifest = open_session(intra)
        for b in (1, max(batch_sizes)):  # warm-up
            run_pipeline(sess, manifest, b64s[:b])
        for b in batch_sizes:
            row, answers = harness.back_to_back(partial(run_pipeline, sess, manifest), b64s, b, seconds_per_size,
                                                "images_per_s")
            stages = {k: [st[k] for _, st in answers] for k in answers[0][1]}
            out[f"intra{intra}/b{b}"] = {"intra_op": intra, "batch": b, **row, "stage_ms_p50": {
                k: round(float(np.median(v)), 3) for k, v in stages.items()}}
    cfg = intra_ops[0]  # the configuration every server runs with
    # the ceiling uses the servers' thread setting only: intra-op 0 lets ONNX Runtime pin a thread to another core
    best = max((k for k in out if out[k]["intra_op"] == cfg), key=lambda k: out[k]["images_per_s"])
    b1 = out.get(f"intra{cfg}/b1")
    return {"by_config": out, "best": best, "ceiling_images_per_s": out[best]["images_per_s"],
            "best_batch": out[best]["batch"], "single_call_ms_p50": b1["call_ms_p50"] if b1 else None,
            "single_call_stage_ms_p50": b1["stage_ms_p50"] if b1 else None,
            "affinity": sorted(os.sched_getaffinity(0))}


def run_inproc(args, images_file: Path) -> dict:
    return harness.run_inproc("scripts.bench.compare_detect", [
        "--images", str(images_file), "--batch-sizes", args.batch_sizes, "--seconds-per-size", str(args.inproc_seconds),
        "--intra-ops", harness.intra_sweep(args.intra_op)], args.server_cpu, 600)


# --------------------------------------------------------------------------------------------------------------------
# agreement
# --------------------------------------------------------------------------------------------------------------------
def match_detections(ref: list[tuple], got: list[tuple], tol_px: float = 1.0) -> dict:
    """Does one image's answer agree with the reference: same number of boxes, and each reference box (by score)
    matched to an unused one of the same class within tol_px on every coordinate? Scores are not compared."""
    if len(ref) != len(got):
        return {"agree": False, "max_box_diff_px": None, "reason": f"{len(got)} boxes, reference {len(ref)}"}
    used: set[int] = set()
    worst = 0.0
    for cls, box, _ in sorted(ref, key=lambda d: -d[2]):
        best_j, best_d = None, math.inf
        for j, (c2, b2, _) in enumerate(got):
            if j in used or c2 != cls:
                continue
            d = max(abs(a - b) for a, b in zip(box, b2))
            if d < best_d:
                best_j, best_d = j, d
        if best_j is None:
            return {"agree": False, "max_box_diff_px": None, "reason": f"no unmatched box of class {cls}"}
        used.add(best_j)
        worst = max(worst, best_d)
    agree = worst <= tol_px
    return {"agree": agree, "max_box_diff_px": round(worst, 4),
            "reason": None if agree else f"a box differs by {worst:.2f} px"}


def agreement_summary(reference: list[list[tuple]], per_system: dict[str, list[list[tuple] | str]],
                      tol_px: float = 1.0) -> dict:
    """per_system: name -> per image either detections or an error string (an HTTP failure never agrees)."""
    systems = {}
    for name, answers in per_system.items():
        ok, worst = 0, 0.0
        why: list[str] = []
        for i, (ref, got) in enumerate(zip(reference, answers)):
            m: dict[str, Any]
            if isinstance(got, str):
                m = {"agree": False, "max_box_diff_px": None, "reason": got}
            else:
                m = match_detections(ref, got, tol_px)
            ok += m["agree"]
            if m["max_box_diff_px"] is not None:
                worst = max(worst, m["max_box_diff_px"])
            if not m["agree"] and len(why) < 3:
                why.append(f"image {i}: {m['reason']}")
        n = len(answers)
        systems[name] = {"images_agree": ok, "images": n, "share": ok / n if n else None,
                         "max_box_diff_px": round(worst, 4), "mismatches": why}
    return {"images": len(reference), "tolerance_px": tol_px, "boxes": sum(len(r) for r in reference),
            "systems": systems, "all_agree": all(s["images_agree"] == s["images"] for s in systems.values())}


def check_agreement(servers: dict, images: list[dict], n: int, tol_px: float, intra_op: int) -> dict:
    """Reference: in-process batch 1 (this process). Also in-process as one batch of n, then each server."""
    import httpx

    b64s = [im["b64"] for im in images[:n]]
    sess, manifest = open_session(intra_op)
    reference = [run_pipeline(sess, manifest, [s])[0][0] for s in b64s]
    per_system: dict = {"inproc_batched": run_pipeline(sess, manifest, b64s)[0]}
    for name, (_, url) in servers.items():
        got = []
        for s in b64s:
            u, body = request_for(name, url, s)
            try:
                r = httpx.post(u, content=body, headers={"content-type": "application/json"}, timeout=60)
                got.append(parse_detections(name, r.json()) if r.status_code == 200
                           else f"HTTP {r.status_code}: {r.text[:160]}")
            except Exception as exc:  # noqa: BLE001  # reported as a disagreement
                got.append(f"{type(exc).__name__}: {exc}")
        per_system[name] = got
    return {"reference": "inproc batch 1", **agreement_summary(reference, per_system, tol_px)}


# --------------------------------------------------------------------------------------------------------------------
# summary
# --------------------------------------------------------------------------------------------------------------------
def ratios_for_round(r: dict, c: int = 32) -> dict:
    """The goal quantities within one round (None where a system or cell is missing)."""
    v = RoundView(r, FAMILY.per_s)
    div, ceiling = v.div, v.inproc.get("ceiling_images_per_s")

    def tp(s):
        return v.tp(s, c)

    best = v.best_peer(c)[1]
    return {"batching_on_vs_off": div(tp("triserve"), tp("triserve_nobatch")),
            "triserve_vs_best_peer": div(tp("triserve"), best),
            "triserve_p99_vs_naive": div(v.q("triserve", c, "p99"), v.q("naive", c, "p99")),
            "triserve_vs_ceiling": div(tp("triserve"), ceiling),
            "c1_p50_overhead_ms": v.c1_overhead("triserve"),
            "local_vs_best_peer": div(tp("triserve_local"), best),
            "local_vs_ceiling": div(tp("triserve_local"), ceiling),
            "local_c1_p50_overhead_ms": v.c1_overhead("triserve_local")}


def evaluate_goals(per_round: list[dict], c: int = 32) -> dict:
    return harness.evaluate_goals(GOALS, per_round, c)


def summarise(rounds: list[dict], systems: list[str], concurrency: list[int], goal_c: int) -> dict:
    table: dict = {}
    ip = harness.inproc_table(rounds, FAMILY.per_s) if "inproc" in systems else None
    if ip:
        ips = [r["inproc"] for r in rounds if "inproc" in r]
        med_range = harness.med_range
        table["inproc"] = {**ip, "by_config_call_ms_p50": {k: med_range([x["by_config"][k]["call_ms_p50"] for x in ips])
                                                           for k in ips[0]["by_config"]},
                           "single_call_stage_ms_p50": {k: med_range([(x["single_call_stage_ms_p50"] or {}).get(k)
                                                                      for x in ips])
                                                        for k in (ips[0]["single_call_stage_ms_p50"] or {})}}
    table.update(harness.system_table(rounds, systems, concurrency, FAMILY.per_s))
    per_round = [ratios_for_round(r, goal_c) for r in rounds]
    return {"table": table, "goals": evaluate_goals(per_round, goal_c), "per_round_ratios": per_round,
            "batch_histograms": batch_hist.over_rounds(rounds)}


def to_markdown(res: dict) -> str:
    s = res["summary"]
    L = [f"# Object detection: triserve vs peers ({res['started_utc']})", "",
         f"Reproduce: `{res['command']}`", "",
         (f"Model `{res['model']}`; requests: one image each, base64 JSON, {res['images_source']}. Servers pinned to "
          f"CPU {res['placement']['server_cpu']}, {res['placement']['load']} load generator to CPU "
          f"{res['placement']['load_cpu']}; {res['rounds']} interleaved rounds, {res['warmup_s']} s warm-up + "
          f"{res['duration_s']} s measured per cell. Medians over rounds, [min-max] in brackets. Wall time "
          f"{res['wall_seconds']} s. Host: {res['host']}"), ""]
    ip = s["table"].get("inproc")
    if ip:
        st = ", ".join(f"{k} {cell(v, 2)}" for k, v in ip["single_call_stage_ms_p50"].items())
        L += [(f"In-process ONNX Runtime ceiling (base64 + image decode + letterbox + run + NMS included): "
               f"**{cell(ip['ceiling_images_per_s'])} images/s** (best configuration per round: {ip['best']}); "
               f"batch-1 call p50 {cell(ip['single_call_ms_p50'], 2)} ms (stages, ms: {st})."), "",
              "| in-process config (intra-op threads / batch) | images/s | call p50 ms |", "|---|---|---|"]
        L += [f"| {k} | {cell(v)} | {cell(ip['by_config_call_ms_p50'][k], 2)} |"
              for k, v in ip["by_config_images_per_s"].items()]
        L.append("")
    L += harness.systems_markdown(s["table"], FAMILY.per_s, FAMILY.unit)
    L += harness.goals_markdown(s["goals"])
    L += batch_hist.markdown(s.get("batch_histograms") or {}, SLOT)
    ag = res.get("agreement")
    if ag:
        L += ["", f"Agreement with {ag['reference']} on {ag['images']} images ({ag['boxes']} boxes; same count, same "
              f"classes, boxes within {ag['tolerance_px']} px): " +
              "; ".join(f"{k} {v['images_agree']}/{v['images']} (max box diff {v['max_box_diff_px']} px"
                        + (f"; {', '.join(v['mismatches'])}" if v["mismatches"] else "") + ")"
                        for k, v in ag["systems"].items())]
    L += harness.breakdown_markdown(res)
    L += harness.listed(res, "skipped", "Not measured:")
    L += harness.listed(res, "notes", "Notes:")
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.common_args(ap, FAMILY, concurrency="1,8,32", duration=8.0, batch_sizes="1,4,8,16", max_total_seconds=1500,
                        out=ROOT / "docs/bench/compare_detect")
    ap.add_argument("--goal-concurrency", type=int, default=32, help="concurrency the throughput goals are read at")
    ap.add_argument("--images", type=int, default=60, help="distinct images in the request mix")
    ap.add_argument("--photos", default=str(ROOT / ".cache/importer/photos"),
                    help="folder of photos the request mix is made of (jpg/png, recursive); 'none', or a folder "
                         "without photos: the synthetic shapes mix")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jpeg-quality", type=int, default=90)
    ap.add_argument("--intra-op", type=int, default=1, help="ONNX Runtime intra-op threads for every system "
                    "(default 1: with 0 ONNX Runtime pins an extra thread to another core by itself, escaping the "
                    "server's CPU pinning; see compare.py); the in-process sweep also tries the other of 0/1")
    ap.add_argument("--agree-images", type=int, default=8, help="images in the agreement check")
    ap.add_argument("--agree-tol-px", type=float, default=1.0)
    ap.add_argument("--pytriton-max-batch", type=int, default=16)
    ap.add_argument("--probe-requests", type=int, default=50, help="sequential requests per c=1 timings probe")
    args, command = harness.parse(ap, FAMILY)
    t0 = time.monotonic()
    started_utc = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())

    photos = [] if args.photos.lower() == "none" else photo_files(Path(args.photos))
    images = (photo_mix(photos, args.images, args.seed, args.jpeg_quality) if photos
              else image_mix(args.images, args.seed, args.jpeg_quality))
    b64s = [im["b64"] for im in images]
    source = describe_mix(images, args.seed, args.jpeg_quality, shown(Path(args.photos)) if photos else None)
    d, manifest = model_dir(name=MODEL)
    tmp = Path(tempfile.mkdtemp(prefix="triserve_bench_detect_"))
    images_file = tmp / "images.json"
    images_file.write_text(json.dumps(b64s))
    rounds: list[dict] = []
    breakdown: dict = {}
    notes: list[str] = []
    try:
        with harness.running(args, FAMILY, tmp) as (servers, skipped):
            requests = {name: [request_for(name, url, s) for s in b64s] for name, (_, url) in servers.items()}
            agreement = check_agreement(servers, images, min(args.agree_images, len(images)), args.agree_tol_px,
                                        args.intra_op)
            FAMILY.say("agreement: " + ", ".join(f"{k} {v['images_agree']}/{v['images']}"
                                                 for k, v in agreement["systems"].items()))
            harness.warm_up(args, servers, requests)
            harness.probe_triserve(servers, requests, args.probe_requests, "fresh", breakdown)
            rounds = harness.run_rounds(args, FAMILY, servers, requests, lambda: run_inproc(args, images_file), t0,
                                        notes)
            harness.probe_triserve(servers, requests, args.probe_requests, "after_rounds", breakdown)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    res = {**harness.base_result(args, command, started_utc, t0),
           "model": f"{MODEL}:{manifest['version']} ({shown(d)}), input imgsz {manifest['preprocess']['imgsz']}",
           "images_source": source,
           "images": [{"width": im["width"], "height": im["height"], "jpeg_bytes": im["jpeg_bytes"],
                       "objects": len(im["objects"]), **({"photo": im["photo"]} if "photo" in im else {})}
                      for im in images],
           "photos": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in photos},
           "rounds": len(rounds), "goal_concurrency": args.goal_concurrency, "skipped": skipped,
           "agreement": agreement,
           "summary": summarise(rounds, args.systems, args.concurrency, args.goal_concurrency), "raw_rounds": rounds,
           "c1_breakdown": breakdown, "notes": notes}
    harness.save(res, args.out, FAMILY, f"{MODEL}, 1 server CPU, 320x240 / 640x480 / 1280x720 "
                 f"{'photo' if photos else 'synthetic'} JPEGs",
                 "detection batch sizes", to_markdown)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_inproc":
        ap = argparse.ArgumentParser()
        ap.add_argument("_inproc")
        ap.add_argument("--images", type=Path, required=True, help="JSON list of base64 images")
        ap.add_argument("--batch-sizes", default="1,4,8,16")
        ap.add_argument("--seconds-per-size", type=float, default=1.5)
        ap.add_argument("--intra-ops", default="0,1")
        a = ap.parse_args()
        print(json.dumps(inproc_measure(json.loads(a.images.read_text()), [int(b) for b in a.batch_sizes.split(",")],
                                        a.seconds_per_size, [int(i) for i in a.intra_ops.split(",")])))
    else:
        main()
