"""API keys and per-client token-bucket rate limits.

Keys come from X-API-Key or 'Authorization: Bearer'; only their sha256 is configured. Anonymous clients (when keys
are optional) are limited per client address: the peer, or behind trusted proxies the address they forward
(access.trusted_proxies, kernel/protection/forwarded.py). The buckets are shared by every API worker of the server
(access.limits_scope, kernel/protection/buckets.py), so a limit means the same whatever gateway.workers is; they are
bounded, so a flood of addresses cannot grow memory. Admin endpoints always need an admin key: 401 without a valid key,
403 with a non-admin one.
"""
from __future__ import annotations

import hashlib
import hmac
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from triserve.configs.access import AccessSettings, ApiKey
from triserve.kernel.errors import ApiError
from triserve.kernel.protection.buckets import BucketStore, LocalBuckets, SharedBuckets, remove_stale, server_table
from triserve.kernel.protection.forwarded import client_address, parse_networks
from triserve.observability.metrics import REJECTED


class Peer(Protocol):
    @property
    def host(self) -> str: ...


class Caller(Protocol):
    """What access control reads of a request, whatever its transport: its headers (Starlette's, with `getlist` for
    repeated lines, or a gRPC call's metadata as a mapping) and its peer. The kernel knows no web framework."""

    @property
    def headers(self) -> Mapping[str, Any]: ...

    @property
    def client(self) -> Peer | None: ...


@dataclass
class Client:
    id: str  # "key:<name>" or "addr:<ip>"
    admin: bool
    rate_per_s: float
    sticky_key: str = ""  # what keeps this client on one side of a canary split; "": nothing identifies it
    burst: int | None = None  # its bucket size; None: access.burst

    @property
    def canary_key(self) -> str:
        """The route key of one request without an X-Canary-Key: the client's sticky key, else a fresh draw (a
        random key per request: the canary's weight is then the share of requests)."""
        return self.sticky_key or f"draw:{random.getrandbits(64):016x}"


def bucket_store(cfg: AccessSettings, workers: int) -> BucketStore:
    """Where this API worker keeps its buckets (access.limits_scope): its own memory when it is alone or limits are
    per worker, the server's shared table when several workers share them, Redis for the whole cluster."""
    if cfg.limits_scope == "cluster":
        from triserve.kernel.protection.redis_buckets import (
            RedisBuckets,  # the optional redis client, only when asked for
        )

        assert cfg.redis_url  # checked by AccessSettings
        return RedisBuckets(cfg.redis_url, cfg.redis_prefix)
    if cfg.limits_scope == "server" and workers > 1:
        path = server_table(cfg.shared_dir)
        remove_stale(path.parent)
        return SharedBuckets(path, cfg.max_clients + len(cfg.deployment_rate_per_s))
    return LocalBuckets(cfg.max_clients)


class AccessControl:
    def __init__(self, cfg: AccessSettings, clock=time.monotonic, workers: int = 1, store: BucketStore | None = None):
        self.cfg, self.clock = cfg, clock
        self.store = store if store is not None else bucket_store(cfg, workers)
        self.networks = parse_networks(cfg.trusted_proxies)
        # a deployment's capacity: one bucket for the instance, unless each worker keeps its own share of it
        share = workers if cfg.limits_scope == "worker" else 1
        self.capacity_rates = {name: (rate / share, max(1, math.ceil(rate / share * cfg.deployment_burst_s)))
                               for name, rate in cfg.deployment_rate_per_s.items()} if cfg.capacity_limits else {}

    @property
    def buckets(self):
        """The buckets of a LocalBuckets store (tests)."""
        return getattr(self.store, "buckets", None)

    def _key(self, request: Caller) -> str | None:
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

    def require(self, request: Caller, rule: str) -> None:
        """An API category's rule (access.restricted_apis): 'open' lets anyone through, 'key' needs a valid key
        (whether or not inference does), 'admin' an admin key; 401/403 otherwise, as for admin calls."""
        if rule == "open":
            return
        if self._key(request) is None:
            raise ApiError(401, "unauthorized", "an API key is required (X-API-Key or Authorization: Bearer)",
                           headers={"WWW-Authenticate": "Bearer"})
        self.identify(request, admin=rule == "admin")

    def identify(self, request: Caller, admin: bool = False) -> Client:
        key = self._key(request)
        if key is None:
            if admin or self.cfg.require_key_for_inference:
                raise ApiError(401, "unauthorized", "an API key is required (X-API-Key or Authorization: Bearer)",
                               headers={"WWW-Authenticate": "Bearer"})
            addr = self.address(request)
            client_id = f"addr:{addr.host}"
            # a forwarded address names one client; a peer may be a proxy or NAT for everybody (peers_are_clients)
            sticky = client_id if addr.forwarded or self.cfg.peers_are_clients else ""
            return Client(id=client_id, admin=False, rate_per_s=self.cfg.rate_per_s, sticky_key=sticky)
        entry = self._lookup(key)
        if entry is None:
            raise ApiError(401, "unauthorized", "unknown API key", headers={"WWW-Authenticate": "Bearer"})
        if admin and not entry.admin:
            raise ApiError(403, "forbidden", f"key {entry.name!r} may not call admin endpoints")
        client_id = f"key:{entry.name}"
        return Client(id=client_id, admin=entry.admin, rate_per_s=entry.rate_per_s or self.cfg.rate_per_s,
                      sticky_key=client_id, burst=entry.burst)

    def admit(self, request: Caller, family: str) -> Client:
        """An inference call's whole access decision, made once per request whatever its transport (REST's edge,
        OIP REST's handler, gRPC's handlers): who is calling (401 without a valid key where one is required), then
        one token of its bucket (429). Callers must not call it twice for one request: each call takes a token."""
        client = self.identify(request)
        self.limit(client, family)
        return client

    def address(self, request: Caller):
        """The client's address: the peer, or what a trusted proxy forwarded (kernel/protection/forwarded.py)."""
        peer = request.client.host if request.client else None
        header = self.cfg.forwarded_header
        if not self.networks:
            return client_address(peer, (), self.networks, header)
        getlist = getattr(request.headers, "getlist", None)  # starlette: every line of the header; gRPC: a dict
        values = getlist(header) if getlist is not None else [v for v in [request.headers.get(header)] if v]
        return client_address(peer, values, self.networks, header)

    def limit(self, client: Client, family: str) -> None:
        """The client's own rate (checked before the body is read; `family` labels the metric)."""
        wait = self.store.take(f"client:{client.id}", client.rate_per_s, client.burst or self.cfg.burst, self.clock())
        if wait > 0:
            REJECTED.labels(family, "", "rate_limited").inc()
            raise ApiError(429, "rate_limited", f"rate limit of {client.rate_per_s:g} requests/s exceeded",
                           {"client": client.id, "scope": "client", "retry_after_s": round(wait, 3)},
                           headers={"Retry-After": str(max(1, math.ceil(wait)))})

    def capacity(self, deployment: str, family: str = "") -> None:
        """The deployment's configured capacity (checked once the request names its deployment, before any work)."""
        limit = self.capacity_rates.get(deployment)
        if limit is None:
            return
        wait = self.store.take(f"capacity:{deployment}", limit[0], limit[1], self.clock())
        if wait > 0:
            REJECTED.labels(family, deployment, "over_capacity").inc()
            raise ApiError(429, "over_capacity", f"{deployment} is at its configured capacity "
                           f"({self.cfg.deployment_rate_per_s[deployment]:g} requests/s)",
                           {"deployment": deployment, "scope": "deployment", "retry_after_s": round(wait, 3)},
                           headers={"Retry-After": str(max(1, math.ceil(wait)))})
