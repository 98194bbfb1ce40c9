"""Who may call what, and over which channel: API keys, rate and capacity limits, API categories, TLS.

Split from configs/settings.py (the whole serving configuration) because these are the security-relevant settings a
reviewer reads on their own; `Settings.access` and `Settings.tls` hold them.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from triserve.configs.section import Section as _Section


class ApiKey(_Section):
    name: str = Field(description="Who holds it (logged, never the key).")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 hex of the key; the key itself is not stored.")
    admin: bool = Field(False, description="May call /admin endpoints.")
    rate_per_s: float | None = Field(None, gt=0, description="Overrides the default rate for this key.")
    burst: int | None = Field(None, ge=1, description="Overrides the default bucket size (access.burst) for this key.")


ApiCategory = Literal["health", "metadata", "model-config", "model-repository", "statistics", "metrics"]
AccessRule = Literal["open", "key", "admin"]


class AccessSettings(_Section):
    """Authentication and rate limits."""

    require_key_for_inference: bool = Field(False, description="Inference needs a valid key (admin always does).")
    api_keys: list[ApiKey] = Field(default_factory=list, description="Accepted keys (X-API-Key or Bearer).")
    rate_per_s: float = Field(200.0, gt=0, description="Token refill per second per key (or per client address "
                                                       "when anonymous), per limits_scope (default: per server).")
    burst: int = Field(400, ge=1, description="Bucket size: the largest burst accepted at once.")
    max_clients: int = Field(10_000, ge=1, description="Buckets kept (least recently used evicted): bounded memory.")
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Networks (CIDRs, or single addresses) of the reverse proxies / ingresses in front of the server. "
                    "From a peer in them, the client address (rate-limit bucket of anonymous callers, canary key) is "
                    "the right-most forwarded_header entry that is not itself in them; from any other peer the "
                    "header is ignored. Empty (default): trust nobody, the peer is the client "
                    "(kernel/protection/forwarded.py).")
    forwarded_header: Literal["x-forwarded-for", "forwarded"] = Field(
        "x-forwarded-for", description="The one header the trusted proxies write: X-Forwarded-For or RFC 7239 "
                                       "Forwarded (for=). Only this one is read: a proxy passes the other through "
                                       "untouched, so a client could forge it.")
    peers_are_clients: bool = Field(
        False, description="A peer address (not forwarded by a trusted proxy) identifies one client: clients connect "
                           "directly, no proxy or NAT in front. Then a canary split keeps anonymous callers on one "
                           "side by it. Off (default): such an address may be everybody behind one ingress, so a 30% "
                           "canary would take all of their traffic or none; their requests are drawn one by one.")
    limits_scope: Literal["worker", "server", "cluster"] = Field(
        "server",
        description="Who shares the rate-limit and capacity buckets: 'server' (default) all API workers of one "
                    "server (replica), through a small memory-mapped table (kernel/protection/buckets.py), so the "
                    "limits are per replica, whatever gateway.workers is; 'cluster' every replica, through Redis "
                    "(redis_url; needs the `redis` extra); 'worker' each API worker on its own (the limits "
                    "multiply with gateway.workers; capacity is split over them).")
    shared_dir: Path | None = Field(None, description="limits_scope=server: where the shared table lives (default "
                                                      "/dev/shm, else the temp directory); one file per server.")
    redis_url: str | None = Field(None, description="limits_scope=cluster: redis://host:port/db (rediss:// for TLS).")
    redis_prefix: str = Field("triserve:limits:", description="limits_scope=cluster: key prefix in Redis.")
    deployment_rate_per_s: dict[str, float] = Field(
        default_factory=dict,
        description="Capacity limit per deployment for the whole instance (all clients; in one bucket shared by the "
                    "API workers, or split evenly over them with limits_scope=worker; cluster-wide with "
                    "limits_scope=cluster): requests/s beyond it get 429 before any work. Set to 80% of the measured "
                    "latency knee by `python -m scripts.bench.knee --write-config`; a deployment not listed is not "
                    "limited.")
    deployment_burst_s: float = Field(0.5, gt=0, le=60, description="Capacity bucket size, in seconds of the "
                                                                    "deployment's rate.")
    capacity_limits: bool = Field(True, description="Apply deployment_rate_per_s (false: measuring the knee, tests on "
                                                    "other models). A switch, because environment dicts are merged "
                                                    "into the YAML's rather than replacing them.")
    restricted_apis: dict[ApiCategory, AccessRule] = Field(
        default_factory=dict,
        description="Who may call each API category besides inference and admin (Triton's --http-restricted-api): "
                    "'open' (anyone), 'key' (any valid key) or 'admin' (an admin key), on REST and gRPC alike. "
                    "Categories: health (liveness, readiness, model readiness), metadata (/v1/models, OIP server and "
                    "model metadata, /schema.json, /openapi.json, /docs, gRPC reflection), model-config, "
                    "model-repository (OIP repository index), statistics (OIP statistics), metrics (/metrics). A "
                    "category not listed: health is open; the others need a key when require_key_for_inference is on, "
                    "else they are open.")

    def api_rule(self, category: ApiCategory) -> AccessRule:
        """The rule of an API category: as configured, else the documented default."""
        if category in self.restricted_apis:
            return self.restricted_apis[category]
        return "open" if category == "health" or not self.require_key_for_inference else "key"

    @model_validator(mode="after")
    def _check(self) -> AccessSettings:
        for cidr in self.trusted_proxies:
            try:
                ipaddress.ip_network(cidr.strip(), strict=False)
            except ValueError as exc:
                raise ValueError(f"access.trusted_proxies: {cidr!r} is not a network (CIDR) or address") from exc
        if self.limits_scope == "cluster" and not self.redis_url:
            raise ValueError("access.limits_scope='cluster' needs access.redis_url")
        return self


class TlsSettings(_Section):
    """TLS on both listeners, HTTP (uvicorn, through BentoML's ssl options) and gRPC (the same certificate): off
    until a certificate and its key are given; with `client_ca`, mutual TLS on both (Triton's --grpc-use-ssl-mutual)."""

    certfile: Path | None = Field(None, description="PEM server certificate (with its chain). Set together with "
                                                    "`keyfile` to serve HTTPS and gRPC over TLS.")
    keyfile: Path | None = Field(None, description="PEM private key of `certfile`.")
    client_ca: Path | None = Field(None, description="PEM CA bundle: mutual TLS, a client without a certificate "
                                                     "signed by it is refused on both listeners.")

    @model_validator(mode="after")
    def _complete(self) -> TlsSettings:
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("tls: give certfile and keyfile together")
        if self.client_ca is not None and self.certfile is None:
            raise ValueError("tls: client_ca (mutual TLS) needs certfile and keyfile")
        for name in ("certfile", "keyfile", "client_ca"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"tls.{name}: no file at {path}")
        return self

    @property
    def enabled(self) -> bool:
        return self.certfile is not None
