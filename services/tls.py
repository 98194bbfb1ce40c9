"""TLS for the gateway's two listeners from one typed setting (configs/access.TlsSettings): BentoML's ssl options
for HTTP (uvicorn) and grpc server credentials for gRPC, so a certificate and a client CA are given once and both
protocols refuse the same clients."""
from __future__ import annotations

import ssl
from typing import Any

import grpc

from triserve.configs.access import TlsSettings


def bentoml_ssl(tls: TlsSettings) -> dict[str, Any]:
    """The `ssl` section of the gateway's @bentoml.service config (BentoML hands it to uvicorn): {} when TLS is off."""
    if not tls.enabled:
        return {}
    section: dict[str, Any] = {"enabled": True, "certfile": str(tls.certfile), "keyfile": str(tls.keyfile)}
    if tls.client_ca is not None:
        section.update(ca_certs=str(tls.client_ca), cert_reqs=int(ssl.CERT_REQUIRED))
    return {"ssl": section}


def grpc_credentials(tls: TlsSettings) -> grpc.ServerCredentials | None:
    """Server credentials for the gRPC port, None when TLS is off (an insecure port)."""
    if not tls.enabled:
        return None
    assert tls.certfile is not None and tls.keyfile is not None
    pair = (tls.keyfile.read_bytes(), tls.certfile.read_bytes())
    if tls.client_ca is None:
        return grpc.ssl_server_credentials([pair])
    return grpc.ssl_server_credentials([pair], root_certificates=tls.client_ca.read_bytes(), require_client_auth=True)
