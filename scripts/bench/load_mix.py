"""Closed-loop mixed load across the three tasks; counts every status code and reports latency percentiles.

    python -m scripts.bench.load_mix --url http://127.0.0.1:3000 --requests 10000 --concurrency 150

Bounded in count (--requests) and time (--max-seconds); only loopback targets are accepted. Saves JSON to --out.
The claim it checks: the runner hop drops nothing under load (zero 5xx, zero transport errors).
Counted as every benchmark counts (scripts/drills/common.answer_kind): throughput_rps and the latency percentiles are
primary answers; a 200 whose answer says `degraded: true` (a fallback model answered) is counted apart, per path.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import random
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import aiohttp
import numpy as np

from scripts.drills.common import DEGRADED, PRIMARY, answer_kind, says_degraded

TEXTS = ["what is my account balance", "book a flight to paris next monday", "set a timer for ten minutes",
         "how do you say good morning in german", "transfer 200 dollars to my savings account", "tell me a joke",
         "is my card blocked", "what's the weather tomorrow", "play jazz", "cancel my dinner reservation at eight"]


def _image(seed: int) -> str:
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    w, h = int(rng.integers(160, 640)), int(rng.integers(160, 640))
    img = Image.fromarray(rng.integers(0, 80, (h, w, 3), dtype=np.uint8))
    d = ImageDraw.Draw(img)
    for _ in range(3):
        x, y = int(rng.integers(0, w - 40)), int(rng.integers(0, h - 40))
        d.rectangle([x, y, x + 40, y + 40], fill=tuple(int(c) for c in rng.integers(100, 255, 3)))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=85)
    return base64.b64encode(buf.getvalue()).decode()


def payloads(seed: int = 0) -> list[tuple[str, dict]]:
    rng = random.Random(seed)
    images = [_image(i) for i in range(8)]
    out: list[tuple[str, dict]] = []
    for i in range(64):
        out.append(("/v1/detect", {"images": [{"data": images[i % len(images)]}]}))
        out.append(("/v1/classify", {"texts": rng.sample(TEXTS, rng.randint(1, 4)), "top_k": 3}))
        n = rng.randint(40, 200)
        values = (340 + 3 * np.sin(np.arange(n) * np.pi / 6) + 0.1 * np.arange(n)).round(3).tolist()
        out.append(("/v1/forecast", {"values": values, "start": "1990-01-01T00:00:00", "frequency": "MS",
                                       "horizon": 12}))
    return out


async def run(url: str, requests: int, concurrency: int, max_seconds: float) -> dict:
    host = urlparse(url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("refusing to send load to a non-loopback address")
    mix = payloads()
    codes: Counter = Counter()
    errors: Counter = Counter()
    paths = ("/v1/detect", "/v1/classify", "/v1/forecast")
    latencies: dict[str, dict[str, list[float]]] = {p: {PRIMARY: [], DEGRADED: []} for p in paths}
    counter = iter(range(requests))
    deadline = time.monotonic() + max_seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:

        async def worker() -> None:
            for i in counter:
                if time.monotonic() > deadline:
                    return
                path, body = mix[i % len(mix)]
                started = time.perf_counter()
                status: int | str = "transport_error"
                answer = b""
                try:
                    async with session.post(url + path, json=body) as resp:
                        answer = await resp.read()
                        status = resp.status
                        if resp.status >= 500:
                            errors[f"{resp.status}:{answer[:120].decode(errors='replace')}"] += 1
                except Exception as exc:  # noqa: BLE001  # every failure is counted, none is hidden
                    errors[type(exc).__name__] += 1
                codes[status] += 1
                kind = answer_kind(status, status == 200 and says_degraded(answer))
                if kind in latencies[path]:
                    latencies[path][kind].append((time.perf_counter() - started) * 1000)

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - started
    total = sum(codes.values())
    ok = sum(len(v[PRIMARY]) for v in latencies.values())
    degraded = {p: len(v[DEGRADED]) for p, v in latencies.items() if v[DEGRADED]}
    return {
        "requests": total, "concurrency": concurrency, "seconds": round(elapsed, 2),
        "ok": ok, "throughput_rps": round(ok / elapsed, 1), "degraded": sum(degraded.values()),
        "degraded_by_path": degraded, "requests_rps": round(total / elapsed, 1),
        "status": {str(k): v for k, v in sorted(codes.items(), key=lambda kv: str(kv[0]))},
        "5xx": sum(v for k, v in codes.items() if isinstance(k, int) and k >= 500),
        "transport_errors": codes.get("transport_error", 0),
        "errors": dict(errors.most_common(10)),
        "latency_ms": {p: pcts(v[PRIMARY]) for p, v in latencies.items() if v[PRIMARY]},
        "latency_degraded_ms": {p: pcts(v[DEGRADED]) for p, v in latencies.items() if v[DEGRADED]},
    }


def pcts(ms: list[float]) -> dict[float, float]:
    return {q: round(float(np.percentile(ms, q)), 1) for q in (50, 90, 99, 99.9)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:3000")
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=150)
    ap.add_argument("--max-seconds", type=float, default=900)
    ap.add_argument("--out", type=Path, default=Path("docs/bench/load_mix.json"))
    args = ap.parse_args()
    result = asyncio.run(run(args.url, args.requests, args.concurrency, args.max_seconds))
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
