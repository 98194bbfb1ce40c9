"""RequestContextMiddleware: every task request counts as on its way to a batcher until it submits or ends; the
access decision (key, rate limit) of a task request is taken once, before its body is read."""
from __future__ import annotations

import asyncio
import hashlib
from types import SimpleNamespace

import httpx
from starlette.requests import Request

from triserve.configs.access import AccessSettings, ApiKey
from triserve.kernel.protection import queue_control
from triserve.kernel.protection.access import AccessControl
from triserve.kernel.runner_call.batcher import approaching
from triserve.services.http_edge import ADMITTED, RequestContextMiddleware
from triserve.services.http_errors import error_response


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


def _send(app, path: str, front_door: bool = False, log: _Log | None = None, access: AccessControl | None = None,
          headers: dict[str, str] | None = None, times: int = 1) -> httpx.Response:
    """`times` requests in a row through one edge; the last one's answer."""
    async def main():
        transport = httpx.ASGITransport(app=RequestContextMiddleware(
            app, max_body_bytes=1024, family_by_path={"/v1/classify": "text"}, front_door=front_door,
            request_log=log, access=None if access is None else lambda: access))  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for _ in range(times):
                answer = await client.post(path, json={"texts": ["hi"]}, headers=headers)
            return answer
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


KEY = "edge-key"
ACCESS = AccessSettings(api_keys=[ApiKey(name="edge", sha256=hashlib.sha256(KEY.encode()).hexdigest(), burst=3,
                                         rate_per_s=0.001)], require_key_for_inference=True)


def _reading_app(reads: list[str], admitted: list):
    """A route that reads its body (noting it) and the client the edge admitted."""

    async def app(scope, receive, send):
        reads.append((await receive())["type"])
        admitted.append(scope["state"].get(ADMITTED))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})
    return app


def test_a_refused_key_is_answered_before_the_body_is_read():
    reads: list[str] = []
    log = _Log()
    for headers in ({}, {"X-API-Key": "wrong"}):
        answer = _send(_reading_app(reads, []), "/v1/classify", access=AccessControl(ACCESS), headers=headers,
                       log=log)
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthorized"
        assert answer.headers["www-authenticate"] == "Bearer"
    assert reads == []  # the route (and with it the body) was never reached
    assert [(r["status"], r["error_code"]) for r in log.records] == [(401, "unauthorized")] * 2


def test_the_bucket_is_charged_once_per_request_and_the_route_gets_the_admitted_client():
    """A key with a burst of 3 (and next to no refill): of 5 requests exactly 3 are admitted, each admitted one
    carries its Client to the route, and the refusals are the error model's answer as the route's guard wrote it."""
    reads: list[str] = []
    admitted: list = []
    control = AccessControl(ACCESS)
    app = _reading_app(reads, admitted)
    codes = [_send(app, "/v1/classify", access=control, headers={"X-API-Key": KEY}).status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    assert [c.id for c in admitted] == ["key:edge"] * 3 and reads == ["http.request"] * 3
    refused = _send(app, "/v1/classify", access=control, headers={"X-API-Key": KEY, "X-Request-ID": "r-1"})
    scope = {"type": "http", "headers": [], "state": {"request_id": "r-1"}}
    wait = refused.json()["error"]["details"]["retry_after_s"]
    expected = error_response(Request(scope), 429, "rate_limited", "rate limit of 0.001 requests/s exceeded",
                              {"client": "key:edge", "scope": "client", "retry_after_s": wait},
                              {"Retry-After": refused.headers["retry-after"]})
    assert refused.status_code == 429 and refused.content == expected.body
    assert dict(refused.headers) == {k.decode(): v.decode() for k, v in expected.raw_headers}


def test_without_access_control_loaded_the_edge_lets_the_route_decide():
    reads: list[str] = []
    admitted: list = []
    assert _send(_reading_app(reads, admitted), "/v1/classify", access=None).status_code == 200
    assert admitted == [None]  # the route's guard admits it (services/gateway_deps.inference_guard)
