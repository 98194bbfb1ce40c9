"""API keys and per-client token-bucket rate limits.

Keys come from X-API-Key or 'Authorization: Bearer'; only their sha256 is configured. Anonymous clients (when keys
are optional) are limited per client address. Buckets live in a bounded LRU, so a flood of addresses cannot grow
memory. Admin endpoints always need an admin key: 401 without a valid key, 403 with a non-admin one.
"""
from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections import OrderedDict
from dataclasses import dataclass

from fastapi import Request

from configs.settings import AccessSettings, ApiKey
from kernel.errors import ApiError
from observability.metrics import REJECTED


@dataclass
class Client:
    id: str  # "key:<name>" or "addr:<ip>"
    admin: bool
    rate_per_s: float


class TokenBucket:
    def __init__(self, rate: float, burst: int, now: float):
        self.rate, self.burst, self.tokens, self.updated = rate, burst, float(burst), now

    def take(self, now: float, n: float = 1.0) -> float:
        """0 if allowed, else seconds until enough tokens."""
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= n:
            self.tokens -= n
            return 0.0
        return (n - self.tokens) / self.rate


class AccessControl:
    def __init__(self, cfg: AccessSettings, clock=time.monotonic, workers: int = 1):
        self.cfg, self.clock = cfg, clock
        self.buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        now = clock()
        # the instance-wide capacity of each deployment, this worker's share of it (requests spread evenly)
        self.capacity_buckets = {
            name: TokenBucket(rate / workers, max(1, math.ceil(rate / workers * cfg.deployment_burst_s)), now)
            for name, rate in cfg.deployment_rate_per_s.items()} if cfg.capacity_limits else {}

    def _key(self, request: Request) -> str | None:
        key = request.headers.get("x-api-key")
        auth = request.headers.get("authorization", "")
        if not key and auth.lower().startswith("bearer "):
            key = auth[7:].strip()
        return key or None

    def _lookup(self, key: str) -> ApiKey | None:
        digest = hashlib.sha256(key.encode()).hexdigest()
        for k in self.cfg.api_keys:
            if hmac.compare_digest(k.sha256, digest):
                return k
        return None

    def identify(self, request: Request, admin: bool = False) -> Client:
        key = self._key(request)
        if key is None:
            if admin or self.cfg.require_key_for_inference:
                raise ApiError(401, "unauthorized", "an API key is required (X-API-Key or Authorization: Bearer)",
                               headers={"WWW-Authenticate": "Bearer"})
            host = request.client.host if request.client else "unknown"
            return Client(id=f"addr:{host}", admin=False, rate_per_s=self.cfg.rate_per_s)
        entry = self._lookup(key)
        if entry is None:
            raise ApiError(401, "unauthorized", "unknown API key", headers={"WWW-Authenticate": "Bearer"})
        if admin and not entry.admin:
            raise ApiError(403, "forbidden", f"key {entry.name!r} may not call admin endpoints")
        return Client(id=f"key:{entry.name}", admin=entry.admin, rate_per_s=entry.rate_per_s or self.cfg.rate_per_s)

    def limit(self, client: Client, family: str) -> None:
        """The client's own rate (checked before the body is read; `family` labels the metric)."""
        now = self.clock()
        bucket = self.buckets.get(client.id)
        if bucket is None:
            bucket = self.buckets[client.id] = TokenBucket(client.rate_per_s, self.cfg.burst, now)
            if len(self.buckets) > self.cfg.max_clients:
                self.buckets.popitem(last=False)
        else:
            self.buckets.move_to_end(client.id)
        wait = bucket.take(now)
        if wait > 0:
            REJECTED.labels(family, "", "rate_limited").inc()
            raise ApiError(429, "rate_limited", f"rate limit of {client.rate_per_s:g} requests/s exceeded",
                           {"client": client.id, "scope": "client", "retry_after_s": round(wait, 3)},
                           headers={"Retry-After": str(max(1, math.ceil(wait)))})

    def capacity(self, deployment: str, family: str = "") -> None:
        """The deployment's configured capacity (checked once the request names its deployment, before any work)."""
        bucket = self.capacity_buckets.get(deployment)
        if bucket is None:
            return
        wait = bucket.take(self.clock())
        if wait > 0:
            REJECTED.labels(family, deployment, "over_capacity").inc()
            raise ApiError(429, "over_capacity", f"{deployment} is at its configured capacity "
                           f"({self.cfg.deployment_rate_per_s[deployment]:g} requests/s)",
                           {"deployment": deployment, "scope": "deployment", "retry_after_s": round(wait, 3)},
                           headers={"Retry-After": str(max(1, math.ceil(wait)))})
