"""Closed-loop load for what wrk cannot send: gRPC calls (typed triserve.v1 and OIP's ModelInfer) and HTTP bodies
that are not one line of JSON (OIP REST's binary tensor data: a JPEG is no UTF-8 string, so it cannot ride in OIP
JSON). `concurrency` calls in flight, each sending its next request when its previous answer arrived.

    from scripts.bench import grpc_loop
    cell = grpc_loop.closed_loop(grpc_loop.Target("grpc", "127.0.0.1:3001", "/triserve.v1.Triserve/Classify", body,
                                                  "typed:Classify"), concurrency=16, warmup_s=4, duration_s=10,
                                 max_requests=200_000, cpu=1, start=lambda: print("measuring"))

Why a process of its own, like wrk: it runs pinned to the load CPU (every thread grpc or asyncio starts inherits the
affinity), so the server's CPU is only the server's. It warms up, says READY, and runs the measured window when told,
so the caller can read the server's CPU counters right before. Bounded in time (duration) and count (max_requests);
loopback targets only. The result has wrk.summarise's shape: ok = primary answers, degraded ones (a fallback model
answered) apart, failed calls by status (a gRPC code, or the HTTP status) in "errors" and "non_200"; latency of the
primary answers alone.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from scripts.bench.wrk import LOOPBACK

OK, DEGRADED = "ok", "degraded"
TIMEOUT_S = 30.0  # one call's limit, as wrk's --timeout
DEGRADED_JSON = re.compile(rb'"degraded"\s*:\s*true')  # wrk_replay.lua's test of a JSON answer


@dataclass(frozen=True)
class Target:
    """One request, replayed: `protocol` grpc (address host:port, path the method's /package.Service/Method, body the
    serialized request) or http (address the base URL, path the URL path, body as sent with `headers`); `answer` says
    how an answer tells degraded: 'typed:<Method>' (<Method>Response.degraded), 'oip' (ModelInferResponse's
    degraded parameter) or 'json' (the body says "degraded": true)."""

    protocol: str
    address: str
    path: str
    body: bytes
    answer: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Tally:
    """What the calls of one window came to."""

    ok_ms: list[float] = field(default_factory=list)
    degraded: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    sent: int = 0


class Failed(Exception):
    """A call that got no answer: its status (a gRPC code name, HTTP status or a transport error's name)."""

    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


def check_loopback(target: Target) -> None:
    host = urlparse(target.address).hostname if target.protocol == "http" else target.address.rsplit(":", 1)[0]
    if host not in LOOPBACK:
        raise SystemExit("refusing to send load to a non-loopback address")


def degraded_reader(answer: str) -> Callable[[bytes], bool]:
    """Raw answer bytes -> whether a fallback model answered."""
    if answer.startswith("typed:"):
        from triserve.services.protocols.generated import triserve_pb2

        response = getattr(triserve_pb2, f"{answer.removeprefix('typed:')}Response")
        return lambda raw: bool(response.FromString(raw).degraded)
    if answer == "oip":
        # the product's stubs, imported here only: tritonclient.grpc registers the same inference.* names
        from triserve.services.protocols.generated import grpc_predict_v2_pb2 as pb

        return lambda raw: bool(pb.ModelInferResponse.FromString(raw).parameters["degraded"].bool_param)
    if answer == "json":
        return lambda raw: DEGRADED_JSON.search(raw) is not None
    raise ValueError(f"unknown answer kind {answer!r}")


async def run_window(call: Callable[[], Awaitable[str]], concurrency: int, duration_s: float,
                     max_requests: int) -> tuple[Tally, float]:
    """`concurrency` workers calling until the duration is up or max_requests were sent; the ones in flight at the
    end are awaited and counted. Returns the tally and the window's seconds."""
    tally = Tally()
    started = time.perf_counter()
    end = started + duration_s

    async def worker() -> None:
        while tally.sent < max_requests and time.perf_counter() < end:
            tally.sent += 1
            t0 = time.perf_counter()
            try:
                kind = await call()
            except Failed as exc:
                tally.failed[exc.status] += 1
                continue
            if kind == DEGRADED:
                tally.degraded += 1
            else:
                tally.ok_ms.append((time.perf_counter() - t0) * 1000)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tally, time.perf_counter() - started


def summarise(tally: Tally, seconds: float, concurrency: int, max_requests: int, generator: str) -> dict:
    """A window's tally in wrk.summarise's shape (status: answered calls under 'OK' and each failure status)."""
    failed = sum(tally.failed.values())
    answered = len(tally.ok_ms) + tally.degraded
    ms = np.asarray(tally.ok_ms) if tally.ok_ms else np.zeros(1)
    return {"concurrency": concurrency, "seconds": round(seconds, 2), "ok": len(tally.ok_ms),
            "texts_per_s": round(len(tally.ok_ms) / max(seconds, 1e-9), 1),
            "latency_ms": {q: round(float(np.percentile(ms, float(q[1:]))), 3) for q in ("p50", "p90", "p99",
                                                                                         "p99.9")},
            "latency_of": "primary answers", "degraded": tally.degraded,
            "degraded_per_s": round(tally.degraded / max(seconds, 1e-9), 1),
            "status": {"OK": answered, **dict(tally.failed)}, "errors": dict(tally.failed), "non_200": failed,
            "sent_total": tally.sent, "capped": tally.sent >= max_requests, "generator": generator}


def grpc_caller(channel, target: Target) -> Callable[[], Awaitable[str]]:
    """One unary call of the target's raw request bytes on a grpc.aio channel -> ok or degraded; Failed otherwise."""
    import grpc

    method = channel.unary_unary(target.path)  # no (de)serializers: bytes in, bytes out
    degraded = degraded_reader(target.answer)

    async def call() -> str:
        try:
            raw = await method(target.body, timeout=TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise Failed(exc.code().name) from None
        return DEGRADED if degraded(raw) else OK
    return call


def http_caller(session, target: Target) -> Callable[[], Awaitable[str]]:
    """One POST of the target's body on a keep-alive aiohttp session -> ok or degraded; Failed otherwise."""
    import aiohttp

    url = target.address.rstrip("/") + target.path
    degraded = degraded_reader(target.answer)

    async def call() -> str:
        try:
            async with session.post(url, data=target.body, headers=target.headers) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise Failed(str(resp.status))
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise Failed(type(exc).__name__) from None
        return DEGRADED if degraded(raw) else OK
    return call


async def _serve_windows(target: Target, concurrency: int, warmup_s: float, duration_s: float, max_requests: int,
                         go: Callable[[], Awaitable[None]]) -> dict:
    """Warm-up, then `go` (the caller's signal), then the measured window, all on one channel or session."""
    check_loopback(target)

    async def measure(call: Callable[[], Awaitable[str]], generator: str) -> dict:
        if warmup_s > 0:
            await run_window(call, concurrency, warmup_s, max_requests)
        await go()
        tally, seconds = await run_window(call, concurrency, duration_s, max_requests)
        return summarise(tally, seconds, concurrency, max_requests, generator)

    if target.protocol == "grpc":
        import grpc

        options = [("grpc.max_receive_message_length", 64 * 2**20), ("grpc.max_send_message_length", 64 * 2**20)]
        async with grpc.aio.insecure_channel(target.address, options=options) as channel:
            await asyncio.wait_for(channel.channel_ready(), TIMEOUT_S)
            return await measure(grpc_caller(channel, target), "grpc.aio")
    import aiohttp

    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session:
        return await measure(http_caller(session, target), "aiohttp")


def closed_loop(target: Target, concurrency: int, warmup_s: float, duration_s: float, max_requests: int,
                cpu: int | None = None, start: Callable[[], None] | None = None) -> dict:
    """The loop in a child process pinned to `cpu`: an unmeasured warm-up, then `start()` here (e.g. reading the
    server's CPU counters), then the measured window; its result (summarise's shape)."""
    check_loopback(target)
    with tempfile.TemporaryDirectory(prefix="triserve-loop-") as tmp:
        spec = Path(tmp) / "target.json"
        body = Path(tmp) / "body.bin"
        body.write_bytes(target.body)
        spec.write_text(json.dumps({**asdict(target), "body": str(body)}))
        pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
        cmd = [sys.executable, "-m", "scripts.bench.grpc_loop", "--target", str(spec), "--concurrency",
               str(concurrency), "--warmup", str(warmup_s), "--seconds", str(duration_s), "--max-requests",
               str(max_requests)]
        root = Path(__file__).resolve().parents[2]
        with subprocess.Popen(cmd, cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              preexec_fn=pin) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            limit = time.monotonic() + warmup_s + duration_s + 3 * TIMEOUT_S + 60
            try:
                line = proc.stdout.readline()
                if line.strip() != "READY":
                    raise RuntimeError(f"load loop did not start (said {line!r}, exit {proc.wait(timeout=30)})")
                if start is not None:
                    start()
                proc.stdin.write("go\n")
                proc.stdin.flush()
                out, _ = proc.communicate(timeout=max(1.0, limit - time.monotonic()))
            except BaseException:
                proc.kill()
                raise
        found = next((ln for ln in out.splitlines() if ln.startswith("LOOP_JSON ")), None)
        if proc.returncode or found is None:
            raise RuntimeError(f"load loop exited {proc.returncode}: {out[-800:]}")
        return json.loads(found[len("LOOP_JSON "):])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.grpc_loop", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", type=Path, required=True, help="a Target as JSON, its body a file path")
    ap.add_argument("--concurrency", type=int, required=True)
    ap.add_argument("--warmup", type=float, default=0.0)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--max-requests", type=int, required=True)
    args = ap.parse_args(argv)
    doc = json.loads(args.target.read_text())
    target = Target(**{**doc, "body": Path(doc["body"]).read_bytes()})

    async def go() -> None:  # READY, then wait for the caller's line without blocking the event loop
        print("READY", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    result = asyncio.run(_serve_windows(target, args.concurrency, args.warmup, args.seconds, args.max_requests, go))
    print("LOOP_JSON " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
