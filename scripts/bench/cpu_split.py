"""Where a request's CPU goes: CPU seconds per answered request in each server process (gateway, runner), pinned like
the side-by-side comparisons, for one fixed request under a closed loop, over one transport.

    python -m scripts.bench.cpu_split --family text --concurrency 1 [--placement remote|local] [--seconds 12]
    python -m scripts.bench.cpu_split --family detect --concurrency 16 [--profile docs/bench/profiles/detect-c16]
    python -m scripts.bench.cpu_split --family pose --concurrency 4 --transport grpc|oip-rest|oip-grpc --floor

Why: a throughput or latency gap against a peer says how much, not where. The processes' own CPU times (utime + stime
from /proc over the measured window) divided by the requests answered give the cost per request of each tier; compared
with the in-process call (docs/bench/side_by_side_*.md) they give the serving overhead per request and which process
pays it. The server started as the comparisons start it (harness.TriservePeer on CPU 0, intra-op 1, their knobs
RAISED_LIMITS and SPILL_OFF; gRPC on only for the gRPC transports), the load on CPU 1, model 'primary'; the CPU per
process is tuning.cpu_seconds, as scripts/bench/ab.py measures it, for one placement without an A/B. One fixed request
per family (text: a 12-word sentence; detect, pose, segment: the same 640x480 JPEG of the photo mix; forecast: ten years
of a monthly series with trend and season, 12 steps ahead), so the numbers are per request of that size. Transports (the
same request's content on each): rest (the family's JSON route) and oip-rest (/v2/models/<alias>/infer) through wrk's
closed loop (scripts/bench/wrk.py); grpc (typed triserve.v1), oip-grpc (OIP ModelInfer) and oip-rest for the image
families (OIP JSON carries BYTES as UTF-8 text, so an image goes as binary tensor data, which wrk's replay cannot send)
through scripts/bench/grpc_loop.py, pinned like wrk; the measured window starts with nothing of the warm-up left in
flight (wait_idle). Prints and writes JSON (--out). --profile DIR samples every server process with py-spy during the
measured window, only threads holding the GIL (Python's own CPU: native calls that release it, such as ONNX Runtime's,
show as the process CPU left over; non-blocking, since pausing the server makes requests miss their deadlines) and
writes its collapsed stacks plus a summary of the heaviest frames (self and inclusive share of the samples): where the
overhead sits, not only how large it is. --floor also measures the request's floor in this process (floor_step: the
product's own decode, preprocess, model and postprocess, no server, whatever the transport) and the server's CPU over
it.
"""
from __future__ import annotations

import argparse
import base64
import io
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.bench import grpc_loop
from scripts.bench.harness import LOCAL_ENV, RAISED_LIMITS, SPILL_OFF, TriservePeer
from scripts.bench.tuning import cpu_seconds
from scripts.bench.wrk import closed_loop
from scripts.drills.common import assert_loopback

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "models" / "store"
TEXT = "book a table for two at an italian restaurant tonight please"
FAMILIES = {"text": "text", "detect": "detection", "pose": "pose", "segment": "segmentation", "forecast": "forecast"}
TRANSPORTS = ("rest", "grpc", "oip-rest", "oip-grpc")
MODELS = {"text": "minilm-intent", "detect": "yolov8n-coco", "pose": "yolo11n-pose", "segment": "plates",
          "forecast": "forecast-global"}  # the primaries of the default deployments (configs/models.yaml)
JSON = {"Content-Type": "application/json"}
GRPC_ON = {"TRISERVE_GRPC__ENABLED": "true"}  # RAISED_LIMITS turns it off; the gRPC transports need it


def photo_jpeg() -> bytes:
    """The first photo of the importer check's mix (else the one `make models` cached), as a 640x480 JPEG."""
    from PIL import Image

    cache = ROOT / ".cache"  # the importer check's photos, else those `make models` cached (the same real photos)
    photos = sorted((cache / "importer" / "photos").glob("*/*.jpg")) or sorted(cache.glob("pipeline/*/photos/*/*.jpg"))
    if not photos:
        raise SystemExit("no photos in .cache/importer/photos or .cache/pipeline/*/photos: run make models first")
    img = Image.open(photos[0]).convert("RGB").resize((640, 480))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def monthly_series(n: int = 120, seed: int = 0) -> list[float]:
    """A monthly series like a sales history: level, a rising trend, a yearly season and noise (seeded)."""
    import numpy as np

    t = np.arange(n)
    y = 200 + 1.5 * t + 25 * np.sin(2 * np.pi * t / 12) + np.random.default_rng(seed).normal(0, 6, n)
    return [round(float(v), 1) for v in y]


def request(family: str, jpeg: bytes | None = None) -> tuple[str, dict]:
    """The family's REST route and JSON body (what every transport of the cell carries, and what the floor runs)."""
    from triserve import families

    path = families.family(FAMILIES[family]).api.routes[0].path
    if family == "text":
        return path, {"texts": [TEXT], "top_k": 3, "model": "primary"}
    if family == "forecast":
        return path, {"values": monthly_series(), "start": "2015-01-01T00:00:00", "frequency": "MS", "horizon": 12,
                      "model": "primary"}
    raw = jpeg if jpeg is not None else photo_jpeg()
    return path, {"images": [{"data": base64.b64encode(raw).decode()}], "model": "primary"}


# --------------------------------------------------------------------------------------------------------------------
# the same request over each transport
# --------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Load:
    """One transport's form of a cell's request: `path` (a URL path or a gRPC method), the bytes sent, the HTTP
    headers they go with, how an answer says degraded (grpc_loop.Target.answer) and whether wrk can replay it (one
    line of JSON: its replay sends every body as JSON)."""

    transport: str
    path: str
    body: bytes
    answer: str
    wrk: bool
    headers: dict[str, str] = field(default_factory=dict)


def oip_tensors(family: str, body: dict) -> tuple[list[tuple[str, str, list[Any]]], dict[str, Any]]:
    """The REST body as the family's OIP pipeline takes it (its OipSurface): (name, datatype, flat values) per input
    tensor, images as their encoded bytes, and the request fields it reads as parameters."""
    from triserve import families

    surface = families.family(FAMILIES[family]).api.oip
    tensors = []
    for meta in surface.inputs:
        if meta.field not in body:
            continue
        values = body[meta.field]
        if meta.binary:
            values = [base64.b64decode(v["data"]) for v in values]
        tensors.append((meta.name, meta.datatype, list(values)))
    return tensors, {k: body[k] for k in surface.parameters if k in body}


def oip_alias(family: str) -> str:
    from triserve import families

    return families.family(FAMILIES[family]).api.oip.alias


def oip_rest(family: str, body: dict) -> tuple[bytes, dict[str, str]]:
    """An OIP REST body: JSON when every tensor is numbers or text; else a JSON header and the binary tensor data
    (the BYTES raw encoding of oip_codec), as tritonclient.http sends it."""
    from triserve.services.protocols.oip_codec import serialize_bytes

    tensors, params = oip_tensors(family, body)
    inputs: list[dict[str, Any]] = []
    blobs = []
    for name, datatype, values in tensors:
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": [len(values)]}
        if any(isinstance(v, bytes) for v in values):
            blobs.append(serialize_bytes(values))
            entry["parameters"] = {"binary_data_size": len(blobs[-1])}
        else:
            entry["data"] = values
        inputs.append(entry)
    doc = json.dumps({"inputs": inputs, "parameters": params}).encode()
    if not blobs:
        return doc, JSON
    return doc + b"".join(blobs), {"Content-Type": "application/octet-stream",
                                   "Inference-Header-Content-Length": str(len(doc))}


def typed_grpc(family: str, body: dict) -> tuple[str, bytes]:
    """(method, serialized request) of the family's typed RPC: the REST body's fields by name, images as bytes."""
    from google.protobuf import json_format

    from triserve import families
    from triserve.services.protocols.generated import triserve_pb2

    method = families.family(FAMILIES[family]).api.grpc_method
    doc = dict(body)
    if "images" in doc:
        doc["images"] = [im["data"] for im in doc["images"]]  # proto JSON: bytes as base64
    if "model" in doc:
        doc["model"] = f"MODEL_CHOICE_{doc['model'].upper()}"
    message = json_format.ParseDict(doc, getattr(triserve_pb2, f"{method}Request")())
    return method, message.SerializeToString()


def oip_grpc(family: str, body: dict) -> bytes:
    """A serialized OIP ModelInferRequest for the family's alias (the product's stubs and parameter encoding;
    not importable beside tritonclient.grpc in one process)."""
    from triserve.services.protocols.generated import grpc_predict_v2_pb2 as pb
    from triserve.services.protocols.grpc_oip import CONTENTS_FIELD, set_param

    tensors, params = oip_tensors(family, body)
    message = pb.ModelInferRequest(model_name=oip_alias(family))
    for name, datatype, values in tensors:
        tensor = message.inputs.add(name=name, datatype=datatype, shape=[len(values)])
        contents = getattr(tensor.contents, CONTENTS_FIELD[datatype])
        contents.extend([v.encode() if isinstance(v, str) else v for v in values] if datatype == "BYTES" else values)
    for key, value in params.items():
        set_param(message.parameters[key], value)
    return message.SerializeToString()


def load_for(family: str, transport: str, path: str, body: dict) -> Load:
    if transport == "rest":
        return Load(transport, path, json.dumps(body).encode(), "json", wrk=True, headers=JSON)
    if transport == "oip-rest":
        data, headers = oip_rest(family, body)
        return Load(transport, f"/v2/models/{oip_alias(family)}/infer", data, "json", wrk=headers == JSON,
                    headers=headers)
    if transport == "grpc":
        method, data = typed_grpc(family, body)
        return Load(transport, f"/triserve.v1.Triserve/{method}", data, f"typed:{method}", wrk=False)
    if transport == "oip-grpc":
        return Load(transport, "/inference.GRPCInferenceService/ModelInfer", oip_grpc(family, body), "oip", wrk=False)
    raise ValueError(f"unknown transport {transport!r}; known: {TRANSPORTS}")


def target(load: Load, peer: TriservePeer) -> grpc_loop.Target:
    """Where grpc_loop sends a Load: the server's gRPC port, or its HTTP base URL."""
    if load.transport.endswith("grpc"):
        return grpc_loop.Target("grpc", peer.server.grpc_target, load.path, load.body, load.answer)
    return grpc_loop.Target("http", peer.url, load.path, load.body, load.answer, load.headers)


# --------------------------------------------------------------------------------------------------------------------
# the floor: the same request in this process
# --------------------------------------------------------------------------------------------------------------------
def floor_step(family: str, body: dict, store: Path = STORE) -> Callable[[], object]:
    """The work the request itself needs, in this process with the product's own functions and the served model's
    session (as the runner opens it, intra-op 1): detect = base64 + decode + letterbox + tensor + model + capped
    NMS + boxes to original pixels; pose = the same fitted as served + the keypoints to original pixels and named;
    segment = the same + masks as COCO RLE (postprocess.image_result); text = clean + tokenise + pad + model + top-k;
    forecast = the family's own hooks (validate and regularise, items for the history and each backtest origin,
    model, combined with the classical methods into the answer's points)."""
    from triserve.configs.settings import RunnerSettings
    from triserve.models.registry import LocalRegistry
    from triserve.runners.pool import make_session

    directory, manifest = LocalRegistry(store).load_verified(MODELS[family], "stable")
    session, _, _ = make_session(directory / manifest.model_file,
                                 RunnerSettings(providers=["CPUExecutionProvider"], intra_op_threads=1,
                                                spin_wait=False))
    inputs = [i.name for i in session.get_inputs()]
    build = {"detect": _detect_floor, "pose": _pose_floor, "segment": _segment_floor, "text": _text_floor,
             "forecast": _forecast_floor}[family]
    return build(body, session, inputs, directory, manifest)


def _detect_floor(body: dict, session, inputs: list[str], directory: Path, manifest) -> Callable[[], object]:
    from triserve.families.detection import runtime as det_runtime
    from triserve.families.detection.limits import Limits as DetLimits
    from triserve.families.detection.manifest import DetectionPreprocess
    from triserve.families.detection.schemas import DetectRequest
    from triserve.families.vision.decode import decode_images
    from triserve.families.vision.letterbox import boxes_to_original, letterbox
    from triserve.families.vision.nms import decode, request_nms
    from triserve.models.manifest import preprocess_as

    det_limits, pre = DetLimits(), preprocess_as(manifest, DetectionPreprocess)
    request = DetectRequest.model_validate(body)

    def detect() -> object:
        boxed = [letterbox(im, pre.imgsz, pre.pad_value) for im in decode_images(request.images, det_limits)]
        heads = session.run(None, det_runtime.feeds(manifest, inputs, [b for b, _ in boxed]))[0]
        params = request_nms(det_limits)
        return [boxes_to_original(decode(h, pre.head, params).boxes, meta) for h, (_, meta) in zip(heads, boxed)]
    return detect


def _pose_floor(body: dict, session, inputs: list[str], directory: Path, manifest) -> Callable[[], object]:
    from triserve.families.pose import runtime as pose_runtime
    from triserve.families.pose.limits import Limits as PoseLimits
    from triserve.families.pose.manifest import PosePreprocess
    from triserve.families.pose.postprocess import decode_pose, keypoints_to_original, to_keypoints
    from triserve.families.pose.schemas import PoseRequest
    from triserve.families.vision.decode import decode_images
    from triserve.families.vision.letterbox import boxes_to_original, fit
    from triserve.families.vision.nms import request_nms
    from triserve.models.manifest import preprocess_as

    limits, pre = PoseLimits(), preprocess_as(manifest, PosePreprocess)
    request, nc = PoseRequest.model_validate(body), len(manifest.labels)

    def pose() -> object:
        fitted = [fit(im, pre.imgsz) for im in decode_images(request.images, limits)]
        heads = session.run(None, pose_runtime.feeds(manifest, inputs, [f for f, _ in fitted]))[0]
        params, out = request_nms(limits), []
        for head, (_, meta) in zip(heads, fitted):
            poses = decode_pose(head, nc, pre.kpt_shape, params)
            out.append((boxes_to_original(poses.det.boxes, meta),
                        [to_keypoints(k, pre.keypoint_names, limits.keypoint_visibility)
                         for k in keypoints_to_original(poses.keypoints, meta)]))
        return out
    return pose


def _segment_floor(body: dict, session, inputs: list[str], directory: Path, manifest) -> Callable[[], object]:
    import numpy as np

    from triserve.families.segmentation import runtime as seg_runtime
    from triserve.families.segmentation.limits import Limits as SegLimits
    from triserve.families.segmentation.manifest import SegmentationPreprocess
    from triserve.families.segmentation.postprocess import image_result
    from triserve.families.segmentation.schemas import SegmentRequest
    from triserve.families.vision.decode import decode_images
    from triserve.families.vision.letterbox import fit
    from triserve.families.vision.nms import request_nms
    from triserve.models.manifest import preprocess_as

    lim, pre = SegLimits(), preprocess_as(manifest, SegmentationPreprocess)
    request = SegmentRequest.model_validate(body)
    fmt = request.mask_format or lim.mask_format

    def segment() -> object:
        fitted = [fit(im, pre.imgsz) for im in decode_images(request.images, lim)]
        rows = session.run(None, seg_runtime.feeds(manifest, inputs, [f for f, _ in fitted]))[0]
        params = request_nms(lim, class_aware=request.class_aware)
        return [image_result(np.asarray(row), meta, pre, manifest.labels, params, fmt, lim.max_polygon_points,
                             lim.max_mask_runs, lim.max_mask_samples) for row, (_, meta) in zip(rows, fitted)]
    return segment


def _text_floor(body: dict, session, inputs: list[str], directory: Path, manifest) -> Callable[[], object]:
    from triserve.families.text import runtime as text_runtime
    from triserve.families.text.limits import Limits as TextLimits
    from triserve.families.text.manifest import TextPreprocess
    from triserve.families.text.postprocess import top_k
    from triserve.families.text.preprocess import TextTokenizer
    from triserve.models.manifest import preprocess_as

    text_pre, text_limits = preprocess_as(manifest, TextPreprocess), TextLimits()
    tokenizer = TextTokenizer(directory / text_pre.tokenizer_file, text_pre.max_length, text_pre.pad_token_id)

    def classify() -> object:
        ids, _ = tokenizer.encode_received(body["texts"], text_limits.max_chars)
        probs = session.run(None, text_runtime.feeds(manifest, inputs, ids))[0]
        return [top_k(p, body["top_k"]) for p in probs]
    return classify


def _forecast_floor(body: dict, session, inputs: list[str], directory: Path, manifest) -> Callable[[], object]:
    from triserve import families
    from triserve.families.forecast import runtime as fc_runtime
    from triserve.families.forecast.limits import Limits as ForecastLimits
    from triserve.families.forecast.schemas import ForecastRequest
    from triserve.kernel.family import Answer, DeploymentView
    from triserve.kernel.served import RunnerResult, ServedModel

    fam = families.family("forecast")
    served = ServedModel("floor", manifest.version, directory, manifest)
    view = DeploymentView(name="floor", limits=ForecastLimits(), primary=lambda: served, batch_limit=lambda: 256,
                          observe=lambda *_: None)
    request = ForecastRequest.model_validate(body)

    def forecast() -> object:
        work = fam.validate(view, request)
        answers = []
        for part in fam.parts(view, work):
            items, state = fam.items(view, part, served)
            ys = session.run(None, fc_runtime.feeds(manifest, inputs, items))[0]
            result = RunnerResult(outputs=list(ys), model=manifest.name, version=manifest.version, infer_ms=0.0,
                                  batch=len(items), slot="floor", degraded=False, degraded_reason=None,
                                  served=served)
            answers.append(Answer(part=part, result=result, state=state))
        return fam.respond(view, request, work, answers)
    return forecast


def floor_cpu_ms(family: str, body: dict, seconds: float, cpu: int = 0) -> float:
    """CPU milliseconds of floor_step per request, pinned to `cpu` like the server (median of 5 timed slices)."""
    import statistics
    import time

    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        step = floor_step(family, body)
        for _ in range(3):
            step()
        slices = []
        for _ in range(5):
            n, start, wall = 0, time.process_time(), time.perf_counter()
            while n < 3 or time.perf_counter() - wall < seconds / 5:
                step()
                n += 1
            slices.append((time.process_time() - start) * 1000 / n)
        return round(statistics.median(slices), 3)
    finally:
        os.sched_setaffinity(0, mine)


def rss_mb(peer: TriservePeer) -> dict[str, float]:
    """Service -> resident memory (MB) of its worker processes after the measured window."""
    import psutil

    out: dict[str, float] = {}
    for service, pids in peer.pids().items():
        for pid in pids:
            try:
                out[service] = round(out.get(service, 0.0) + psutil.Process(pid).memory_info().rss / 2**20, 1)
            except psutil.NoSuchProcess:
                pass
    return out


def start_profiles(peer: TriservePeer, seconds: int, out: Path) -> list[tuple[str, Path, subprocess.Popen]]:
    """py-spy on every worker process of the server for the measured window (raw collapsed stacks)."""
    spy = Path(sys.executable).parent / "py-spy"  # the project's environment (the dev extra), never a PATH lookup
    if not spy.exists():
        raise SystemExit(f"py-spy is not installed beside {sys.executable} (it is in the dev extra)")
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for service, pids in sorted(peer.pids().items()):
        for pid in sorted(pids):
            path = out / f"{service}-{pid}.txt"
            proc = subprocess.Popen([str(spy), "record", "--nonblocking", "--gil", "--format", "raw", "--rate", "200",
                                     "--duration", str(seconds), "--pid", str(pid), "--output", str(path)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            runs.append((service, path, proc))
    return runs


def summarise_profile(path: Path, top: int = 25) -> dict:
    """Collapsed stacks -> the frames holding most samples: self (the frame on top) and inclusive (anywhere on the
    stack, once per sample), as shares of all samples (GIL holders only: no idle thread is among them)."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  if " (" in f else f for f in stack.split(";")]
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    def share(counts: Counter[str]) -> list[tuple[str, float]]:
        return [(f, round(n / max(total, 1), 4)) for f, n in counts.most_common(top)]
    return {"samples": total, "self": share(own), "inclusive": share(inclusive)}


def wait_idle(peer: TriservePeer, quiet_s: float = 0.5, busy_share: float = 0.05, timeout_s: float = 60) -> float:
    """Wait until the server has finished what the wrk warm-up left in flight (wrk exits without awaiting its
    last `concurrency` requests, and the server still runs them: inside the measured window they would add up to
    `concurrency` requests' CPU that no answer counts, ~c x the request's cost). Idle: under `busy_share` of a core
    over `quiet_s`. Returns the seconds waited."""
    import time

    started = time.monotonic()
    last = sum(cpu_seconds(peer).values())
    while time.monotonic() - started < timeout_s:
        time.sleep(quiet_s)
        now = sum(cpu_seconds(peer).values())
        if now - last < busy_share * quiet_s:
            break
        last = now
    return round(time.monotonic() - started, 2)


def measure(load: Load, peer: TriservePeer, concurrency: int, seconds: int,
            starting: Callable[[], None] = lambda: None, use_wrk: bool = True) -> tuple[dict, dict, dict]:
    """The closed loop of one cell: an unmeasured warm-up, then `starting()` and the server's CPU counters read
    right before the measured window and again after it; wrk where it can send the request and `use_wrk`, else
    grpc_loop. Returns (the loop's result, CPU before, CPU after)."""
    counters: dict[str, dict] = {}

    def start() -> None:
        starting()
        counters["before"] = cpu_seconds(peer)
    if load.wrk and use_wrk:
        requests = [(peer.url + load.path, load.body)]
        closed_loop(requests, concurrency, 4, 0, 10**7, cpu=1)  # warm-up
        wait_idle(peer)
        start()
        loop = closed_loop(requests, concurrency, 0, seconds, 10**7, cpu=1)
    else:
        loop = grpc_loop.closed_loop(target(load, peer), concurrency, 4, seconds, 10**7, cpu=1, start=start)
    return loop, counters["before"], cpu_seconds(peer)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.cpu_split", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=tuple(FAMILIES), default="text")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--placement", choices=("remote", "local"), default="remote")
    ap.add_argument("--transport", choices=TRANSPORTS, default="rest")
    ap.add_argument("--generator", choices=("auto", "python"), default="auto",
                    help="auto: wrk for the JSON bodies, grpc_loop for the rest; python: grpc_loop for every "
                         "transport (one client for all; it awaits the calls in flight at the window's end, where "
                         "wrk leaves them to the server)")
    ap.add_argument("--seconds", type=int, default=12)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--env", default="", help="extra server settings, K=V,K=V (e.g. "
                    "TRISERVE_SLOTS__COCO__BATCHING__MAX_BATCH_SIZE=1)")
    ap.add_argument("--floor", action="store_true", help="also measure the in-process floor of the same request "
                    "(CPU ms per request) and the ratio of the server's total to it")
    ap.add_argument("--profile", type=Path, default=None, help="write py-spy stacks and their summary here")
    args = ap.parse_args(argv)
    env = {**RAISED_LIMITS, **SPILL_OFF, "TRISERVE_RUNNER__INTRA_OP_THREADS": "1"}
    if args.transport.endswith("grpc"):
        env.update(GRPC_ON)
    if args.placement == "local":
        env.update(LOCAL_ENV)
    env.update(kv.split("=", 1) for kv in args.env.split(",") if kv)
    path, body = request(args.family)
    load = load_for(args.family, args.transport, path, body)
    profiles: list[tuple[str, Path, subprocess.Popen]] = []
    with tempfile.TemporaryDirectory() as tmp:
        peer = TriservePeer("triserve", env, 0, Path(tmp) / "serve.log", Path(tmp) / "home")
        try:
            assert_loopback(peer.url)
            peer.wait_ready()
            def starting() -> None:
                if args.profile:
                    profiles.extend(start_profiles(peer, args.seconds, args.profile))
            loop, before, after = measure(load, peer, args.concurrency, args.seconds, starting,
                                          use_wrk=args.generator == "auto")
            rss = rss_mb(peer)
            for _, _, proc in profiles:
                proc.wait(timeout=args.seconds + 30)
        finally:
            peer.stop()
    ok, failed = loop["ok"], loop["non_200"] + loop["degraded"]
    per_process = {name: round(1000 * (after[name] - before.get(name, 0.0)) / max(ok, 1), 3) for name in after}
    result = {"command": "python -m scripts.bench.cpu_split " + " ".join(argv if argv is not None else
                                                                            sys.argv[1:]),
              "family": args.family, "concurrency": args.concurrency, "placement": args.placement,
              "transport": args.transport, "generator": loop.get("generator", "wrk"),
              "answered_ok": ok, "failed": failed, "requests_per_s": round(ok / max(loop["seconds"], 1e-9), 1),
              "errors": loop.get("errors", {}), "cpu_ms_per_request": per_process,
              "cpu_ms_per_request_total": round(sum(per_process.values()), 3), "rss_mb": rss}
    if args.floor:
        floor = floor_cpu_ms(args.family, body, seconds=min(args.seconds, 10))
        result["floor_cpu_ms"] = floor
        result["total_over_floor"] = round(result["cpu_ms_per_request_total"] / floor, 3)
    if profiles:
        result["profiles"] = {f"{service}:{path.name}": summarise_profile(path) for service, path, _ in profiles
                              if path.exists()}
    print(json.dumps(result, indent=1))
    if args.profile:
        (args.profile / "summary.json").write_text(json.dumps(result, indent=1) + "\n")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
