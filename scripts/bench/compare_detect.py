"""Object detection, one model, five ways, one run: how close does triserve get to the ONNX Runtime ceiling?
The detection twin of scripts/bench/compare.py (same method, same placement, same server helpers, imported from it).

    python -m scripts.bench.compare_detect                     # ~9 min: what docs/bench/compare_detect.* holds
    python -m scripts.bench.compare_detect --rounds 1 --duration 2 --warmup 1 --concurrency 1,8 \\
        --out /tmp/compare_detect_dev/compare_detect         # quick look (~2 min)

Requests: one image per request, JPEG (quality 90), generated deterministically from --seed: 30% 320x240, 40% 640x480,
30% 1280x720 (exact shares, shuffled), each a landscape canvas holding a square of 1-6 drawn shapes from the
detector's own synthetic-data generator (families/detection/importers/scenes.draw_image). Sent as base64 JSON:
triserve and the naive peer get POST /v1/detect {"images": [{"data": <b64>}]}
(families/detection/schemas.DetectRequest), PyTriton the same base64 string as a KServe v2 BYTES tensor. Every system
decodes, letterboxes, runs and NMSes on the server side.

Systems (all on the same ONNX file, yolo-shapes:stable from models/store, same session options, CPU execution provider,
the same families/detection functions for decode, letterbox, capped NMS and the mapping back to original pixels):
  inproc            in-process ONNX Runtime: base64 + image decode + letterbox + run + NMS at batch sizes 1,4,8,16
                    back to back (intra-op threads --intra-op and the other of 0/1); the best images/s is the ceiling,
                    the batch-1 call latency (servers' thread setting) is the floor for c=1 latency
  naive             scripts/bench/peers/naive_fastapi_detect.py under uvicorn: FastAPI, one session.run per request
  pytriton          scripts/bench/peers/pytriton_detect.py: NVIDIA PyTriton (Triton + DynamicBatcher, max batch 16
                    as triserve's detection slot), own venv (--pytriton-python, default
                    .cache/bench/pytriton-venv/bin/python); skipped with the reason if it cannot start
  triserve_nobatch  `bentoml serve services.gateway:Gateway` with batching off for the detection slot:
                    TRISERVE_SLOTS__<DETECTION DEPLOYMENT>__BATCHING__MAX_BATCH_SIZE=1; --nobatch-env changes it
  triserve          the same, default config (gateway batching while busy, max_batch_size 16)
  triserve_local    the same with TRISERVE_RUNNER__PLACEMENT=local (runner code in the API worker, no hop)
Both triserve instances run with compare.RAISED_LIMITS (per-client rate limit raised: one load generator is one
client address; gRPC off: its fixed port would collide) and a BENTOML_HOME of their own; nothing else is changed.

Placement: every server (and the in-process measurement) pinned to --server-cpu (default 0), this process (the load
generator) to --load-cpu (default 1). Closed loop (compare.load_cell: wrk when installed, else --load-generator
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
import io
import json
import math
import os
import platform
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from scripts.bench import batch_hist
from scripts.bench.compare import (
    LOCAL_ENV,
    RAISED_LIMITS,
    Peer,
    Servers,
    TriservePeer,
    cell,
    default_generator,
    free_port,
    load_cell,
    med_range,
    pinned,
    plot_rounds,
    shown,
    timings_probe,
)
from scripts.bench.report import write_report
from scripts.bench.textmix import ROOT, model_dir
from scripts.common import default_deployment

MODEL = "yolo-shapes"
SLOT = default_deployment("detection")
SYSTEMS = ("inproc", "naive", "pytriton", "triserve_nobatch", "triserve", "triserve_local")
HTTP_SYSTEMS = SYSTEMS[1:]
TRISERVE_SYSTEMS = ("triserve_nobatch", "triserve", "triserve_local")
NOBATCH_ENV = f"TRISERVE_SLOTS__{SLOT.upper()}__BATCHING__MAX_BATCH_SIZE=1"
SIZE_MIX = ((320, 240, 0.3), (640, 480, 0.4), (1280, 720, 0.3))  # (width, height, share)
GOALS = {  # name: (description with {c} for the goal concurrency, comparison, threshold)
    "batching_on_vs_off": ("triserve default / triserve batching off (detection max_batch_size 1), throughput at c={c}",
                           ">=", 2.5),
    "triserve_vs_naive": ("triserve / naive FastAPI, throughput at c={c}", ">=", 2.0),
    "triserve_p99_vs_naive": ("triserve p99 / naive FastAPI p99 at c={c} (p99 no worse than naive)", "<=", 1.0),
    "triserve_vs_pytriton": ("triserve / PyTriton, throughput at c={c}", ">=", 1.2),
    "triserve_vs_ceiling": ("triserve throughput at c={c} / in-process ceiling", ">=", 0.75),
    "c1_p50_overhead_ms": ("triserve p50 at c=1 minus in-process batch-1 call p50 (ms)", "<=", 3.0),
    "local_vs_naive": ("triserve_local / naive FastAPI, throughput at c={c}", ">=", 2.0),
    "local_vs_pytriton": ("triserve_local / PyTriton, throughput at c={c}", ">=", 1.2),
    "local_vs_ceiling": ("triserve_local throughput at c={c} / in-process ceiling", ">=", 0.75),
    "local_c1_p50_overhead_ms": ("triserve_local p50 at c=1 minus in-process batch-1 call p50 (ms)", "<=", 3.0),
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
    from families.detection.importers.scenes import draw_image

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


def describe_mix(images: list[dict], seed: int, quality: int) -> str:
    by_size: dict[str, int] = {}
    for im in images:
        key = f"{im['width']}x{im['height']}"
        by_size[key] = by_size.get(key, 0) + 1
    kb = np.mean([im["jpeg_bytes"] for im in images]) / 1024
    objs = np.mean([len(im["objects"]) for im in images])
    return (f"generated mix (seed {seed}, {len(images)} JPEGs at quality {quality}: " +
            ", ".join(f"{v} x {k}" for k, v in by_size.items()) + f"; mean {kb:.0f} KiB, {objs:.1f} shapes each)")


def request_for(system: str, base: str, b64: str) -> tuple[str, bytes]:
    if system == "pytriton":
        body = {"inputs": [{"name": "image", "shape": [1, 1], "datatype": "BYTES", "data": [b64]}]}
        return f"{base}/v2/models/detector/infer", json.dumps(body).encode()
    return f"{base}/v1/detect", json.dumps({"images": [{"data": b64}]}).encode()


def parse_detections(system: str, payload: dict) -> list[tuple[int, list[float], float]]:
    """One image's detections as (class_id, [x1, y1, x2, y2], score) from a system's answer."""
    if system == "pytriton":
        out = {o["name"]: o["data"] for o in payload["outputs"]}
        k = int(out["count"][0])
        boxes = np.asarray(out["boxes"], dtype=np.float64).reshape(-1, 4)
        return [(int(out["classes"][i]), [float(v) for v in boxes[i]], float(out["scores"][i])) for i in range(k)]
    return [(int(d["class_id"]), [float(v) for v in d["box"]], float(d["score"]))
            for d in payload["results"][0]["detections"]]


# --------------------------------------------------------------------------------------------------------------------
# the pipeline, in process (the ceiling and the agreement reference)
# --------------------------------------------------------------------------------------------------------------------
def open_session(intra_op: int):
    import onnxruntime as ort

    d, manifest = model_dir(name=MODEL)
    opts = ort.SessionOptions()  # as runners/pool.py with configs/serving.yaml (intra_op_threads varies here)
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = intra_op
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(d / manifest["model_file"]), opts, providers=["CPUExecutionProvider"])
    return sess, manifest


def run_pipeline(sess, manifest: dict, b64s: list[str]) -> tuple[list[list[tuple]], dict[str, float]]:
    """What every server does for a batch of images: base64 + image decode, letterbox, one ONNX Runtime call,
    capped NMS, boxes back to original pixels (triserve's default limits and thresholds). Returns the detections per
    image and the milliseconds per stage."""
    from families.detection.decode import decode_base64, decode_image
    from families.detection.limits import Limits
    from families.detection.postprocess import NMSParams, nms
    from families.detection.preprocess import boxes_to_original, preprocess_image

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
            lat: list[float] = []
            stages: dict[str, list[float]] = {}
            done, i = 0, 0
            end = time.perf_counter() + seconds_per_size
            started = time.perf_counter()
            while time.perf_counter() < end:
                chunk = [b64s[(i + j) % len(b64s)] for j in range(b)]
                i += b
                t0 = time.perf_counter()
                _, st = run_pipeline(sess, manifest, chunk)
                lat.append((time.perf_counter() - t0) * 1000)
                for k, v in st.items():
                    stages.setdefault(k, []).append(v)
                done += b
            elapsed = time.perf_counter() - started
            out[f"intra{intra}/b{b}"] = {
                "intra_op": intra, "batch": b, "images_per_s": done / elapsed,
                "call_ms_p50": float(np.percentile(lat, 50)), "call_ms_p99": float(np.percentile(lat, 99)),
                "calls": len(lat), "stage_ms_p50": {k: round(float(np.median(v)), 3) for k, v in stages.items()}}
    cfg = intra_ops[0]  # the configuration every server runs with
    # the ceiling uses the servers' thread setting only: intra-op 0 lets ONNX Runtime pin a thread to another core
    best = max((k for k in out if out[k]["intra_op"] == cfg), key=lambda k: out[k]["images_per_s"])
    b1 = out.get(f"intra{cfg}/b1")
    return {"by_config": out, "best": best, "ceiling_images_per_s": out[best]["images_per_s"],
            "best_batch": out[best]["batch"], "single_call_ms_p50": b1["call_ms_p50"] if b1 else None,
            "single_call_stage_ms_p50": b1["stage_ms_p50"] if b1 else None,
            "affinity": sorted(os.sched_getaffinity(0))}


def run_inproc(args, images_file: Path) -> dict:
    intra = [args.intra_op] + [i for i in (0, 1) if i != args.intra_op]
    cmd = [sys.executable, "-m", "scripts.bench.compare_detect", "_inproc", "--images", str(images_file),
           "--batch-sizes", args.batch_sizes, "--seconds-per-size", str(args.inproc_seconds),
           "--intra-ops", ",".join(map(str, intra))]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
                       preexec_fn=pinned(args.server_cpu))
    if p.returncode:
        raise RuntimeError(f"in-process measurement failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


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
# servers
# --------------------------------------------------------------------------------------------------------------------
def start_servers(args, tmp: Path, log_dir: Path) -> tuple[Servers, dict[str, str]]:
    """name -> (peer, base url); name -> reason it is not measured."""
    servers: Servers = {}
    skipped: dict[str, str] = {}
    d, _ = model_dir(name=MODEL)
    for name in [s for s in args.systems if s in HTTP_SYSTEMS]:
        log = log_dir / f"detect_{name}.log"
        peer: Peer | TriservePeer
        try:
            if name == "naive":
                port = free_port()
                peer = Peer(name, [sys.executable, "-m", "uvicorn", "scripts.bench.peers.naive_fastapi_detect:app",
                                   "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
                                   "--no-access-log"],
                            {"TRISERVE_BENCH_INTRA_OP": str(args.intra_op), "TRISERVE_BENCH_MODEL_DIR": str(d)},
                            args.server_cpu, log, f"http://127.0.0.1:{port}/readyz")
                url = f"http://127.0.0.1:{port}"
            elif name == "pytriton":
                py = Path(args.pytriton_python)
                if not py.exists():
                    raise RuntimeError(f"no PyTriton interpreter at {py} (see scripts/bench/peers/pytriton_detect.py "
                                       "for the venv recipe)")
                libdir = subprocess.run([str(py), "-c", "import sysconfig;print(sysconfig.get_config_var('LIBDIR'))"],
                                        capture_output=True, text=True, check=True).stdout.strip()
                port, gport, mport = free_port(), free_port(), free_port()
                env = {"LD_LIBRARY_PATH": f"{libdir}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":")}
                peer = Peer(name, [str(py), str(ROOT / "scripts/bench/peers/pytriton_detect.py"), "--model-dir", str(d),
                                   "--http-port", str(port), "--grpc-port", str(gport), "--metrics-port", str(mport),
                                   "--max-batch-size", str(args.pytriton_max_batch),
                                   "--max-queue-delay-us", str(args.pytriton_delay_us),
                                   "--intra-op", str(args.intra_op)],
                            env, args.server_cpu, log, f"http://127.0.0.1:{port}/v2/models/detector/ready")
                url = f"http://127.0.0.1:{port}"
            else:
                env = dict(RAISED_LIMITS)
                if args.intra_op:
                    env["TRISERVE_RUNNER__INTRA_OP_THREADS"] = str(args.intra_op)
                if name == "triserve_nobatch":
                    env.update(kv.split("=", 1) for kv in args.nobatch_env.split(",") if kv)
                if name == "triserve_local":
                    env.update(LOCAL_ENV)
                home = tmp / f"bentoml_home_{name}"
                home.mkdir(parents=True, exist_ok=True)
                peer = TriservePeer(name, env, args.server_cpu, log, home)
                url = peer.url
            servers[name] = (peer, url)
        except Exception as exc:  # noqa: BLE001  # the reason is reported
            skipped[name] = f"{type(exc).__name__}: {exc}"
    for name, (peer, _) in list(servers.items()):
        try:
            print(f"[compare_detect] {name} ready after {peer.wait_ready():.1f}s", file=sys.stderr)
        except Exception as exc:  # noqa: BLE001  # a peer that never gets ready is skipped with the reason
            skipped[name] = f"{type(exc).__name__}: {str(exc)[-1500:]}"
            peer.stop()
            del servers[name]
    return servers, skipped


# --------------------------------------------------------------------------------------------------------------------
# summary
# --------------------------------------------------------------------------------------------------------------------
def ratios_for_round(r: dict, c: int = 32) -> dict:
    """The goal quantities within one round (None where a system or cell is missing)."""
    def cell(s, cc):
        return (r.get(s) or {}).get(str(cc)) or {}

    def tp(s):
        return cell(s, c).get("images_per_s")

    def q(s, cc, p):
        return (cell(s, cc).get("latency_ms") or {}).get(p)

    def div(a, b):
        return a / b if a and b else None

    ip = r.get("inproc") or {}
    tri_p50, single = q("triserve", 1, "p50"), ip.get("single_call_ms_p50")
    local_p50 = q("triserve_local", 1, "p50")
    return {"batching_on_vs_off": div(tp("triserve"), tp("triserve_nobatch")),
            "triserve_vs_naive": div(tp("triserve"), tp("naive")),
            "triserve_p99_vs_naive": div(q("triserve", c, "p99"), q("naive", c, "p99")),
            "triserve_vs_pytriton": div(tp("triserve"), tp("pytriton")),
            "triserve_vs_ceiling": div(tp("triserve"), ip.get("ceiling_images_per_s")),
            "c1_p50_overhead_ms": (tri_p50 - single) if tri_p50 is not None and single is not None else None,
            "local_vs_naive": div(tp("triserve_local"), tp("naive")),
            "local_vs_pytriton": div(tp("triserve_local"), tp("pytriton")),
            "local_vs_ceiling": div(tp("triserve_local"), ip.get("ceiling_images_per_s")),
            "local_c1_p50_overhead_ms": (local_p50 - single) if local_p50 is not None and single is not None else None}


def evaluate_goals(per_round: list[dict], c: int = 32) -> dict:
    goals = {}
    for k, (desc, op, thr) in GOALS.items():
        mr = med_range([pr.get(k) for pr in per_round])
        m = mr["median"]
        goals[k] = {"description": desc.format(c=c), "goal": f"{op} {thr}", **mr,
                    "met": None if m is None else (m >= thr if op == ">=" else m <= thr)}
    return goals


def summarise(rounds: list[dict], systems: list[str], concurrency: list[int], goal_c: int) -> dict:
    table: dict = {}
    for s in systems:
        if s == "inproc":
            ips = [r["inproc"] for r in rounds if "inproc" in r]
            if not ips:
                continue
            table[s] = {"ceiling_images_per_s": med_range([x["ceiling_images_per_s"] for x in ips]),
                        "single_call_ms_p50": med_range([x["single_call_ms_p50"] for x in ips]),
                        "best": [x["best"] for x in ips],
                        "by_config_images_per_s": {k: med_range([x["by_config"][k]["images_per_s"] for x in ips])
                                                   for k in ips[0]["by_config"]},
                        "by_config_call_ms_p50": {k: med_range([x["by_config"][k]["call_ms_p50"] for x in ips])
                                                  for k in ips[0]["by_config"]},
                        "single_call_stage_ms_p50": {k: med_range([(x["single_call_stage_ms_p50"] or {}).get(k)
                                                                   for x in ips])
                                                     for k in (ips[0]["single_call_stage_ms_p50"] or {})}}
            continue
        per_c = {}
        for c in concurrency:
            cells = [r[s][str(c)] for r in rounds if s in r and str(c) in r[s]]
            if cells:
                per_c[str(c)] = {"images_per_s": med_range([x["images_per_s"] for x in cells]),
                                 **{q: med_range([x["latency_ms"][q] for x in cells]) for q in ("p50", "p90", "p99")},
                                 "non_200_total": sum(x["non_200"] for x in cells)}
        if per_c:
            table[s] = per_c
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
    L += ["| system | c | images/s | p50 ms | p90 ms | p99 ms | non-200 |", "|---|---|---|---|---|---|---|"]
    for name, per_c in s["table"].items():
        if name == "inproc":
            continue
        for c, row in per_c.items():
            L.append(f"| {name} | {c} | {cell(row['images_per_s'])} | {cell(row['p50'], 2)} | {cell(row['p90'], 2)} | "
                     f"{cell(row['p99'], 2)} | {row['non_200_total']} |")
    L += ["", "| goal | measured (median [range] over rounds) | target | met |", "|---|---|---|---|"]
    for g in s["goals"].values():
        met = "n/a" if g["met"] is None else ("yes" if g["met"] else "**no**")
        L.append(f"| {g['description']} | {cell(g, 2)} | {g['goal']} | {met} |")
    L += batch_hist.markdown(s.get("batch_histograms") or {}, SLOT)
    ag = res.get("agreement")
    if ag:
        L += ["", f"Agreement with {ag['reference']} on {ag['images']} images ({ag['boxes']} boxes; same count, same "
              f"classes, boxes within {ag['tolerance_px']} px): " +
              "; ".join(f"{k} {v['images_agree']}/{v['images']} (max box diff {v['max_box_diff_px']} px"
                        + (f"; {', '.join(v['mismatches'])}" if v["mismatches"] else "") + ")"
                        for k, v in ag["systems"].items())]
    for name, b in (res.get("c1_breakdown") or {}).items():
        L += ["", f"{name}, {b['requests']} sequential requests: client p50 {b['client_ms_p50']} ms; server stage "
              "p50s (ms): " + ", ".join(f"{k} {v}" for k, v in b["server_timings_ms_p50"].items())]
    if res.get("skipped"):
        L += ["", "Not measured:", ""] + [f"- {k}: {v}" for k, v in res["skipped"].items()]
    if res.get("notes"):
        L += ["", "Notes:", ""] + [f"- {n}" for n in res["notes"]]
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma list from {','.join(SYSTEMS)}")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--goal-concurrency", type=int, default=32, help="concurrency the throughput goals are read at")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=8.0, help="measured seconds per cell")
    ap.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before each cell")
    ap.add_argument("--max-requests", type=int, default=200_000, help="hard cap per cell")
    ap.add_argument("--load-generator", choices=("wrk", "aiohttp"), default=default_generator(),
                    help="closed-loop client (default wrk when installed: apt-get install -y wrk)")
    ap.add_argument("--images", type=int, default=60, help="distinct images in the request mix")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jpeg-quality", type=int, default=90)
    ap.add_argument("--batch-sizes", default="1,4,8,16", help="in-process batch sizes swept")
    ap.add_argument("--inproc-seconds", type=float, default=1.5, help="seconds per in-process configuration")
    ap.add_argument("--intra-op", type=int, default=1, help="ONNX Runtime intra-op threads for every system "
                    "(default 1: with 0 ONNX Runtime pins an extra thread to another core by itself, escaping the "
                    "server's CPU pinning; see compare.py); the in-process sweep also tries the other of 0/1")
    ap.add_argument("--nobatch-env", default=NOBATCH_ENV,
                    help="comma list of VAR=VALUE that turns batching off for triserve_nobatch")
    ap.add_argument("--agree-images", type=int, default=8, help="images in the agreement check")
    ap.add_argument("--agree-tol-px", type=float, default=1.0)
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--load-cpu", type=int, default=1)
    ap.add_argument("--pytriton-python", default=str(ROOT / ".cache/bench/pytriton-venv/bin/python"))
    ap.add_argument("--pytriton-delay-us", type=int, default=0)
    ap.add_argument("--pytriton-max-batch", type=int, default=16)
    ap.add_argument("--probe-requests", type=int, default=50, help="sequential requests per c=1 timings probe")
    ap.add_argument("--max-total-seconds", type=float, default=1500, help="stop starting new cells after this")
    ap.add_argument("--out", type=Path, default=ROOT / "docs/bench/compare_detect")
    args = ap.parse_args()
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    bad = set(args.systems) - set(SYSTEMS)
    if bad:
        raise SystemExit(f"unknown systems {bad}")
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.out = args.out.resolve()
    argv = " ".join(shlex.quote(a) for a in sys.argv[1:])
    command = f"python -m scripts.bench.compare_detect {argv}".strip()
    t0 = time.monotonic()
    started_utc = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    os.sched_setaffinity(0, {args.load_cpu})

    images = image_mix(args.images, args.seed, args.jpeg_quality)
    b64s = [im["b64"] for im in images]
    source = describe_mix(images, args.seed, args.jpeg_quality)
    d, manifest = model_dir(name=MODEL)
    tmp = Path(tempfile.mkdtemp(prefix="triserve_bench_detect_"))
    images_file = tmp / "images.json"
    images_file.write_text(json.dumps(b64s))
    log_dir = ROOT / ".cache" / "bench" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    servers: Servers = {}
    skipped: dict[str, str] = {}
    rounds: list[dict] = []
    agreement = None
    breakdown: dict = {}
    notes: list[str] = []
    try:
        servers, skipped = start_servers(args, tmp, log_dir)
        requests = {name: [request_for(name, url, s) for s in b64s] for name, (_, url) in servers.items()}
        agreement = check_agreement(servers, images, min(args.agree_images, len(images)), args.agree_tol_px,
                                    args.intra_op)
        print("[compare_detect] agreement: " + ", ".join(f"{k} {v['images_agree']}/{v['images']}"
                                                         for k, v in agreement["systems"].items()), file=sys.stderr)
        for name in servers:  # a short unmeasured warm-up of every server at c=1 (each cell has its own warm-up)
            load_cell(args.load_generator, requests[name], 1, 1.5, 0.0, 5000, args.load_cpu)
        for name in TRISERVE_SYSTEMS:  # c=1 stage timings before any concurrent load...
            if name in servers:
                breakdown[f"{name}/fresh"] = timings_probe(requests[name], args.probe_requests)
        for r in range(args.rounds):
            rec: dict = {"batch_histograms": {}}
            for name in args.systems:
                if time.monotonic() - t0 > args.max_total_seconds:
                    notes.append(f"stopped starting cells after {args.max_total_seconds} s (round {r + 1})")
                    break
                if name == "inproc":
                    rec["inproc"] = run_inproc(args, images_file)
                    print(f"[compare_detect] round {r + 1} inproc ceiling {rec['inproc']['ceiling_images_per_s']:.1f} "
                          f"images/s ({rec['inproc']['best']}), b1 p50 {rec['inproc']['single_call_ms_p50']:.2f} ms",
                          file=sys.stderr)
                    continue
                if name not in servers:
                    continue
                rec[name] = {}
                url = servers[name][1]
                for c in args.concurrency:
                    cell, delta = batch_hist.around(
                        url if name in TRISERVE_SYSTEMS else None, SLOT,
                        partial(load_cell, args.load_generator, requests[name], c, args.warmup, args.duration,
                                args.max_requests, args.load_cpu))
                    cell["images_per_s"] = cell.pop("texts_per_s")  # load_cell counts requests: 1 image each
                    rec[name][str(c)] = cell
                    if delta is not None:
                        rec["batch_histograms"].setdefault(name, {})[str(c)] = delta
                    print(f"[compare_detect] round {r + 1} {name} c={c}: {cell['images_per_s']} images/s p50 "
                          f"{cell['latency_ms']['p50']} p99 {cell['latency_ms']['p99']} ms non-200 {cell['non_200']}"
                          f"{batch_hist.describe(delta)}", file=sys.stderr)
            rounds.append(rec)
        for name in TRISERVE_SYSTEMS:
            if name in servers:
                breakdown[f"{name}/after_rounds"] = timings_probe(requests[name], args.probe_requests)
    finally:
        for name, (peer, _) in servers.items():
            try:
                peer.stop()
            except Exception as exc:  # noqa: BLE001  # said, and the other servers are still stopped
                print(f"[compare_detect] stopping {name}: {exc}", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)

    import onnxruntime

    res = {"command": command, "started_utc": started_utc, "wall_seconds": round(time.monotonic() - t0, 1),
           "model": f"{MODEL}:{manifest['version']} ({shown(d)}), input imgsz {manifest['preprocess']['imgsz']}",
           "images_source": source,
           "images": [{"width": im["width"], "height": im["height"], "jpeg_bytes": im["jpeg_bytes"],
                       "objects": len(im["objects"])} for im in images],
           "host": f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
                   f"onnxruntime {onnxruntime.__version__}",
           "placement": {"server_cpu": args.server_cpu, "load_cpu": args.load_cpu,
                         "load": f"closed loop, {args.load_generator}"},
           "rounds": len(rounds), "duration_s": args.duration, "warmup_s": args.warmup,
           "concurrency": args.concurrency, "goal_concurrency": args.goal_concurrency, "systems": args.systems,
           "skipped": skipped, "agreement": agreement, "triserve_env": RAISED_LIMITS,
           "triserve_nobatch_env": args.nobatch_env, "intra_op_threads": args.intra_op,
           "summary": summarise(rounds, args.systems, args.concurrency, args.goal_concurrency), "raw_rounds": rounds,
           "c1_breakdown": breakdown, "notes": notes}
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    # first: a plotting failure loses nothing
    out.with_suffix(".json").write_text(json.dumps(res, indent=2, default=str))
    try:
        res["plots"] = [shown(Path(p)) for p in plot_rounds(
            res, out, "images", f"{MODEL}, 1 server CPU, 320x240 / 640x480 / 1280x720 JPEGs")]
        hist_png = batch_hist.plot(res["summary"]["batch_histograms"], out.with_name(out.name + "_batch_sizes.png"),
                                   "detection batch sizes", command)
        if hist_png:
            res["plots"].append(shown(Path(hist_png)))
    except Exception as exc:  # noqa: BLE001  # the numbers are already saved
        res["plots"] = f"failed: {type(exc).__name__}: {exc}"
    write_report(out, res, to_markdown(res))


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
