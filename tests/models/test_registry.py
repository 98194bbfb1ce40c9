import pytest

from tests.models.test_manifest import make_manifest
from triserve.models.registry import IntegrityError, LocalRegistry, NotFound, RegistryError, VersionExists


@pytest.fixture()
def staged(tmp_path):
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "model.onnx").write_bytes(b"graph-bytes")
    (staging / "extra").mkdir()
    (staging / "extra" / "labels.txt").write_text("a\nb\n")
    return staging


def test_publish_fills_hashes_and_refuses_overwrite(tmp_path, staged):
    reg = LocalRegistry(tmp_path / "reg")
    published = reg.publish(staged, make_manifest())
    assert {f.path for f in published.files} == {"model.onnx", "extra/labels.txt"}
    assert reg.versions("toy-model") == ["1.0.0-abcdef12"]
    (staged / "model.onnx").write_bytes(b"different")
    with pytest.raises(VersionExists):
        reg.publish(staged, make_manifest())
    directory, manifest = reg.load_verified("toy-model", "1.0.0-abcdef12")
    assert (directory / "model.onnx").read_bytes() == b"graph-bytes"  # the original survived


def test_aliases_move_and_are_logged(tmp_path, staged):
    reg = LocalRegistry(tmp_path / "reg")
    reg.publish(staged, make_manifest())
    reg.publish(staged, make_manifest(version="1.0.1-abcdef12"))
    reg.set_alias("toy-model", "stable", "1.0.0-abcdef12", by="alice")
    reg.set_alias("toy-model", "stable", "1.0.1-abcdef12", by="bob")
    assert reg.resolve("toy-model", "stable") == "1.0.1-abcdef12"
    log = reg.alias_log("toy-model")
    assert [(e["from"], e["to"], e["by"]) for e in log] == [
        (None, "1.0.0-abcdef12", "alice"), ("1.0.0-abcdef12", "1.0.1-abcdef12", "bob")]
    with pytest.raises(NotFound):
        reg.set_alias("toy-model", "stable", "9.9.9")
    with pytest.raises(RegistryError):
        reg.set_alias("toy-model", "1.0.0-abcdef12", "1.0.1-abcdef12")


def test_tampered_artifact_is_refused(tmp_path, staged):
    reg = LocalRegistry(tmp_path / "reg")
    reg.publish(staged, make_manifest())
    path = reg.path("toy-model", "1.0.0-abcdef12") / "model.onnx"
    path.write_bytes(b"graph-bytez")  # same size, different content
    with pytest.raises(IntegrityError, match="sha256"):
        reg.load_verified("toy-model", "1.0.0-abcdef12")
    path.unlink()
    with pytest.raises(IntegrityError, match="missing"):
        reg.load_verified("toy-model", "1.0.0-abcdef12")


def test_unknown_refs(tmp_path):
    reg = LocalRegistry(tmp_path / "empty")
    assert reg.models() == []
    with pytest.raises(NotFound):
        reg.resolve("nope", "stable")
