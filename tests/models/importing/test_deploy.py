"""The importers' optional deployment entry (models/importing/deploy.py)."""
from __future__ import annotations

import pytest

from triserve.configs.deployments import load_repository
from triserve.models.importing.deploy import DeploymentRefused, add_deployment, deploy_published, entry

FILE = """# my repository (this comment must survive)
defaults: {text: intent}
deployments:
  - name: intent
    family: text
    model: {name: minilm-intent, ref: stable}
"""


def test_entry_is_appended_keeping_the_file_and_loads(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(FILE)
    add_deployment(entry("plates", "detection", "plates", "1.0.0", fallback="plates-int8"), path)
    text = path.read_text()
    assert text.startswith(FILE)  # comments and layout untouched
    repo = load_repository(path)
    plates = repo.find("plates")
    assert (plates.family, plates.model.name, plates.model.ref) == ("detection", "plates", "1.0.0")
    assert (plates.fallback.name, plates.fallback.ref) == ("plates-int8", "1.0.0")
    assert repo.default_for("text").name == "intent"


def test_existing_or_invalid_entries_leave_the_file_unchanged(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(FILE)
    with pytest.raises(DeploymentRefused, match="already has"):
        add_deployment(entry("intent", "text", "other", "1.0.0"), path)
    with pytest.raises(DeploymentRefused, match="invalid"):
        add_deployment(entry("Bad_Name", "text", "other", "1.0.0"), path)
    with pytest.raises(DeploymentRefused, match="invalid"):
        add_deployment(entry("audio", "speech", "other", "1.0.0"), path)
    assert path.read_text() == FILE


def test_cli_deployment_step_names_what_was_published(tmp_path):
    """`triserve import --deployment NAME ...`: the entry serves the published version and its fallback."""
    from types import SimpleNamespace

    from tests.models.test_manifest import make_manifest
    from triserve.models.registry import LocalRegistry

    registry = LocalRegistry(tmp_path / "registry")
    for name, variant in (("plates", "primary"), ("plates-int8", "fallback")):
        staging = tmp_path / f"staging-{name}"
        staging.mkdir()
        (staging / "model.onnx").write_bytes(b"graph")
        registry.publish(staging, make_manifest(name=name, version="1.0.0", variant=variant))
    path = tmp_path / "models.yaml"
    path.write_text(FILE)
    args = SimpleNamespace(registry=registry.root, name="plates", version="1.0.0", fallback_name="plates-int8",
                           deployment="plates", models_file=path)
    assert deploy_published(args) == 0
    plates = load_repository(path).find("plates")
    assert plates.family == "detection" and (plates.model.name, plates.fallback.name) == ("plates", "plates-int8")
    assert deploy_published(args) == 2  # a second time: refused, the file keeps one entry
    assert path.read_text().count("name: plates\n") == 1
