import json
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError

from triserve.families.detection.manifest import DetectionPreprocess
from triserve.models.manifest import FileEntry, Manifest, Source, TensorSpec, json_schema, utcnow


def make_manifest(**overrides) -> Manifest:
    fields = dict(
        name="toy-model", version="1.0.0-abcdef12", task="detection", variant="primary", model_file="model.onnx",
        files=[], opset=17,
        inputs=[TensorSpec(name="images", dtype="float32", shape=["batch", 3, "height", "width"])],
        outputs=[TensorSpec(name="output0", dtype="float32", shape=["batch", 7, "anchors"])],
        preprocess=DetectionPreprocess(imgsz=64), labels=["a", "b", "c"],
        source=Source(kind="recipe", description="test", recipe={"seed": 0}, seed=0),
        data_fingerprint="0" * 64, metrics={"map50": 0.5}, recipe_hash="f" * 64, created_at=utcnow(),
        git_commit="deadbeef")
    fields.update(overrides)
    return Manifest(**fields)


def test_round_trip_and_json_schema():
    m = make_manifest(files=[FileEntry(path="model.onnx", sha256="a" * 64, size=3)])
    data = json.loads(m.dumps())
    jsonschema.validate(data, json_schema())
    assert Manifest.model_validate(data) == m
    assert m.file("model.onnx").size == 3


@pytest.mark.parametrize("bad", [
    {"name": "Bad Name"},  # not a registry name
    {"version": "1.0.0+local"},  # '+' is not a valid OCI tag character
    {"task": "panoptic"},  # not a registered family
    {"files": [FileEntry(path="../escape", sha256="a" * 64, size=1)]},
    {"files": [FileEntry(path="m", sha256="a" * 64, size=1), FileEntry(path="m", sha256="b" * 64, size=1)]},
])
def test_invalid_manifests_are_rejected(bad):
    with pytest.raises(ValidationError):
        make_manifest(**bad)


def test_unknown_fields_are_rejected():
    data = json.loads(make_manifest().dumps())
    data["surprise"] = 1
    with pytest.raises(ValidationError):
        Manifest.model_validate(data)


def test_preprocess_is_discriminated_by_task_kind():
    data = json.loads(make_manifest().dumps())
    data["preprocess"] = {"kind": "text", "tokenizer_file": "tokenizer.json", "max_length": 8, "pad_token_id": 0,
                          "lowercase": True}
    assert Manifest.model_validate(data).preprocess.kind == "text"
    data["preprocess"] = {"kind": "forecast", "imgsz": 3}
    with pytest.raises(ValidationError):
        Manifest.model_validate(data)


def test_committed_schema_file_is_current():
    path = Path(__file__).resolve().parents[2] / "models" / "manifest.schema.json"
    assert json.loads(path.read_text()) == json_schema(), \
        "regenerate: python -m triserve.models.manifest > models/manifest.schema.json"


def test_license_defaults_for_older_manifests_and_must_look_like_spdx():
    data = json.loads(make_manifest().dumps())
    del data["source"]["license"], data["source"]["url"]  # a manifest written before the fields existed
    old = Manifest.model_validate(data)
    assert old.source.license == "NOASSERTION" and old.source.url is None
    for ok in ("AGPL-3.0-only", "Apache-2.0 AND MIT AND LicenseRef-x", "(MIT OR Apache-2.0)", "GPL-2.0+"):
        data["source"]["license"] = ok
        jsonschema.validate(data, json_schema())
        assert Manifest.model_validate(data).source.license == ok
    for bad in ("", "AGPL-3.0 License (https://ultralytics.com/license)", "MIT AND", "MIT Apache-2.0"):
        data["source"]["license"] = bad
        with pytest.raises(ValidationError):
            Manifest.model_validate(data)
