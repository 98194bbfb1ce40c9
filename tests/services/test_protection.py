"""Protection mechanisms through real HTTP on a server with injected faults: deadlines, bounded queues, rate limits,
auth, circuit breaker transitions, fallback routing, output sanity, provider fault continuation."""
from __future__ import annotations

import hashlib
import http.client
import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil
import pytest

from tests.conftest import NO_CAPACITY_LIMITS, Server

ADMIN, APP, LIMITED = "admin-secret", "app-key", "slow-client-key"
SERIES = [340.0 + 0.1 * i for i in range(48)]
MONTHLY = {"start": "2000-01-01T00:00:00", "frequency": "MS"}  # the time axis of every forecast body here
SLOW_MS = 3000  # far above every bound asserted below, so the assertions distinguish behaviour, not speed


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def faulty(tiny_registry, tmp_path_factory):
    env = {
        "TRISERVE_RUNNER__FAULTS__ERROR_RATE": json.dumps({"text": 1.0}),  # text primary always fails
        "TRISERVE_RUNNER__FAULTS__NAN_OUTPUT": json.dumps(["forecast"]),  # forecast primary emits NaN
        "TRISERVE_RUNNER__FAULTS__LATENCY_MS": json.dumps({"detection": SLOW_MS}),  # detection primary is slow
        "TRISERVE_RUNNER__FAULTS__PROVIDER_FAULT": "run",  # the 'accelerator' dies on first real run
        "TRISERVE_BREAKER__WINDOW": "4", "TRISERVE_BREAKER__MIN_CALLS": "4", "TRISERVE_BREAKER__OPEN_SECONDS": "3",
        "TRISERVE_BREAKER__HALF_OPEN_PROBES": "1",
        "TRISERVE_ADMISSION__MAX_INFLIGHT_ITEMS": "5",  # a forecast: 4 rows (series + 3 backtest origins)
        "TRISERVE_ADMISSION__MAX_INFLIGHT_REQUESTS": "2",  # below the item limit, so it is what binds first
        "TRISERVE_ACCESS__API_KEYS": json.dumps([
            {"name": "ops", "sha256": sha(ADMIN), "admin": True},
            {"name": "app", "sha256": sha(APP)},
            {"name": "limited", "sha256": sha(LIMITED), "rate_per_s": 0.2}]),
        "TRISERVE_ACCESS__BURST": "3",
        "TRISERVE_OBSERVABILITY__DRIFT_MIN_VALUES": "5", "TRISERVE_OBSERVABILITY__DRIFT_EVERY": "5",
    }
    env.update(NO_CAPACITY_LIMITS)
    with Server(tiny_registry.root, env=env, log_path=tmp_path_factory.mktemp("logs") / "faulty.log") as srv:
        srv.wait_ready()
        yield srv


def scrape(srv) -> str:
    resp = httpx.get(f"{srv.url}/metrics", timeout=30)
    assert resp.status_code == 200
    return resp.text


def post(srv, path, headers=None, **kw):
    return httpx.post(f"{srv.url}{path}", headers=headers or {}, timeout=30, **kw)


def protection(srv) -> dict:
    resp = httpx.get(f"{srv.url}/admin/protection", headers={"X-API-Key": ADMIN}, timeout=10)
    assert resp.status_code == 200
    return resp.json()


def test_admin_endpoints_need_an_admin_key(faulty):
    url = f"{faulty.url}/admin/protection"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"X-API-Key": "wrong"}).json()["error"]["code"] == "unauthorized"
    assert httpx.get(url, headers={"X-API-Key": APP}).status_code == 403
    assert httpx.get(url, headers={"Authorization": f"Bearer {ADMIN}"}).json()["caller"] == "key:ops"


def test_rate_limit_per_key_answers_429_with_retry_after(faulty):
    codes = [post(faulty, "/v1/forecast", {"X-API-Key": LIMITED},
                  json={"values": SERIES, **MONTHLY, "model": "fallback"}).status_code
             for _ in range(5)]
    assert codes[:3] == [200, 200, 200] and codes[3:] == [429, 429]
    resp = post(faulty, "/v1/forecast", {"X-API-Key": LIMITED}, json={"values": SERIES, **MONTHLY})
    assert resp.json()["error"]["code"] == "rate_limited" and int(resp.headers["retry-after"]) >= 1
    # other clients are unaffected
    assert post(faulty, "/v1/forecast", {"X-API-Key": APP},
                json={"values": SERIES, **MONTHLY, "model": "fallback"}).status_code == 200


def test_deployment_capacity_limit_answers_429_over_capacity_for_that_deployment_only(tiny_registry, tmp_path):
    """access.deployment_rate_per_s (written by scripts/bench/knee.py) through a real server: all clients share it."""
    env = {"TRISERVE_ACCESS__DEPLOYMENT_RATE_PER_S": json.dumps({"forecast": 0.5}),
           "TRISERVE_ACCESS__DEPLOYMENT_BURST_S": "2"}
    srv = Server(tiny_registry.root, env=env, log_path=tmp_path / "capacity.log")
    body = {"values": [float(i % 12) for i in range(60)], **MONTHLY, "horizon": 3}
    try:
        srv.wait_ready()
        first = post(srv, "/v1/forecast", json=body)
        second = post(srv, "/v1/forecast", json=body)
        assert first.status_code == 200, first.text
        assert second.status_code == 429, second.text
        err = second.json()["error"]
        assert err["code"] == "over_capacity" and err["details"]["scope"] == "deployment"
        assert int(second.headers["Retry-After"]) >= 1
        assert post(srv, "/v1/classify", json={"texts": ["hello"]}).status_code == 200  # others unaffected
    finally:
        srv.stop()


def test_breaker_opens_routes_to_fallback_then_probes(faulty):
    reasons = []
    for _ in range(6):
        body = post(faulty, "/v1/classify", json={"texts": ["hello there"]}).json()
        assert body["degraded"] is True and body["model"]["name"] == "minilm-intent-int8"
        reasons.append(body["degraded_reason"])
    assert reasons[:4] == ["primary_failed"] * 4 and reasons[4:] == ["circuit_open"] * 2
    assert protection(faulty)["breakers"]["text"]["state"] == "open"
    explicit = post(faulty, "/v1/classify", json={"texts": ["hello"], "model": "primary"})  # refused fast, not tried
    assert explicit.status_code == 503 and explicit.json()["error"]["code"] == "circuit_open"
    assert 1 <= int(explicit.headers["retry-after"]) <= 3
    time.sleep(3.2)  # open_seconds: the next auto request is a half-open probe; it fails and reopens the breaker
    probe = post(faulty, "/v1/classify", json={"texts": ["hello"]}).json()
    assert probe["degraded_reason"] == "primary_failed"
    assert protection(faulty)["breakers"]["text"]["state"] == "open"
    metrics = scrape(faulty)
    assert 'triserve_degraded_total{deployment="text",reason="circuit_open"}' in metrics
    assert 'triserve_breaker_transitions_total{slot="text",to="half_open"}' in metrics


def test_nan_output_never_reaches_the_client(faulty):
    auto = post(faulty, "/v1/forecast", json={"values": SERIES, **MONTHLY}).json()
    assert auto["degraded_reason"] == "invalid_output" and auto["model"]["name"] == "forecast-theta"
    assert all(isinstance(p["point"], float) for p in auto["forecast"])
    primary = post(faulty, "/v1/forecast", json={"values": SERIES, **MONTHLY, "model": "primary"})
    assert primary.status_code == 503 and primary.json()["error"]["code"] == "invalid_model_output"


def test_deadline_is_enforced_and_answers_504_fast(faulty, tiny_png_b64):
    started = time.monotonic()
    resp = post(faulty, "/v1/detect", {"X-Request-Timeout-Ms": "300"},
                json={"images": [{"data": tiny_png_b64}], "model": "primary"})
    elapsed = time.monotonic() - started
    assert resp.status_code == 504 and resp.json()["error"]["code"] == "deadline_exceeded"
    assert elapsed < SLOW_MS / 1000 / 2  # answered at the deadline, not after the slow model
    assert post(faulty, "/v1/detect", {"X-Request-Timeout-Ms": "abc"},
                json={"images": [{"data": tiny_png_b64}]}).json()["error"]["code"] == "invalid_timeout"
    ok = post(faulty, "/v1/detect", {"X-Request-Timeout-Ms": "15000"},
              json={"images": [{"data": tiny_png_b64}], "model": "primary"})
    assert ok.status_code == 200


def test_full_queue_rejects_at_once_or_goes_to_fallback(faulty, tiny_png_b64):
    time.sleep(SLOW_MS / 1000 + 0.5)  # let the slow requests of the previous test drain
    body = {"images": [{"data": tiny_png_b64}] * 3, "model": "primary"}  # two in flight exceed the 5 items
    with ThreadPoolExecutor(4) as pool:
        started = time.monotonic()
        results = list(pool.map(lambda _: (post(faulty, "/v1/detect", json=body), time.monotonic() - started),
                                range(4)))
    rejected = [(r, t) for r, t in results if r.status_code == 503]
    assert rejected, [r.status_code for r, _ in results]
    assert all(r.json()["error"]["code"] == "overloaded" and r.headers["retry-after"] for r, _ in rejected)
    assert min(t for _, t in rejected) < SLOW_MS / 1000 / 2  # rejected at once, not after queueing
    def auto_request(i: int):
        # 20 ms apart: four in the same instant could meet the anonymous bucket (access.burst 3, refilled at 200/s)
        # and one be a 429 (a fresh clone's run, once in five); the queue under test still holds the first ones
        time.sleep(0.02 * i)
        return post(faulty, "/v1/detect", json={**body, "model": "auto"})

    with ThreadPoolExecutor(4) as pool:
        auto = list(pool.map(auto_request, range(4)))
    served = [r.json() for r in auto if r.status_code == 200]
    assert all(r.status_code in (200, 503) for r in auto), [(r.status_code, r.text[:80]) for r in auto]
    assert "overload" in {b["degraded_reason"] for b in served}  # the primary's full queue spilled to the fallback


def test_requests_beyond_the_worker_limit_are_refused_before_the_body_is_read(faulty, tiny_png_b64):
    time.sleep(SLOW_MS / 1000 + 0.5)
    body = {"images": [{"data": tiny_png_b64}], "model": "primary"}

    def staggered(i: int):
        # 20 ms apart: the anonymous bucket (access.burst 3, refilled at 200/s) lets each through, so what refuses
        # them is the in-flight limit under test, never the rate limit of requests arriving in the same instant
        time.sleep(0.02 * i)
        return post(faulty, "/v1/detect", json=body), time.monotonic() - started

    with ThreadPoolExecutor(7) as pool:
        started = time.monotonic()
        results = list(pool.map(staggered, range(7)))
    early = [(r, t) for r, t in results if r.status_code == 503 and r.json()["error"]["code"] == "overloaded"
             and r.json()["error"]["details"] == {"limit": 2}]
    assert len(early) >= 3, [(r.status_code, r.text[:80]) for r, _ in results]
    assert max(t for _, t in early) < SLOW_MS / 1000 / 2 and all(r.headers["retry-after"] for r, _ in early)


def test_provider_fault_moves_models_to_cpu_and_keeps_serving(faulty):
    status = httpx.get(f"{faulty.url}/v1/models").json()
    moved = {slot: m["provider_fallback"] for slot, m in status["models"].items() if m["provider_fallback"]}
    assert moved and all(reason.startswith("run: ProviderFault") for reason in moved.values())
    providers = {slot: m["provider"] for slot, m in status["models"].items()}
    assert set(providers.values()) == {"CPUExecutionProvider", "numpy"}  # the Theta fallback has no provider
    assert {slot for slot, p in providers.items() if p == "numpy"} == {"forecast_fallback"}


def test_shifted_inputs_raise_the_drift_gauge(faulty):
    shifted = [1.0 + 5 * (-1) ** i for i in range(48)]  # swings 5x its level: far from the training series
    for _ in range(6):
        assert post(faulty, "/v1/forecast", json={"values": shifted, "start": "2000-01-01T00:00:00", "frequency": "MS",
                                                  "model": "fallback"}).status_code == 200
    lines = [line for line in scrape(faulty).splitlines()
             if line.startswith("triserve_drift_psi") and 'model="forecast-theta"' in line
             and 'signal="relative_spread"' in line]
    assert lines and float(lines[0].split()[-1]) > 0.2, lines


def _worker_of(srv, conn: http.client.HTTPConnection) -> int | None:
    """The API worker (pid) that accepted this keep-alive connection."""
    mine = conn.sock.getsockname()[1]
    for pid in srv.entry_pids():
        for c in psutil.Process(pid).net_connections(kind="tcp"):
            if c.laddr and c.raddr and c.laddr.port == srv.port and c.raddr.port == mine:
                return pid
    return None


def _connections_on_two_workers(srv, source: str = "127.0.0.1") -> dict[int, http.client.HTTPConnection]:
    """One keep-alive connection on each of the server's two API workers (the kernel spreads new connections)."""
    conns: dict[int, http.client.HTTPConnection] = {}
    for _ in range(40):
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30, source_address=(source, 0))
        conn.request("GET", "/livez")
        conn.getresponse().read()
        pid = _worker_of(srv, conn)
        if pid is not None and pid not in conns:
            conns[pid] = conn
        else:
            conn.close()
        if len(conns) == 2:
            return conns
    pytest.fail(f"40 connections never reached both API workers: {sorted(conns)}")


def _forecast(conn: http.client.HTTPConnection, headers: dict[str, str]) -> tuple[int, dict]:
    conn.request("POST", "/v1/forecast", body=json.dumps({"values": SERIES, **MONTHLY}),
                 headers={"Content-Type": "application/json", **headers})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def test_two_api_workers_share_one_budget_and_proxied_clients_are_keyed_by_forwarded_address(tiny_registry,
                                                                                               tmp_path):
    """gateway.workers=2 behind a trusted proxy (127.0.0.1): the forwarded client's burst is spent once across both
    workers (not once per worker, as with access.limits_scope=worker: 12 of 24 accepted), another forwarded client
    has its own, and an untrusted peer (127.0.0.2) that forwards a header is limited as itself."""
    burst = 6
    env = {"TRISERVE_GATEWAY__WORKERS": "2", "TRISERVE_ACCESS__TRUSTED_PROXIES": json.dumps(["127.0.0.1/32"]),
           "TRISERVE_ACCESS__RATE_PER_S": "0.2", "TRISERVE_ACCESS__BURST": str(burst), **NO_CAPACITY_LIMITS}
    with Server(tiny_registry.root, env=env, log_path=tmp_path / "two-workers.log") as srv:
        srv.wait_ready()
        assert len(srv.entry_pids()) == 2
        conns = _connections_on_two_workers(srv)
        pids = list(conns)
        answers: dict[int, list[int]] = {pid: [] for pid in pids}
        started = time.monotonic()
        for i in range(4 * burst):  # alternate the workers, as fast as they answer
            pid = pids[i % 2]
            status, body = _forecast(conns[pid], {"X-Forwarded-For": "198.51.100.7"})
            answers[pid].append(status)
            if status == 429:
                assert body["error"]["details"]["client"] == "addr:198.51.100.7"
        refilled = int((time.monotonic() - started) * 0.2) + 1
        ok = sum(codes.count(200) for codes in answers.values())
        assert set(answers[pids[0]] + answers[pids[1]]) == {200, 429}
        # once for the server: the burst (+ what refilled meanwhile), not a burst per worker (2 x 6 = 12)
        assert burst <= ok <= burst + refilled < 2 * burst, answers
        assert all(200 in codes and 429 in codes for codes in answers.values()), answers  # both workers took part
        # another client behind the same proxy has a budget of its own
        assert _forecast(conns[pids[1]], {"X-Forwarded-For": "198.51.100.8"})[0] == 200
        # from a peer that is not a trusted proxy the header names nobody: the peer is limited as itself
        untrusted = _connections_on_two_workers(srv, source="127.0.0.2")
        codes, clients = [], set()
        for i in range(2 * burst):
            status, body = _forecast(list(untrusted.values())[i % 2], {"X-Forwarded-For": "198.51.100.9"})
            codes.append(status)
            if status == 429:
                clients.add(body["error"]["details"]["client"])
        assert burst <= codes.count(200) < 2 * burst and clients == {"addr:127.0.0.2"}, codes
        for conn in [*conns.values(), *untrusted.values()]:
            conn.close()
