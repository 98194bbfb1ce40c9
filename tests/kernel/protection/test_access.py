import hashlib

import pytest
from starlette.requests import Request

from triserve.configs.access import AccessSettings, ApiKey
from triserve.kernel.errors import ApiError
from triserve.kernel.protection.access import AccessControl
from triserve.kernel.protection.buckets import LocalBuckets, SharedBuckets


def request(headers: dict[str, str] | None = None, host: str = "10.0.0.1") -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "headers": raw, "client": (host, 1234), "method": "POST", "path": "/"})


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


CFG = AccessSettings(api_keys=[ApiKey(name="ops", sha256=sha("admin-secret"), admin=True),
                               ApiKey(name="app", sha256=sha("app-key"), rate_per_s=1.0)],
                     rate_per_s=100, burst=2, max_clients=3)


def test_token_bucket_refills_at_rate():
    b = LocalBuckets(10)
    assert b.take("k", 2.0, 2, 0.0) == 0 and b.take("k", 2.0, 2, 0.0) == 0
    assert b.take("k", 2.0, 2, 0.0) == pytest.approx(0.5)
    assert b.take("k", 2.0, 2, 0.5) == 0


def test_admin_needs_an_admin_key():
    ac = AccessControl(CFG)
    with pytest.raises(ApiError) as e:
        ac.identify(request(), admin=True)
    assert e.value.status == 401
    with pytest.raises(ApiError) as e:
        ac.identify(request({"X-API-Key": "app-key"}), admin=True)
    assert e.value.status == 403
    assert ac.identify(request({"Authorization": "Bearer admin-secret"}), admin=True).admin


def test_unknown_key_is_401_and_anonymous_is_limited_per_address():
    ac = AccessControl(CFG)
    with pytest.raises(ApiError) as e:
        ac.identify(request({"X-API-Key": "nope"}))
    assert e.value.status == 401
    assert ac.identify(request(host="1.2.3.4")).id == "addr:1.2.3.4"
    strict = AccessControl(CFG.model_copy(update={"require_key_for_inference": True}))
    with pytest.raises(ApiError):
        strict.identify(request())


def test_rate_limit_gives_429_with_retry_after_and_buckets_are_bounded():
    t = [0.0]
    ac = AccessControl(CFG, clock=lambda: t[0])
    client = ac.identify(request({"X-API-Key": "app-key"}))
    ac.limit(client, "text")
    ac.limit(client, "text")
    with pytest.raises(ApiError) as e:
        ac.limit(client, "text")
    assert e.value.status == 429 and e.value.headers["Retry-After"] == "1"
    t[0] = 1.0
    ac.limit(client, "text")
    for i in range(10):
        ac.limit(ac.identify(request(host=f"9.9.9.{i}")), "text")
    assert len(ac.buckets) == 3


def test_per_worker_scope_splits_the_deployment_capacity_over_the_workers():
    t = [0.0]
    cfg = CFG.model_copy(update={"deployment_rate_per_s": {"intent": 20.0}, "deployment_burst_s": 0.5,
                                 "limits_scope": "worker"})
    ac = AccessControl(cfg, clock=lambda: t[0], workers=2)  # this worker's share: 10/s, bucket of 5
    for i in range(5):  # five different clients, each well under its own limit
        ac.limit(ac.identify(request(host=f"10.1.0.{i}")), "text")
        ac.capacity("intent")
    with pytest.raises(ApiError) as e:
        ac.capacity("intent")
    assert (e.value.status, e.value.code, e.value.details["scope"]) == (429, "over_capacity", "deployment")
    ac.capacity("intent-2")  # other deployments (of the same family too) are not limited
    t[0] = 0.1  # one more token at 10/s
    ac.capacity("intent")


def test_capacity_limits_switch_off_keeps_client_limits():
    cfg = CFG.model_copy(update={"deployment_rate_per_s": {"intent": 0.001}, "capacity_limits": False})
    ac = AccessControl(cfg)
    for i in range(5):
        ac.limit(ac.identify(request(host=f"10.2.0.{i}")), "text")
        ac.capacity("intent")
    assert ac.capacity_rates == {}


def test_server_scope_keeps_one_capacity_bucket_for_all_workers(tmp_path):
    t = [0.0]
    cfg = CFG.model_copy(update={"deployment_rate_per_s": {"intent": 20.0}, "deployment_burst_s": 0.5})
    table = tmp_path / "limits.bin"
    # two API workers of one server: each opens the server's table
    workers = [AccessControl(cfg, clock=lambda: t[0], workers=2, store=SharedBuckets(table, cfg.max_clients))
               for _ in range(2)]
    for i in range(10):  # the whole instance's bucket (20/s x 0.5 s), whichever worker takes the request
        workers[i % 2].capacity("intent")
    for ac in workers:
        with pytest.raises(ApiError) as e:
            ac.capacity("intent")
        assert e.value.code == "over_capacity"
    client = workers[0].identify(request({"X-API-Key": "app-key"}))  # 1/s, burst 2: once for both workers
    workers[0].limit(client, "text")
    workers[1].limit(client, "text")
    with pytest.raises(ApiError) as e:
        workers[0].limit(client, "text")
    assert e.value.code == "rate_limited"
    with pytest.raises(ApiError):
        workers[1].limit(client, "text")


def test_forwarded_address_from_a_trusted_proxy_keys_the_client_and_its_canary_side():
    cfg = CFG.model_copy(update={"trusted_proxies": ["10.0.0.0/8"]})
    ac = AccessControl(cfg)
    proxied = ac.identify(request({"X-Forwarded-For": "198.51.100.7, 10.0.0.9"}, host="10.0.0.2"))
    assert proxied.id == "addr:198.51.100.7" and proxied.canary_key == "addr:198.51.100.7"  # sticky
    forged = ac.identify(request({"X-Forwarded-For": "198.51.100.7"}, host="203.0.113.5"))  # not a trusted peer
    assert forged.id == "addr:203.0.113.5"
    # an address that is not forwarded may be everybody behind one NAT: each request is drawn on its own
    assert forged.sticky_key == "" and forged.canary_key != forged.canary_key
    keyed = ac.identify(request({"X-API-Key": "app-key", "X-Forwarded-For": "198.51.100.7"}, host="10.0.0.2"))
    assert keyed.id == keyed.canary_key == "key:app"
    peers = AccessControl(cfg.model_copy(update={"peers_are_clients": True}))
    assert peers.identify(request(host="203.0.113.5")).canary_key == "addr:203.0.113.5"
    rfc = AccessControl(cfg.model_copy(update={"forwarded_header": "forwarded"}))
    assert rfc.identify(request({"Forwarded": 'for="[2001:db8::7]:4711";proto=https', "X-Forwarded-For": "1.1.1.1"},
                                host="10.0.0.2")).id == "addr:2001:db8::7"


def test_a_forwarded_client_has_a_bucket_of_its_own():
    t = [0.0]
    ac = AccessControl(CFG.model_copy(update={"trusted_proxies": ["127.0.0.1"]}), clock=lambda: t[0])
    for who in ("198.51.100.1", "198.51.100.2"):  # both behind the one proxy: a burst of 2 each
        client = ac.identify(request({"X-Forwarded-For": who}, host="127.0.0.1"))
        ac.limit(client, "text")
        ac.limit(client, "text")
        with pytest.raises(ApiError):
            ac.limit(client, "text")
