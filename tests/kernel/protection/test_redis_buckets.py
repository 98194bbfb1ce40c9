"""access.limits_scope=cluster: token buckets in a real Redis (started here on a free loopback port, stopped by PID),
shared by every replica; a Redis that cannot be reached loosens the limits, never refuses or stalls a request."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from scripts.drills.ports import ReservedPort
from tests.conftest import free_port
from triserve.configs.access import AccessSettings
from triserve.kernel.errors import ApiError
from triserve.kernel.protection.access import AccessControl, Client

ROOT = Path(__file__).resolve().parents[3]
# looked up in the system directories only, as .ci/run does (never on whatever PATH the run has)
SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
REDIS_SERVER = shutil.which("redis-server", path=os.pathsep.join(SYSTEM_DIRS))
needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed; install it with "
                                 "`apt-get install redis-server` (Debian; .ci/run does this)")
redis = pytest.importorskip("redis", reason="the redis client is not installed (a dependency: make install)")


def test_ci_installs_redis_server():
    """The tests below must not silently skip in CI: .ci/run installs redis-server with the other system tools."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^system_tool redis-server >/dev/null \|\| missing\+=\(redis-server\)$", ci, re.M)


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    held = ReservedPort()  # until redis-server has stopped (it sets SO_REUSEADDR: it binds the port meanwhile)
    port = held.number
    proc = subprocess.Popen([str(REDIS_SERVER), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path_factory.mktemp("redis"))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        held.release()


def replicas(url: str, n: int = 2, **cfg) -> list[AccessControl]:
    """n replicas (one API worker each) configured for the cluster scope."""
    settings = AccessSettings(limits_scope="cluster", redis_url=url, redis_prefix=f"t{time.monotonic_ns()}:", **cfg)
    return [AccessControl(settings) for _ in range(n)]


@needs_redis
def test_replicas_share_one_client_budget(redis_url):
    a, b = replicas(redis_url, rate_per_s=0.001, burst=5)
    client = Client(id="addr:198.51.100.7", admin=False, rate_per_s=0.001)
    allowed = 0
    for i in range(10):
        try:
            (a, b)[i % 2].limit(client, "text")
            allowed += 1
        except ApiError as exc:
            assert exc.code == "rate_limited" and exc.details["retry_after_s"] > 0
    assert allowed == 5  # once for the cluster, not 5 per replica


@needs_redis
def test_capacity_is_one_bucket_for_the_cluster(redis_url):
    a, b = replicas(redis_url, deployment_rate_per_s={"intent": 4.0}, deployment_burst_s=1.0)
    for i in range(4):
        (a, b)[i % 2].capacity("intent")
    with pytest.raises(ApiError) as e:
        b.capacity("intent")
    assert e.value.code == "over_capacity"


@needs_redis
def test_refill_by_redis_clock_and_idle_keys_expire(redis_url):
    (ac,) = replicas(redis_url, 1)
    store = ac.store
    assert store.take("k", 20.0, 1, 0.0) == 0
    wait = store.take("k", 20.0, 1, 0.0)
    assert 0 < wait <= 0.05
    time.sleep(0.06)
    assert store.take("k", 20.0, 1, 0.0) == 0
    ttl_ms = store.client.pttl(store.prefix + "k")
    assert 0 < ttl_ms <= 1050  # full again after 1/20 s: kept no longer than that plus a second


@needs_redis
def test_a_check_is_one_round_trip(redis_url):
    (ac,) = replicas(redis_url, 1)
    n = 300
    started = time.perf_counter()
    for i in range(n):
        ac.store.take(f"k{i % 10}", 1e6, 1e6, 0.0)
    per_check_ms = (time.perf_counter() - started) / n * 1000
    print(f"redis bucket check on loopback: {per_check_ms:.3f} ms")
    assert per_check_ms < 20  # generous: a shared 2-core box


def test_unreachable_redis_falls_back_to_local_buckets_fast():
    ac = AccessControl(AccessSettings(limits_scope="cluster", redis_url=f"redis://127.0.0.1:{free_port()}/0",
                                      rate_per_s=0.001, burst=2))
    client = Client(id="addr:198.51.100.7", admin=False, rate_per_s=0.001)
    started = time.monotonic()
    ac.limit(client, "text")  # Redis refused: this worker's own bucket answers
    ac.limit(client, "text")
    with pytest.raises(ApiError):
        ac.limit(client, "text")
    assert time.monotonic() - started < 1.0 and ac.store.down_until > time.monotonic()


def test_cluster_scope_needs_a_redis_url():
    with pytest.raises(ValueError, match="redis_url"):
        AccessSettings(limits_scope="cluster")
