"""Where a request's CPU goes: CPU seconds per answered request in each server process (gateway, runner), pinned like
the side-by-side comparisons, for one fixed request under a closed wrk loop.

    python -m scripts.bench.cpu_split --family text --concurrency 1 [--placement remote|local] [--seconds 12]
    python -m scripts.bench.cpu_split --family detect --concurrency 16 [--profile docs/bench/profiles/detect-c16]

Why: a throughput or latency gap against a peer says how much, not where. The processes' own CPU times (utime +
stime from /proc over the measured window) divided by the requests answered give the cost per request of each tier;
compared with the in-process call (docs/bench/side_by_side_*.md) they give the serving overhead per request and which
process pays it. The server started as the comparisons start it (harness.TriservePeer on CPU 0, intra-op 1, their
knobs RAISED_LIMITS and SPILL_OFF), wrk on CPU 1, model 'primary'; the CPU per process is tuning.cpu_seconds, as
scripts/bench/ab.py measures it, for one placement without an A/B. One fixed request (text: a 12-word sentence;
detect: a 640x480 JPEG of the photo mix), so the numbers are per request of that size. Prints and writes JSON
(--out). --profile DIR samples every server process with py-spy during the measured window, only threads holding
the GIL (Python's own CPU: native calls that release it, such as ONNX Runtime's, show as the process CPU left over;
non-blocking, since pausing the server makes requests miss their deadlines) and writes its collapsed stacks plus a
summary of the heaviest frames (self and inclusive share of the samples): where the overhead sits, not only how
large it is. --floor also measures the request's floor in this process (floor_step: the product's own decode,
preprocess, model and postprocess, no server) and the server's CPU over it.
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
from pathlib import Path

from scripts.bench.harness import LOCAL_ENV, RAISED_LIMITS, SPILL_OFF, TriservePeer
from scripts.bench.tuning import cpu_seconds
from scripts.bench.wrk import closed_loop
from scripts.drills.common import assert_loopback

ROOT = Path(__file__).resolve().parents[2]
TEXT = "book a table for two at an italian restaurant tonight please"


def request(family: str) -> tuple[str, dict]:
    if family == "text":
        return "/v1/classify", {"texts": [TEXT], "top_k": 3, "model": "primary"}
    from PIL import Image

    cache = ROOT / ".cache"  # the importer check's photos, else those `make models` cached (the same real photos)
    photos = sorted((cache / "importer" / "photos").glob("*/*.jpg")) or sorted(cache.glob("pipeline/*/photos/*/*.jpg"))
    if not photos:
        raise SystemExit("no photos in .cache/importer/photos or .cache/pipeline/*/photos: run make models first")
    img = Image.open(photos[0]).convert("RGB").resize((640, 480))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return "/v1/detect", {"images": [{"data": base64.b64encode(buf.getvalue()).decode()}], "model": "primary"}


MODELS = {"text": "minilm-intent", "detect": "yolov8n-coco"}  # the primaries of the default deployments


def floor_step(family: str, body: dict) -> Callable[[], object]:
    """The work the request itself needs, in this process with the product's own functions and the served model's
    session (as the runner opens it, intra-op 1): detect = base64 + decode + letterbox + tensor + model + capped
    NMS + boxes to original pixels; text = clean + tokenise + pad + model + top-k."""
    from triserve.configs.settings import RunnerSettings
    from triserve.models.manifest import preprocess_as
    from triserve.models.registry import LocalRegistry
    from triserve.runners.pool import make_session

    directory, manifest = LocalRegistry(ROOT / "models" / "store").load_verified(MODELS[family], "stable")
    session, _, _ = make_session(directory / manifest.model_file,
                                 RunnerSettings(providers=["CPUExecutionProvider"], intra_op_threads=1,
                                                spin_wait=False))
    inputs = [i.name for i in session.get_inputs()]
    if family == "detect":
        from triserve.families.detection import runtime as det_runtime
        from triserve.families.detection.limits import Limits as DetLimits
        from triserve.families.detection.manifest import DetectionPreprocess
        from triserve.families.detection.schemas import DetectRequest
        from triserve.families.vision.decode import decode_images
        from triserve.families.vision.letterbox import boxes_to_original, letterbox
        from triserve.families.vision.nms import decode, request_nms

        det_limits, pre = DetLimits(), preprocess_as(manifest, DetectionPreprocess)
        request = DetectRequest.model_validate(body)

        def detect() -> object:
            boxed = [letterbox(im, pre.imgsz, pre.pad_value) for im in decode_images(request.images, det_limits)]
            heads = session.run(None, det_runtime.feeds(manifest, inputs, [b for b, _ in boxed]))[0]
            params = request_nms(det_limits)
            return [boxes_to_original(decode(h, pre.head, params).boxes, meta) for h, (_, meta) in zip(heads, boxed)]
        return detect
    from triserve.families.text import runtime as text_runtime
    from triserve.families.text.limits import Limits as TextLimits
    from triserve.families.text.manifest import TextPreprocess
    from triserve.families.text.postprocess import top_k
    from triserve.families.text.preprocess import TextTokenizer

    text_pre, text_limits = preprocess_as(manifest, TextPreprocess), TextLimits()
    tokenizer = TextTokenizer(directory / text_pre.tokenizer_file, text_pre.max_length, text_pre.pad_token_id)

    def classify() -> object:
        ids, _ = tokenizer.encode_received(body["texts"], text_limits.max_chars)
        probs = session.run(None, text_runtime.feeds(manifest, inputs, ids))[0]
        return [top_k(p, body["top_k"]) for p in probs]
    return classify


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.cpu_split", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=("text", "detect"), default="text")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--placement", choices=("remote", "local"), default="remote")
    ap.add_argument("--seconds", type=int, default=12)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--env", default="", help="extra server settings, K=V,K=V (e.g. "
                    "TRISERVE_SLOTS__COCO__BATCHING__MAX_BATCH_SIZE=1)")
    ap.add_argument("--floor", action="store_true", help="also measure the in-process floor of the same request "
                    "(CPU ms per request) and the ratio of the server's total to it")
    ap.add_argument("--profile", type=Path, default=None, help="write py-spy stacks and their summary here")
    args = ap.parse_args(argv)
    env = {**RAISED_LIMITS, **SPILL_OFF, "TRISERVE_RUNNER__INTRA_OP_THREADS": "1"}
    if args.placement == "local":
        env.update(LOCAL_ENV)
    env.update(kv.split("=", 1) for kv in args.env.split(",") if kv)
    path, body = request(args.family)
    profiles: list[tuple[str, Path, subprocess.Popen]] = []
    with tempfile.TemporaryDirectory() as tmp:
        peer = TriservePeer("triserve", env, 0, Path(tmp) / "serve.log", Path(tmp) / "home")
        try:
            assert_loopback(peer.url)
            peer.wait_ready()
            requests = [(peer.url + path, json.dumps(body).encode())]
            closed_loop(requests, args.concurrency, 4, 0, 10**7, cpu=1)  # warm-up
            profiles = start_profiles(peer, args.seconds, args.profile) if args.profile else []
            before = cpu_seconds(peer)
            loop = closed_loop(requests, args.concurrency, 0, args.seconds, 10**7, cpu=1)
            after = cpu_seconds(peer)
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
              "answered_ok": ok, "failed": failed, "requests_per_s": round(ok / max(loop["seconds"], 1e-9), 1),
              "cpu_ms_per_request": per_process, "cpu_ms_per_request_total": round(sum(per_process.values()), 3),
              "rss_mb": rss}
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
