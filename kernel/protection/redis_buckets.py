"""Token buckets shared by every replica of a cluster: access.limits_scope='cluster', one Redis.

One Lua script per check (EVALSHA): refill from Redis's own clock (TIME, so the replicas' clocks do not matter), take,
store, and expire the key once it would be full again (an idle client costs nothing). A check is one round trip to
Redis (0.06-0.15 ms on loopback, tests/kernel/protection/test_redis_buckets.py, plus the network's round trip), made
from the API worker's event loop with short timeouts. When Redis cannot be reached the worker falls back to buckets of
its own (per worker, logged, retried after `retry_s`): a Redis outage loosens the limits, it never refuses or stalls
requests.
"""
from __future__ import annotations

import logging
import time

from triserve.kernel.protection.buckets import LocalBuckets

log = logging.getLogger("triserve.access")

TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate, burst, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 'tokens', 'updated')
local tokens, updated = tonumber(v[1]), tonumber(v[2])
if tokens == nil or updated == nil then tokens, updated = burst, now end
tokens = math.min(burst, tokens + math.max(0, now - updated) * rate)
local wait = 0
if tokens >= n then tokens = tokens - n else wait = (n - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'updated', tostring(math.max(now, updated)))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst / rate + 1) * 1000))
return tostring(wait)
"""


class RedisBuckets:
    def __init__(self, url: str, prefix: str = "triserve:limits:", timeout_s: float = 0.05, retry_s: float = 1.0,
                 max_local_keys: int = 10_000):
        import redis  # the optional dependency, only for limits_scope='cluster'

        self.prefix, self.retry_s = prefix, retry_s
        self.client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self.script = self.client.register_script(TAKE)
        self.errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self.fallback = LocalBuckets(max_local_keys)
        self.down_until = 0.0

    def take(self, key: str, rate: float, burst: float, now: float, n: float = 1.0) -> float:
        if time.monotonic() >= self.down_until:
            try:
                return float(self.script(keys=[self.prefix + key], args=[rate, burst, n]))
            except self.errors as exc:
                self.down_until = time.monotonic() + self.retry_s
                log.warning("rate limits: Redis unreachable (%s: %s); this worker limits on its own for %.0f s",
                            type(exc).__name__, exc, self.retry_s)
        return self.fallback.take(key, rate, burst, now, n)

    def close(self) -> None:
        self.client.close()
