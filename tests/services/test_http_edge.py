"""RequestContextMiddleware: every task request counts as on its way to a batcher until it submits or ends."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx

from kernel.protection import queue_control
from kernel.runner_call.batcher import approaching
from services.http_edge import RequestContextMiddleware


def _app(seen: list[int], submit: bool, status: int = 200):
    """An ASGI app standing in for a route: notes the text count, optionally 'submits', answers `status`."""

    async def app(scope, receive, send):
        await receive()
        seen.append(approaching("text").count)
        if submit:
            scope["state"]["batch_arrival"]()
            seen.append(approaching("text").count)
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})
    return app


class _Log:
    """RequestLog's interface: keeps the access-log records."""
    payloads = None
    cfg = SimpleNamespace(payload_max_bytes=0, payload_sample_rate=0.0)

    def __init__(self):
        self.records: list[dict] = []

    def request(self, record: dict) -> None:
        self.records.append(record)


def _send(app, path: str, front_door: bool = False, log: _Log | None = None) -> httpx.Response:
    async def main():
        transport = httpx.ASGITransport(app=RequestContextMiddleware(
            app, max_body_bytes=1024, family_by_path={"/v1/classify": "text"}, front_door=front_door,
            request_log=log))  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.post(path, json={"texts": ["hi"]})
    return asyncio.run(main())


def _post(app, path: str) -> int:
    return _send(app, path).status_code


def test_a_request_counts_until_it_reaches_its_batcher():
    seen: list[int] = []
    assert _post(_app(seen, submit=True), "/v1/classify") == 200
    assert seen == [1, 0]
    assert approaching("text").count == 0


def test_a_request_that_never_submits_stops_counting_when_it_ends():
    seen: list[int] = []
    assert _post(_app(seen, submit=False, status=422), "/v1/classify") == 422
    assert seen == [1]
    assert approaching("text").count == 0  # otherwise every later batch would wait its full cap


def test_requests_outside_the_task_routes_do_not_count():
    seen: list[int] = []
    assert _post(_app(seen, submit=False), "/v1/models") == 200
    assert seen == [0]


def test_front_door_refuses_a_full_task_before_the_route_runs(monkeypatch):
    monkeypatch.setattr(queue_control, "shedding", lambda task: task == "text")
    seen: list[int] = []
    log = _Log()
    answer = _send(_app(seen, submit=True), "/v1/classify", front_door=True, log=log)
    assert answer.status_code == 503 and seen == []  # the route (parsing, preprocessing) never ran
    assert [(r["status"], r["error_code"], r["task"]) for r in log.records] == [(503, "overloaded", "text")]
    error = answer.json()["error"]
    assert error["code"] == "overloaded" and error["details"] == {"reason": "standing_queue"}
    assert answer.headers["retry-after"] == "1"
    assert _send(_app(seen, submit=True), "/v1/classify").status_code == 200  # front door off: admitted
