"""Verified stamps (models/stamps.py): an unchanged file is hashed once; a changed one is hashed again and refused."""
import os
from types import SimpleNamespace

import pytest

import triserve.models.registry as registry_module
from tests.models.test_manifest import make_manifest
from tests.models.test_registry import staged  # noqa: F401 - the fixture
from triserve.models.cache import open_serving_registry, serving_stamps
from triserve.models.registry import IntegrityError, LocalRegistry
from triserve.models.stamps import Stamps

VERSION = "1.0.0-abcdef12"


@pytest.fixture()
def hashed(monkeypatch):
    """The paths sha256_file is called on, in order (the real hash still runs)."""
    calls: list[str] = []
    real = registry_module.sha256_file

    def counting(path, *a, **kw):
        calls.append(os.path.basename(path))
        return real(path, *a, **kw)

    monkeypatch.setattr(registry_module, "sha256_file", counting)
    return calls


@pytest.fixture()
def reg(tmp_path, staged):  # noqa: F811 - the fixture imported above
    published = LocalRegistry(tmp_path / "reg", Stamps(tmp_path / "stamps"))
    published.publish(staged, make_manifest())
    return published


def test_unchanged_files_are_hashed_once(reg, hashed):
    reg.load_verified("toy-model", VERSION)
    assert sorted(hashed) == ["labels.txt", "model.onnx"]
    hashed.clear()
    reg.load_verified("toy-model", VERSION)
    # a new process reading the same stamps (the runner after a restart, or the gateway) skips them too
    LocalRegistry(reg.root, Stamps(reg.stamps.directory)).load_verified("toy-model", VERSION)
    assert hashed == []


def test_a_corrupted_file_is_still_refused(reg, hashed):
    reg.load_verified("toy-model", VERSION)  # stamped
    path = reg.path("toy-model", VERSION) / "model.onnx"
    st = os.stat(path)
    path.write_bytes(b"graph-bytez")  # same size, different content
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with its mtime put back (ctime moved on)
    with pytest.raises(IntegrityError, match="sha256 mismatch for model.onnx"):
        reg.load_verified("toy-model", VERSION)
    with pytest.raises(IntegrityError):  # and again: a refusal leaves no stamp behind
        reg.load_verified("toy-model", VERSION)


def test_a_replaced_file_is_hashed_again(reg, hashed):
    reg.load_verified("toy-model", VERSION)
    path = reg.path("toy-model", VERSION) / "model.onnx"
    copy = path.with_name("copy")
    copy.write_bytes(path.read_bytes())
    os.replace(copy, path)  # same bytes, another inode: unknown to the stamp, so hashed (and fine)
    hashed.clear()
    reg.load_verified("toy-model", VERSION)
    assert hashed == ["model.onnx"]


def test_a_stamp_vouches_only_for_its_digest(reg):
    reg.load_verified("toy-model", VERSION)
    path = reg.path("toy-model", VERSION) / "model.onnx"
    digest = reg.manifest("toy-model", VERSION).file("model.onnx").sha256
    assert reg.stamps.matches(path, digest)
    assert not reg.stamps.matches(path, "0" * 64)  # another manifest's digest for the same path is hashed


def test_without_stamps_every_load_hashes(tmp_path, staged, hashed):  # noqa: F811
    plain = LocalRegistry(tmp_path / "reg")
    plain.publish(staged, make_manifest())
    plain.load_verified("toy-model", VERSION)
    plain.load_verified("toy-model", VERSION)
    assert len(hashed) == 4


def test_unwritable_stamp_directory_only_means_hashing_again(tmp_path, staged, hashed):  # noqa: F811
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    r = LocalRegistry(tmp_path / "reg", Stamps(blocker / "stamps"))
    r.publish(staged, make_manifest())
    r.load_verified("toy-model", VERSION)
    r.load_verified("toy-model", VERSION)
    assert len(hashed) == 4


def test_serving_registry_uses_the_settings(tmp_path):
    settings = SimpleNamespace(registry_uri=None, registry_dir=tmp_path / "reg", model_cache_dir=tmp_path / "cache",
                               verified_stamps=True)
    registry = open_serving_registry(settings, repository=None)
    assert registry.stamps is not None and registry.stamps.directory == tmp_path / "cache" / ".verified"
    settings.verified_stamps = False
    assert serving_stamps(settings) is None
    assert open_serving_registry(settings, repository=None).stamps is None


def test_stamps_of_removed_files_are_pruned(reg):
    reg.load_verified("toy-model", VERSION)
    assert len(list(reg.stamps.directory.glob("*.json"))) == 2
    (reg.path("toy-model", VERSION) / "extra" / "labels.txt").unlink()
    fresh = Stamps(reg.stamps.directory)
    assert fresh.prune() == 1
    assert len(list(fresh.directory.glob("*.json"))) == 1
