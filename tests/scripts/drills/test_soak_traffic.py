"""The soak's sender (scripts/drills/soak_traffic.py): a REST request whose connection breaks before any answer is
sent once more, as the product's client does; the row keeps the first failure. A real aiohttp server on 127.0.0.1
that drops the first connection without answering."""
from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp import web

from scripts.drills.soak_traffic import Clients, send


async def _serve(answers: list[str]) -> tuple[web.AppRunner, str]:
    async def classify(request: web.Request) -> web.StreamResponse:
        await request.read()
        answers.append("dropped" if not answers else "answered")
        if answers[-1] == "dropped":
            assert request.transport is not None
            request.transport.close()  # the worker dies mid-request: no status line ever
            return web.Response()
        return web.json_response({"degraded": False, "model": {"name": "text"}, "timings": {"total_ms": 1.0}})

    app = web.Application()
    app.router.add_post("/v1/classify", classify)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def test_a_broken_rest_connection_is_sent_once_more_and_the_row_says_so():
    async def run() -> tuple[list[str], object]:
        answers: list[str] = []
        runner, url = await _serve(answers)
        session = aiohttp.ClientSession()
        try:
            clients = Clients(url, "127.0.0.1:1", session, None, None, None)  # only REST is used here
            return answers, await send(clients, "rest", "text", "text", time.monotonic(), timeout=10)
        finally:
            await session.close()
            await runner.cleanup()

    answers, row = asyncio.run(run())
    assert answers == ["dropped", "answered"]
    assert row.status == 200 and row.retried == "ServerDisconnectedError", row
