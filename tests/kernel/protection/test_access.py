import hashlib

import pytest
from starlette.requests import Request

from configs.settings import AccessSettings, ApiKey
from kernel.errors import ApiError
from kernel.protection.access import AccessControl, TokenBucket


def request(headers: dict[str, str] | None = None, host: str = "10.0.0.1") -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "headers": raw, "client": (host, 1234), "method": "POST", "path": "/"})


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


CFG = AccessSettings(api_keys=[ApiKey(name="ops", sha256=sha("admin-secret"), admin=True),
                               ApiKey(name="app", sha256=sha("app-key"), rate_per_s=1.0)],
                     rate_per_s=100, burst=2, max_clients=3)


def test_token_bucket_refills_at_rate():
    b = TokenBucket(rate=2.0, burst=2, now=0.0)
    assert b.take(0.0) == 0 and b.take(0.0) == 0
    assert b.take(0.0) == pytest.approx(0.5)
    assert b.take(0.5) == 0


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


def test_deployment_capacity_limits_all_clients_together_and_is_split_over_workers():
    t = [0.0]
    cfg = CFG.model_copy(update={"deployment_rate_per_s": {"intent": 20.0}, "deployment_burst_s": 0.5})
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
    assert ac.capacity_buckets == {}
