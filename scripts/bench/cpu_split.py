"""Where a request's CPU goes: CPU seconds per answered request in each server process (gateway, runner), pinned like
the side-by-side comparisons, for one fixed request under a closed wrk loop.

    python -m scripts.bench.cpu_split --family text --concurrency 1 [--placement remote|local] [--seconds 12]
    python -m scripts.bench.cpu_split --family detect --concurrency 16

Why: a throughput or latency gap against a peer says how much, not where. The processes' own CPU times (utime +
stime from /proc over the measured window) divided by the requests answered give the cost per request of each tier;
compared with the in-process call (docs/bench/side_by_side_*.md) they give the serving overhead per request and which
process pays it. The server started as the comparisons start it (harness.TriservePeer on CPU 0, intra-op 1, their
knobs RAISED_LIMITS and SPILL_OFF), wrk on CPU 1, model 'primary'; the CPU per process is tuning.cpu_seconds, as
scripts/bench/ab.py measures it, for one placement without an A/B. One fixed request (text: a 12-word sentence;
detect: a 640x480 JPEG of the photo mix), so the numbers are per request of that size. Prints and writes JSON
(--out).
"""
from __future__ import annotations

import argparse
import base64
import io
import json
import sys
import tempfile
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

    photos = sorted((ROOT / ".cache" / "importer" / "photos").glob("*/*.jpg"))
    if not photos:
        raise SystemExit("no photos in .cache/importer/photos: run make models first")
    img = Image.open(photos[0]).convert("RGB").resize((640, 480))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return "/v1/detect", {"images": [{"data": base64.b64encode(buf.getvalue()).decode()}], "model": "primary"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.cpu_split", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=("text", "detect"), default="text")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--placement", choices=("remote", "local"), default="remote")
    ap.add_argument("--seconds", type=int, default=12)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    env = {**RAISED_LIMITS, **SPILL_OFF, "TRISERVE_RUNNER__INTRA_OP_THREADS": "1"}
    if args.placement == "local":
        env.update(LOCAL_ENV)
    path, body = request(args.family)
    with tempfile.TemporaryDirectory() as tmp:
        peer = TriservePeer("triserve", env, 0, Path(tmp) / "serve.log", Path(tmp) / "home")
        try:
            assert_loopback(peer.url)
            peer.wait_ready()
            requests = [(peer.url + path, json.dumps(body).encode())]
            closed_loop(requests, args.concurrency, 4, 0, 10**7, cpu=1)  # warm-up
            before = cpu_seconds(peer)
            loop = closed_loop(requests, args.concurrency, 0, args.seconds, 10**7, cpu=1)
            after = cpu_seconds(peer)
        finally:
            peer.stop()
    ok, failed = loop["ok"], loop["non_200"] + loop["degraded"]
    per_process = {name: round(1000 * (after[name] - before.get(name, 0.0)) / max(ok, 1), 3) for name in after}
    result = {"command": "python -m scripts.bench.cpu_split " + " ".join(argv if argv is not None else
                                                                            sys.argv[1:]),
              "family": args.family, "concurrency": args.concurrency, "placement": args.placement,
              "answered_ok": ok, "failed": failed, "requests_per_s": round(ok / max(loop["seconds"], 1e-9), 1),
              "cpu_ms_per_request": per_process, "cpu_ms_per_request_total": round(sum(per_process.values()), 3)}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
