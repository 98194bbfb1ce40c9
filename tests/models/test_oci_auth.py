"""The OCI store against authenticated registries (Debian's docker-registry behind htpasswd Basic auth, and behind
token auth with a token server: tests/models/conftest.py): push, verified pull, list, aliases; a wrong password is a
clear error (RegistryAuthError; the CLI prints it without a traceback); credentials from the environment and from a
docker config file; the password never reaches logs, error messages, the registry's manifests or pulled files."""
from __future__ import annotations

import base64
import json
import logging
import time
from pathlib import Path

import pytest

from tests.models.conftest import unique_name
from tests.models.test_manifest import make_manifest
from triserve.models import cli
from triserve.models.cache import fetch_verified
from triserve.models.registry import IntegrityError
from triserve.models.stores import RegistryError, open_store
from triserve.models.stores.base import RegistryAuthError
from triserve.models.stores.oci_auth import ENV_PASSWORD, ENV_USERNAME, find_credentials

V1, V2 = "1.0.0-abcdef12", "1.0.1-abcdef12"


@pytest.fixture(params=["basic", "token"])
def auth_registry(request):
    return request.getfixturevalue(f"oci_registry_{request.param}")


@pytest.fixture()
def no_credentials(monkeypatch, tmp_path):
    """Neither the environment nor this machine's ~/.docker/config.json: each test says where credentials are."""
    monkeypatch.delenv(ENV_USERNAME, raising=False)
    monkeypatch.delenv(ENV_PASSWORD, raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    return tmp_path / "docker-config"


def _env(monkeypatch, username: str, password: str) -> None:
    monkeypatch.setenv(ENV_USERNAME, username)
    monkeypatch.setenv(ENV_PASSWORD, password)


def _docker_config(directory: Path, auths: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"auths": auths}))


def _auth(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture()
def staged(tmp_path) -> Path:
    staging = tmp_path / "staging"
    (staging / "extra").mkdir(parents=True)
    (staging / "model.onnx").write_bytes(b"graph-bytes" * 100)
    (staging / "extra" / "labels.txt").write_text("a\nb\n")
    return staging


def _registry_bytes(store, name: str) -> bytes:
    """Everything the registry holds for a model: every tag's manifest and every blob they reference."""
    out = b""
    for tag in store._paged(f"/v2/{store._repo(name)}/tags/list", "tags"):
        oci, raw = store._get_manifest(name, tag)
        out += raw
        for desc in [oci["config"], *oci["layers"]]:
            out += store._blob(name, desc["digest"])
    return out


def _all_file_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def test_push_pull_list_and_aliases_with_env_credentials(auth_registry, no_credentials, monkeypatch, staged,
                                                        tmp_path, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, oras' and urllib3's included
    _env(monkeypatch, auth_registry.username, auth_registry.password)
    store = open_store(auth_registry.uri)
    name = unique_name()
    published = store.publish(staged, make_manifest(name=name, version=V1), progress=True)
    store.publish(staged, make_manifest(name=name, version=V2))
    assert name in store.models()
    assert store.versions(name) == [V1, V2]
    store.set_alias(name, "stable", V1, by="alice")
    store.set_alias(name, "stable", V2, by="bob")
    assert store.aliases(name) == {"stable": V2}
    assert store.resolve(name, "stable") == V2
    assert [(e["from"], e["to"], e["by"]) for e in store.alias_log(name)] == [(None, V1, "alice"), (V1, V2, "bob")]

    pulled = store.pull(name, V1, tmp_path / "out", progress=False)  # verified against our manifest.json
    assert [f.model_dump() for f in pulled.files] == [f.model_dump() for f in published.files]
    assert (tmp_path / "out" / "model.onnx").read_bytes() == b"graph-bytes" * 100
    directory, manifest = fetch_verified(open_store(auth_registry.uri), name, "stable", tmp_path / "cache",
                                         retries=0)
    assert manifest.version == V2 and (directory / "extra" / "labels.txt").read_text() == "a\nb\n"

    secret = auth_registry.password.encode()
    basic = _auth(auth_registry.username, auth_registry.password).encode()
    assert secret not in _all_file_bytes(tmp_path / "out") + _all_file_bytes(tmp_path / "cache")
    held = _registry_bytes(store, name)
    assert b'"by": "alice"' in held  # the alias document is part of what was searched
    assert secret not in held and basic not in held
    assert caplog.records and auth_registry.password not in caplog.text and basic.decode() not in caplog.text
    if auth_registry.scheme == "token":  # tokens were asked for the scopes the registry challenged with
        scopes = {(s.rpartition(":")[0], frozenset(s.rpartition(":")[2].split(",")))  # actions come in any order
                  for user, asked in auth_registry.token_requests if user for s in asked}
        repo = f"repository:test/{name}"
        assert {(repo, frozenset({"pull"})), (repo, frozenset({"pull", "push"})),
                ("registry:catalog", frozenset({"*"}))} <= scopes


def test_wrong_password_is_a_clear_error(auth_registry, no_credentials, monkeypatch, staged, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    _env(monkeypatch, auth_registry.username, "not-the-password")
    started = time.monotonic()
    with pytest.raises(RegistryAuthError) as info:
        open_store(auth_registry.uri).publish(staged, make_manifest(name=unique_name()))
    message = str(info.value)
    assert "authentication failed" in message and auth_registry.host in message
    assert repr(auth_registry.username) in message and ENV_USERNAME in message
    assert "not-the-password" not in message
    with pytest.raises(RegistryAuthError, match="authentication failed"):
        open_store(auth_registry.uri).resolve("toy-model", "stable")
    assert time.monotonic() - started < 10  # refused at once: no retry loop behind it

    code = cli.main(["--registry", auth_registry.uri, "-q", "list"])
    out, err = capsys.readouterr()
    assert code == 1
    assert err.startswith("error: ") and "authentication failed" in err and auth_registry.host in err
    assert "Traceback" not in err and "not-the-password" not in out + err
    assert "not-the-password" not in caplog.text


def test_no_credentials_says_where_they_go(auth_registry, no_credentials):
    with pytest.raises(RegistryAuthError) as info:
        open_store(auth_registry.uri).versions("toy-model")
    message = str(info.value)
    assert "requires authentication" in message and "no credentials were found" in message
    assert ENV_USERNAME in message and str(no_credentials / "config.json") in message


def test_credentials_from_the_docker_config_file(auth_registry, no_credentials, staged, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    _docker_config(no_credentials, {
        "ghcr.io": {"auth": _auth("someone", "else")},
        f"http://{auth_registry.host}": {"auth": _auth(auth_registry.username, auth_registry.password)},
    })
    store = open_store(auth_registry.uri)
    name = unique_name()
    store.publish(staged, make_manifest(name=name))
    store.set_alias(name, "stable", V1, by="ci")
    directory, _ = fetch_verified(auth_registry.uri, name, "stable", tmp_path / "cache", retries=0)
    assert (directory / "model.onnx").read_bytes() == b"graph-bytes" * 100
    assert auth_registry.password not in caplog.text
    assert auth_registry.password.encode() not in _all_file_bytes(tmp_path / "cache")

    # a wrong password in the file: the message names the file as the source, never the password
    _docker_config(no_credentials, {auth_registry.host: {"auth": _auth(auth_registry.username, "stale-pw")}})
    with pytest.raises(RegistryAuthError, match="authentication failed") as info:
        open_store(auth_registry.uri).versions(name)
    assert str(no_credentials / "config.json") in str(info.value) and "stale-pw" not in str(info.value)


def test_environment_wins_over_the_docker_config(oci_registry_basic, no_credentials, monkeypatch, staged):
    registry = oci_registry_basic
    _docker_config(no_credentials, {registry.host: {"auth": _auth(registry.username, "stale-pw")}})
    _env(monkeypatch, registry.username, registry.password)
    name = unique_name()
    open_store(registry.uri).publish(staged, make_manifest(name=name))
    assert open_store(registry.uri).versions(name) == [V1]
    monkeypatch.delenv(ENV_PASSWORD)
    with pytest.raises(RegistryAuthError, match=f"{ENV_PASSWORD} is not set"):
        open_store(registry.uri).versions(name)


def test_tampered_artifact_is_refused_behind_auth(oci_registry_token, no_credentials, monkeypatch, staged, tmp_path):
    from triserve.models.stores.oci import _digest

    _env(monkeypatch, oci_registry_token.username, oci_registry_token.password)
    store = open_store(oci_registry_token.uri)
    name = unique_name()
    store.publish(staged, make_manifest(name=name))
    oci, _ = store._get_manifest(name, V1)
    data = b"graph-bytez" * 100
    store._upload(name, _digest(data), len(data), data)
    for layer in oci["layers"]:
        if layer["annotations"]["dev.triserve.file.path"] == "model.onnx":
            layer["digest"], layer["size"] = _digest(data), len(data)
    store._put_manifest(name, V1, oci)
    with pytest.raises(IntegrityError, match="sha256 mismatch for model.onnx"):
        store.pull(name, V1, tmp_path / "out", progress=False)


def test_credentials_in_the_uri_are_refused_without_echoing_them():
    with pytest.raises(RegistryError) as info:
        open_store("oci://alice:hunter2-secret@127.0.0.1:5000/models")
    assert "hunter2-secret" not in str(info.value) and ENV_USERNAME in str(info.value)


def test_docker_config_lookup(tmp_path):
    config = tmp_path / "cfg"
    _docker_config(config, {
        "https://index.docker.io/v1/": {"auth": _auth("hubuser", "hubpw")},
        "localhost:5000": {"username": "u", "password": "p:with:colons"},
        "https://ghcr.io": {"auth": _auth("gh", "tok:en")},
        "broken.example": {"auth": "%%%not-base64"},
    })
    env = {"DOCKER_CONFIG": str(config)}
    hub = find_credentials("docker.io", env)
    assert (hub.username, hub.password) == ("hubuser", "hubpw") and "index.docker.io" in hub.source
    local = find_credentials("127.0.0.1:5000", env)  # localhost and 127.0.0.1 alike, as docker/oras do
    assert (local.username, local.password) == ("u", "p:with:colons")
    gh = find_credentials("GHCR.io", env)
    assert (gh.username, gh.password) == ("gh", "tok:en")
    assert "tok:en" not in repr(gh) and "tok:en" not in gh.describe()
    assert find_credentials("quay.io", env) is None
    with pytest.raises(RegistryError, match="not base64") as info:
        find_credentials("broken.example", env)
    assert "%%%" not in str(info.value)
    from_env = find_credentials("ghcr.io", {**env, ENV_USERNAME: "ci", ENV_PASSWORD: "envpw"})
    assert (from_env.username, from_env.password) == ("ci", "envpw")
    assert find_credentials("ghcr.io", {"DOCKER_CONFIG": str(tmp_path / "none")}) is None
