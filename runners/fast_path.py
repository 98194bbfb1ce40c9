"""The runner's fast path: its `infer` served on a UNIX socket of its own by aiohttp's low-level server.

Why: BentoML's service stack costs the runner most of a call's fixed CPU beside the model
(kernel/runner_call/fast_path.py says how much, and what this path takes off); the gateway's model calls are the
runner's hot path and need none of it (the gateway has already authenticated, validated and timed the request).
Everything else the runner offers (status, routing, the repository and rollout APIs, readiness, metrics) stays on
BentoML's service.

The socket has one path for the life of the `bentoml serve` (a folder named after this user and the arbiter that
started the runner worker, which is the gateway's arbiter too): a runner worker that dies and is started again by the
arbiter binds the same path, so a gateway keeps its path and is refused at once while the runner is away (its calls
fail over) instead of asking again through BentoML's socket, which the arbiter holds open and nobody answers until the
restart. The folder is this user's alone (0700, checked, never a link), so only this user's processes on this host
can send it pickles, as with BentoML's own runner socket. One listener per runner process: with more than one runner
worker the fast path is off (each gateway worker would pin itself to whichever worker answered first), and BentoML's
socket balances the calls as before.
"""
from __future__ import annotations

import asyncio
import logging
import os
import pickle
import stat
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from opentelemetry import propagate, trace

from triserve.kernel.runner_call.fast_path import INFER_PATH, PICKLE
from triserve.observability.tracing import stage_tracer
from triserve.runners.metrics import FAST_PATH_CALLS

Submit = Callable[[list[dict]], Awaitable[list[dict]]]
log = logging.getLogger("triserve.runner.fast_path")


def default_socket_path() -> Path:
    """<tmp>/triserve-runner-<uid>-<arbiter pid>/infer.sock: the same for every runner worker this arbiter starts."""
    return Path(tempfile.gettempdir()) / f"triserve-runner-{os.getuid()}-{os.getppid()}" / "infer.sock"


def private_folder(folder: Path) -> None:
    """Make `folder` (0700) or accept it only if it is a real folder of this user that nobody else may enter: another
    user's folder (made to catch the pickles) or a link is refused."""
    folder.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise PermissionError(f"{folder} is not a private folder of this user (uid {os.getuid()})")


class FastPathServer:
    """`await server.start()` in the runner's serving event loop; `path` is then the socket's path."""

    def __init__(self, submit: Submit, timeout_s: float, path: Path | None = None, traced: bool = False):
        """traced: open the runner's span of each call ("POST /infer", as BentoML's middleware names it) in the
        caller's trace (the gateway sends its context in the W3C headers), as BentoML's path does with tracing on."""
        self._submit = submit
        self._traced = traced
        self._timeout_s = timeout_s
        self._path = path or default_socket_path()
        self._server: asyncio.base_events.Server | None = None
        self._handler: web.Server | None = None
        self._ok, self._failed = FAST_PATH_CALLS.labels("ok"), FAST_PATH_CALLS.labels("error")
        self.path: str | None = None

    async def start(self) -> str | None:
        """Bind the socket (a dead predecessor's left-over file is replaced); None, logged, where the folder is not
        private (the gateway then uses BentoML's path)."""
        try:
            private_folder(self._path.parent)
        except OSError as exc:
            log.warning("runner fast path off: %s", exc)
            return None
        self._path.unlink(missing_ok=True)
        self._handler = web.Server(self._handle)
        self._server = await asyncio.get_running_loop().create_unix_server(self._handler, str(self._path))
        self.path = str(self._path)
        return self.path

    async def _handle(self, request: web.BaseRequest) -> web.Response:
        if not self._traced:
            return await self._answer(request)
        context = propagate.extract(dict(request.headers))
        with stage_tracer().start_as_current_span(f"{request.method} {request.path}", context=context,
                                                  kind=trace.SpanKind.SERVER,
                                                  attributes={"http.method": request.method,
                                                              "http.target": request.path}) as span:
            response = await self._answer(request)
            span.set_attribute("http.status_code", response.status)
            return response

    async def _answer(self, request: web.BaseRequest) -> web.Response:
        if request.method != "POST" or request.path != INFER_PATH:
            return web.Response(status=404, text=f"only POST {INFER_PATH}")
        if request.content_type != PICKLE:
            return web.Response(status=415, text=f"this endpoint consumes {PICKLE}")
        try:
            # the stream read whole: BaseRequest.read() caps bodies at 1 MiB, below one letterboxed 640 image; what
            # comes here is the gateway's batches, as large as their slot's max_batch_size makes them
            items = pickle.loads(await request.content.read())  # a socket only this user's processes can open
            results = await asyncio.wait_for(self._submit(items), self._timeout_s)
        except Exception as exc:  # noqa: BLE001 - the caller maps any runner failure to 503, as for BentoML's path
            self._failed.inc()
            return web.Response(status=500, text=f"{type(exc).__name__}: {exc}")
        self._ok.inc()
        return web.Response(body=pickle.dumps(results, protocol=5), content_type=PICKLE)

    async def stop(self) -> None:
        """No new connections, the open ones closed (a gateway's kept-alive connection fails over, as when the
        process dies), the socket file removed."""
        if self._server is not None:
            self._server.close()
            if self._handler is not None:
                await self._handler.shutdown(0.2)  # a call in flight gets this long to finish
            await self._server.wait_closed()
            self._server = self._handler = None
        if self.path is not None:
            self._path.unlink(missing_ok=True)
            try:
                self._path.parent.rmdir()  # when empty
            except OSError:
                pass
        self.path = None
