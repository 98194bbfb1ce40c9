"""TLS on both listeners (configs/access.TlsSettings, services/tls.py), on a real `bentoml serve` with certificates
made here: HTTPS and gRPC over TLS answer a client that trusts the CA; with a client CA (mutual TLS) a client without a
certificate signed by it is refused on both; the typed client and tritonclient connect with the certificates."""
from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from pathlib import Path

import grpc
import httpx
import pytest
import tritonclient.grpc as tgrpc  # at collection, before anything loads the gateway's OIP stubs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import ValidationError

from tests.conftest import NO_CAPACITY_LIMITS, Server
from triserve.configs.access import TlsSettings
from triserve.services.tls import bentoml_ssl, grpc_credentials


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _issue(subject: str, issuer: tuple | None, *, ca: bool = False, server: bool = False):
    """(key, certificate): self-signed when issuer is None, else signed by issuer = (key, certificate)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    signer_key, signer_name = (key, _name(subject)) if issuer is None else (issuer[0], issuer[1].subject)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(signer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
    return key, builder.sign(signer_key, hashes.SHA256())


def _write(folder: Path, name: str, key, cert) -> tuple[Path, Path]:
    key_path, cert_path = folder / f"{name}.key", folder / f"{name}.pem"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pki")
    ca = _issue("triserve test CA", None, ca=True)
    rogue = _issue("someone else's CA", None, ca=True)
    files = {}
    for name, (key, cert) in {"ca": ca, "server": _issue("127.0.0.1", ca, server=True),
                              "client": _issue("client", ca), "rogue_client": _issue("rogue", rogue)}.items():
        files[f"{name}_key"], files[name] = _write(folder, name, key, cert)
    return files


def _context(pki, client: str | None = "client") -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki["ca"]))
    if client is not None:
        ctx.load_cert_chain(str(pki[client]), str(pki[f"{client}_key"]))
    return ctx


def _grpc_creds(pki, client: str | None = "client") -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=pki["ca"].read_bytes(),
        private_key=pki[f"{client}_key"].read_bytes() if client else None,
        certificate_chain=pki[client].read_bytes() if client else None)


@pytest.fixture(scope="module", params=["tls", "mutual"])
def tls_server(request, tiny_registry, tmp_path_factory, pki):
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_TLS__CERTFILE": str(pki["server"]),
           "TRISERVE_TLS__KEYFILE": str(pki["server_key"])}
    if request.param == "mutual":
        env["TRISERVE_TLS__CLIENT_CA"] = str(pki["ca"])
    log_path = tmp_path_factory.mktemp("logs") / f"serve-{request.param}.log"
    with Server(tiny_registry.root, env=env, log_path=log_path, verify=_context(pki)) as srv:
        srv.wait_ready()
        yield request.param, srv


def test_https_and_grpc_answer_a_client_that_trusts_the_ca(tls_server, pki):
    from triserve_client import TriserveClient
    from triserve_client.grpc import TriserveGrpcClient

    _, srv = tls_server
    assert srv.url.startswith("https://")
    with TriserveClient(srv.url, verify=_context(pki)) as api:
        assert api.classify("book a flight").results[0].label
    with TriserveGrpcClient(srv.grpc_target, credentials=_grpc_creds(pki)) as typed:
        assert typed.classify("book a flight").results[0].label
    with pytest.raises(httpx.TransportError):  # plain HTTP on the TLS port gets no answer
        httpx.get(srv.url.replace("https://", "http://") + "/livez", timeout=5).raise_for_status()


def test_a_client_that_does_not_trust_the_server_is_refused(tls_server):
    _, srv = tls_server
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(srv.url + "/livez", timeout=5)


def test_mutual_tls_refuses_clients_without_a_certificate_of_its_ca(tls_server, pki):
    from triserve_client.grpc import TriserveGrpcClient

    mode, srv = tls_server
    for client in (None, "rogue_client"):
        if mode == "tls":  # no client CA: any client that trusts the server gets in
            assert httpx.get(srv.url + "/livez", timeout=5, verify=_context(pki, client)).status_code == 200
            continue
        with pytest.raises(httpx.TransportError):  # the handshake fails (alert or reset), no answer
            httpx.get(srv.url + "/livez", timeout=5, verify=_context(pki, client))
        creds = grpc.ssl_channel_credentials(root_certificates=pki["ca"].read_bytes()) if client is None else \
            _grpc_creds(pki, client)
        with TriserveGrpcClient(srv.grpc_target, credentials=creds, timeout=5) as typed:
            with pytest.raises(Exception) as refused:
                typed.classify("book a flight")
        assert "UNAVAILABLE" in repr(refused.value) or "unavailable" in str(refused.value).lower()


def test_tritonclient_connects_over_tls(tls_server, pki):
    _, srv = tls_server
    client = tgrpc.InferenceServerClient(srv.grpc_target, ssl=True, root_certificates=str(pki["ca"]),
                                         private_key=str(pki["client_key"]), certificate_chain=str(pki["client"]))
    try:
        assert client.is_server_live() and client.is_server_ready()
    finally:
        client.close()


def test_settings_refuse_half_a_configuration(pki, tmp_path):
    with pytest.raises(ValidationError, match="certfile and keyfile together"):
        TlsSettings(certfile=pki["server"])
    with pytest.raises(ValidationError, match="needs certfile"):
        TlsSettings(client_ca=pki["ca"])
    with pytest.raises(ValidationError, match="no file"):
        TlsSettings(certfile=tmp_path / "missing.pem", keyfile=pki["server_key"])
    assert bentoml_ssl(TlsSettings()) == {} and grpc_credentials(TlsSettings()) is None
    mutual = bentoml_ssl(TlsSettings(certfile=pki["server"], keyfile=pki["server_key"], client_ca=pki["ca"]))
    assert mutual["ssl"]["cert_reqs"] == ssl.CERT_REQUIRED and mutual["ssl"]["ca_certs"] == str(pki["ca"])
