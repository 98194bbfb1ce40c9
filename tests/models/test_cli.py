"""python -m triserve.models.cli: list, show, publish, copy (local -> local and local -> OCI), promote, rollback,
pull."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.models.test_manifest import make_manifest
from triserve.models.cli import main, previous_target
from triserve.models.manifest import Source
from triserve.models.registry import LocalRegistry
from triserve.models.stores import open_store

ROOT = Path(__file__).resolve().parents[2]
V1, V2 = "1.0.0-abcdef12", "1.0.1-abcdef12"


@pytest.fixture()
def registry(tmp_path) -> Path:
    """A local registry with toy-model V1 and V2, 'stable' moved V1 -> V2."""
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "model.onnx").write_bytes(b"graph-v1")
    reg = LocalRegistry(tmp_path / "reg")
    reg.publish(staging, make_manifest(version=V1))
    (staging / "model.onnx").write_bytes(b"graph-v2")
    reg.publish(staging, make_manifest(version=V2, source=Source(kind="recipe", description="test", license="MIT",
                                                                 url="https://example.org/toy")))
    reg.set_alias("toy-model", "stable", V1, by="ci")
    reg.set_alias("toy-model", "stable", V2, by="ci")
    return reg.root


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["-q", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_list_and_show(registry, capsys):
    code, out, _ = run(capsys, "--registry", str(registry), "list")
    assert code == 0 and "toy-model" in out and f"stable={V2}" in out
    header, row = out.splitlines()[:2]
    assert "license (latest)" in header and " MIT " in row  # the latest version's licence (V1 says NOASSERTION)
    code, out, _ = run(capsys, "--registry", str(registry), "show", "toy-model")
    assert code == 0 and f"toy-model:{V2}" in out and "model.onnx" in out and f"stable: {V1} -> {V2}" in out
    assert "license    MIT" in out and "(https://example.org/toy)" in out
    code, out, _ = run(capsys, "--registry", str(registry), "show", f"toy-model:{V1}")
    assert code == 0 and "license    NOASSERTION" in out
    code, out, _ = run(capsys, "--registry", str(registry), "show", f"toy-model:{V1}", "--json")
    assert code == 0 and f'"version": "{V1}"' in out


def test_publish_refuses_an_existing_version(registry, tmp_path, capsys):
    staging = tmp_path / "new"
    staging.mkdir()
    (staging / "model.onnx").write_bytes(b"graph-v3")
    manifest = tmp_path / "m.json"
    manifest.write_text(make_manifest(version="1.0.2-abcdef12").dumps())
    code, out, _ = run(capsys, "--registry", str(registry), "publish", str(staging), "--manifest", str(manifest),
                       "--alias", "canary", "--by", "alice")
    assert code == 0 and "published toy-model:1.0.2-abcdef12" in out
    assert LocalRegistry(registry).aliases("toy-model")["canary"] == "1.0.2-abcdef12"
    code, _, err = run(capsys, "--registry", str(registry), "publish", str(staging), "--manifest", str(manifest))
    assert code == 1 and "already exists" in err


def test_promote_then_rollback_walks_the_alias_log(registry, capsys):
    code, out, _ = run(capsys, "--registry", str(registry), "rollback", "toy-model", "--by", "oncall")
    assert code == 0 and f"rolled back stable {V2} -> {V1} in" in out and " ms" in out
    reg = LocalRegistry(registry)
    assert reg.aliases("toy-model")["stable"] == V1
    assert reg.alias_log("toy-model")[-1] | {"when": None} == {
        "when": None, "alias": "stable", "from": V2, "to": V1, "by": "oncall"}
    code, _, err = run(capsys, "--registry", str(registry), "rollback", "toy-model")
    assert code == 1 and "no earlier target" in err  # V1 was the first target: nothing further back
    code, out, _ = run(capsys, "--registry", str(registry), "promote", "toy-model", V2, "--alias", "stable")
    assert code == 0 and f"stable {V1} -> {V2}" in out
    code, _, err = run(capsys, "--registry", str(registry), "rollback", "toy-model", "--alias", "canary")
    assert code == 1 and "not set" in err


def test_previous_target_walks_back_through_the_promotion_history():
    log = [{"alias": "stable", "from": None, "to": "a"}, {"alias": "canary", "from": None, "to": "x"},
           {"alias": "stable", "from": "a", "to": "b"}, {"alias": "stable", "from": "b", "to": "c"}]
    assert previous_target(log, "stable", "c") == "b"
    log.append({"alias": "stable", "from": "c", "to": "b"})  # rolled back
    assert previous_target(log, "stable", "b") == "a"  # further back, never forward to c again
    log.append({"alias": "stable", "from": "b", "to": "a"})
    assert previous_target(log, "stable", "a") is None
    assert previous_target(log, "canary", "x") is None
    assert previous_target([{"alias": "stable", "from": "old", "to": "new"}], "stable", "new") == "old"


def test_copy_all_with_aliases_is_idempotent(registry, tmp_path, capsys):
    dest = tmp_path / "mirror"
    code, out, _ = run(capsys, "copy", "--all", "--aliases", "--from", str(registry), "--to", str(dest))
    assert code == 0 and out.count(": copied") == 2 and f"stable -> {V2}" in out
    mirror = LocalRegistry(dest)
    assert mirror.versions("toy-model") == [V1, V2] and mirror.aliases("toy-model") == {"stable": V2}
    code, out, _ = run(capsys, "copy", "--all", "--aliases", "--from", str(registry), "--to", str(dest))
    assert code == 0 and out.count(": present") == 2 and "->" not in out


def test_copy_to_oci_then_pull_and_detect_tampering(registry, oci_registry, tmp_path, capsys):
    from tests.models.conftest import unique_name

    target = f"{oci_registry}/{unique_name('cli')}"
    code, out, _ = run(capsys, "copy", "toy-model:stable", "--aliases", "--from", str(registry), "--to", target)
    assert code == 0 and f"toy-model:{V2}: copied" in out
    assert open_store(target).aliases("toy-model") == {"stable": V2}
    code, out, _ = run(capsys, "--registry", target, "pull", "toy-model:stable", "--cache", str(tmp_path / "c"))
    assert code == 0 and f"toy-model:stable -> {V2}: verified" in out
    (LocalRegistry(registry).path("toy-model", V1) / "model.onnx").write_bytes(b"graph-vX")
    code, _, err = run(capsys, "--registry", str(registry), "pull", f"toy-model:{V1}", "--cache", str(tmp_path / "d"))
    assert code == 3 and "sha256 mismatch for model.onnx" in err


def test_unreachable_registry_exit_code(tmp_path, capsys):
    from tests.models.conftest import closed_port

    code, _, err = run(capsys, "--registry", f"oci://127.0.0.1:{closed_port()}/x", "pull", "toy-model",
                       "--cache", str(tmp_path / "c"), "--retries", "0")
    assert code == 4 and "not ready" in err


def test_module_entry_point(registry):
    done = subprocess.run([sys.executable, "-m", "triserve.models.cli", "--registry", str(registry), "list"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "toy-model" in done.stdout
