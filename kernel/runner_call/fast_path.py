"""The gateway's side of the runner's fast path: model calls over the runner's own UNIX socket, not BentoML's stack.

Why: a runner call through BentoML's service stack (uvicorn, its ASGI middlewares, the API endpoint's serde,
signature binding and IO model) cost the runner 3.4-3.6 ms of CPU on this host for four forecast windows, ~0.85 ms of
it in ONNX Runtime, where a bare aiohttp server answering the same pickled items costs 0.25-0.3 ms; over this path
the runner spends 0.6-0.8 ms less per call (docs/performance.md, "The runner's fast path"). That fixed cost is paid
by every call: at concurrency 1 by every request, and by every forecast over gRPC (whose calls do not coalesce).
The runner's answer is the same pickled list either way (runners/wire.py).

Used only where BentoML itself reaches the runner over a UNIX socket (one `bentoml serve` on one host: the runner is a
dependency of the gateway): a runner tier reached over TCP (split tiers behind a load balancer, another node) keeps
BentoML's path, so that the balancer still sees every call. The socket's path comes from the runner itself (its
`fast_path` API, asked through BentoML once), so nothing is guessed from file names. The path stays the same when the
runner worker is started again (runners/fast_path.py), so a call that fails in transport keeps it: while the runner
is away its calls are refused at once and fail as a BentoML call would (runner_client's retry and fallback rules
apply unchanged), and once it is back they reach it again.
"""
from __future__ import annotations

import pickle
import time
from typing import Any

import aiohttp
from opentelemetry import propagate

PICKLE = "application/vnd.bentoml+pickle"
INFER_PATH = "/infer"
RECHECK_S = 10.0  # how long a runner without a fast path is believed before it is asked again
# Calls whose tensors are larger go BentoML's way: measured paired (docs/bench/ab_fast_path.md), a 640 detection
# image (1.2 MB per item) cost the gateway 2.2 ms more CPU per request over the fast path (its pickle carries the
# tensors in-band and aiohttp reads the body in 64 KiB pieces), while text and forecasting calls (kilobytes) gained
# 1.3 ms of hop; BentoML's pickle sends large arrays as out-of-band buffers.
MAX_TENSOR_BYTES = 256 * 1024


class FastPathError(RuntimeError):
    """The runner answered the fast path with an error status (its message is the runner's)."""


class FastPath:
    """One per API worker: `await fast.send(items)` -> the runner's results, or None when there is no fast path (the
    caller then uses BentoML's). `runner` is BentoML's RemoteProxy to the runner tier."""

    def __init__(self, runner: Any, timeout_s: float, traced: bool = False):
        """traced: send the current trace context (W3C headers) so the runner's span joins the request's trace."""
        self._runner = runner
        self._traced = traced
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._path: str | None = None
        self._asked = float("-inf")  # monotonic time the runner was last asked for its path
        self.enabled = _over_unix_socket(runner)

    async def path(self) -> str | None:
        """The runner's fast-path socket, asked for at most every RECHECK_S while it has none."""
        if not self.enabled:
            return None
        if self._path is None and time.monotonic() - self._asked >= RECHECK_S:
            self._asked = time.monotonic()
            try:
                answer = await self._runner.to_async.fast_path()
            except Exception:  # noqa: BLE001 - an unreachable runner: the BentoML call says so in its own words
                return None
            self._path = answer.get("path") if isinstance(answer, dict) else None
        return self._path

    async def send(self, items: list[dict]) -> list[dict] | None:
        if tensor_bytes(items) > MAX_TENSOR_BYTES:
            return None
        path = await self.path()
        if path is None:
            return None
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=path), timeout=self._timeout)
        headers = {"Content-Type": PICKLE}
        if self._traced:
            propagate.inject(headers)
        async with self._session.post(f"http://runner{INFER_PATH}", data=pickle.dumps(items, protocol=5),
                                      headers=headers) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise FastPathError(f"runner answered {resp.status}: {body[:500].decode(errors='replace')}")
        results: list[dict] = pickle.loads(body)  # our own runner's answer, on a socket only it binds
        return results

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def tensor_bytes(items: list[dict]) -> int:
    """The size of the items' tensors (their "x"; a token-id list counts as nothing: they are small)."""
    return sum(getattr(it.get("x"), "nbytes", 0) for it in items)


def _over_unix_socket(runner: Any) -> bool:
    """Whether BentoML reaches this runner over a UNIX socket (same serve, same host): its client's URL is then a file
    URI (BentoML's path_to_uri). A LocalRunner (placement='local') or a TCP URL: no fast path."""
    url = str(getattr(getattr(runner, "to_async", None), "url", "") or "")
    return url.startswith("file:")
