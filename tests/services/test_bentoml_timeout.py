"""services/bentoml_timeout.py: BentoML's traffic.timeout contract (504 before the answer starts, none after), with no
timer left in the event loop by a request that ended, and installed where BentoML's app factory looks it up."""
from __future__ import annotations

import asyncio
import json

import pytest

from triserve.services.bentoml_timeout import RequestTimeout, install


def _live_timers(loop: asyncio.AbstractEventLoop) -> int:
    return sum(not handle.cancelled() for handle in loop._scheduled)  # type: ignore[attr-defined]


async def _call(app, timeout: float) -> tuple[list[dict], RequestTimeout]:
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    middleware = RequestTimeout(app, timeout)
    await middleware({"type": "http", "method": "POST", "path": "/v1/classify", "headers": []}, receive, send)
    return sent, middleware


async def answer(scope, receive, send, delay_before: float = 0.0, delay_after: float = 0.0):
    await asyncio.sleep(delay_before)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await asyncio.sleep(delay_after)
    await send({"type": "http.response.body", "body": b"ok"})


def test_a_request_that_ends_leaves_no_timer_behind():
    async def go():
        loop = asyncio.get_running_loop()
        before = _live_timers(loop)
        for _ in range(200):
            sent, _ = await _call(answer, timeout=60)
            assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
        return _live_timers(loop) - before

    assert asyncio.run(go()) == 0  # BentoML's TimeoutMiddleware leaves one 60 s timer per request: 200 here


def test_no_answer_within_the_timeout_is_a_504_and_the_app_is_cancelled():
    cancelled = []

    async def slow(scope, receive, send):
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        await answer(scope, receive, send)

    sent, _ = asyncio.run(_call(slow, timeout=0.05))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 504
    assert json.loads(sent[1]["body"]) == {"error": "Not able to process the request in 0.05 seconds"}
    assert cancelled == [True]


def test_an_answer_that_has_started_may_take_longer_than_the_timeout():
    async def streamed(scope, receive, send):
        await answer(scope, receive, send, delay_after=0.15)

    sent, _ = asyncio.run(_call(streamed, timeout=0.05))
    assert [m.get("status") for m in sent] == [200, None] and sent[1]["body"] == b"ok"


def test_the_apps_own_timeout_error_propagates_instead_of_a_timeout_answer():
    async def fails(scope, receive, send):
        raise TimeoutError("the app's own")

    with pytest.raises(TimeoutError, match="the app's own"):
        asyncio.run(_call(fails, timeout=60))


def test_lifespan_and_other_scopes_pass_through_untimed():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["type"])

    async def go():
        await RequestTimeout(app, 0.01)({"type": "lifespan"}, None, None)

    asyncio.run(go())
    assert seen == ["lifespan"]


def test_installed_where_bentomls_app_factory_builds_its_middlewares():
    from bentoml._internal.server.base_app import BaseAppFactory
    from bentoml._internal.server.http import traffic

    install()
    assert traffic.TimeoutMiddleware is RequestTimeout

    class Factory(BaseAppFactory):
        name = "t"

        def __init__(self):
            super().__init__(timeout=60)

    assert [m.cls for m in Factory().middlewares] == [RequestTimeout]
