"""BentoML's `traffic.timeout`, without a timer left behind by every request.

Why: BentoML's TimeoutMiddleware (bentoml._internal.server.http.traffic) arms `loop.call_later(timeout, ...)` for
each request and never cancels it, and runs the app in a Task of its own. With the gateway's 60 s timeout every
request leaves a TimerHandle and a Future in the event loop's heap for a minute (200 requests: 200 live timers,
tests/services/test_bentoml_timeout.py), ~30,000 at 500 req/s, each a heap push and a no-op callback. Found while
looking for what a burst leaves in the API worker (+23-24 MB after a burst of 4,000 requests at concurrency 400):
these timers are not it, that growth is the same with this class (docs/performance.md, "what a burst leaves behind
in the API worker").

Same behaviour as BentoML's: a request that has not started its answer within the timeout is cancelled and answered
504 `{"error": ...}`; once the answer has started, the timeout no longer applies (a streamed answer may take longer).
It runs in the request's own task under `asyncio.timeout`, whose timer is cancelled when the request ends.

`install()` replaces the class BentoML's app factory imports when it builds the middleware stack, so it must run
when the service module is imported (services/gateway.py calls it; the runner's workers import that module too).
"""
from __future__ import annotations

import asyncio

from bentoml._internal.server.http import traffic
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class RequestTimeout:
    """BentoML's TimeoutMiddleware contract (`timeout` seconds until the answer starts), with the timer cancelled."""

    def __init__(self, app: ASGIApp, timeout: float) -> None:
        self.app = app
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        window = asyncio.timeout(self.timeout)

        async def send_started(message: Message) -> None:
            if window.when() is not None:
                window.reschedule(None)  # the answer has begun: no timeout from here on (as BentoML's)
            await send(message)

        try:
            async with window:
                await self.app(scope, receive, send_started)
        except TimeoutError:
            if not window.expired():  # the app's own TimeoutError, not this window's: it propagates, as BentoML's
                raise
            await JSONResponse({"error": f"Not able to process the request in {self.timeout} seconds"},
                               status_code=504)(scope, receive, send)


def install() -> None:
    """Before BentoML builds its app: its factory then wraps the service in RequestTimeout."""
    traffic.TimeoutMiddleware = RequestTimeout  # type: ignore[misc,assignment]  # BentoML has no hook for it
