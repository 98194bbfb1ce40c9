"""The model repository config (configs/deployments.py): validation at startup, defaults, slots, overrides."""
from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from triserve.configs.deployments import ModelRepository, load_repository, save_state, with_overrides
from triserve.configs.settings import Settings, SlotOverride

ROOT_MODELS = "configs/models.yaml"


def repo(*deployments: dict, defaults: dict | None = None) -> ModelRepository:
    return ModelRepository.model_validate({"deployments": list(deployments), "defaults": defaults or {}})


def dep(name: str, family: str = "text", model: str = "m", fallback: str | None = "m-int8", **kw) -> dict:
    d = {"name": name, "family": family, "model": {"name": model}, **kw}
    if fallback:
        d["fallback"] = {"name": fallback}
    return d


def test_the_shipped_repository_is_valid_and_has_a_default_per_family():
    r = load_repository()
    for family in ("detection", "text", "forecast"):
        assert r.default_for(family) is not None and r.default_for(family).family == family
    assert set(r.slots) == {s for d in r.deployments for s in d.slots}


def test_slots_defaults_and_owner():
    r = repo(dep("a"), dep("b", fallback=None), dep("c", family="forecast"), defaults={"text": "b"})
    assert set(r.slots) == {"a", "a_fallback", "b", "c", "c_fallback"}
    assert r.default_for("text").name == "b" and r.default_for("forecast").name == "c"
    assert r.default_for("detection") is None
    assert r.owner("a_fallback")[0].name == "a" and r.owner("a_fallback")[1] == "fallback"
    assert r.owner("b") == (r.find("b"), "primary")
    with pytest.raises(KeyError):
        r.owner("b_fallback")  # b has no fallback
    assert [d.name for d in r.of_family("text")] == ["a", "b"]


@pytest.mark.parametrize("bad, match", [
    ([dep("a"), dep("a")], "listed twice"),
    ([dep("a", family="audio")], "unknown family"),
    ([dep("A")], "pattern"),
    ([dep("a_b")], "pattern"),  # '_' would collide with fallback slot keys
    ([dep("a", fallback="m")], "the primary model itself"),
    ([dep("a", limits={"max_txts": 3})], "max_txts"),
    ([dep("a", limits={"max_texts": 0})], "max_texts"),
    ([], "at least 1"),
])
def test_invalid_repositories_fail_with_the_reason(bad, match):
    with pytest.raises(ValidationError, match=match):
        repo(*bad)


def test_defaults_must_name_a_deployment_of_that_family():
    with pytest.raises(ValidationError, match="not a forecast deployment"):
        repo(dep("a"), defaults={"forecast": "a"})
    with pytest.raises(ValidationError, match="not a text deployment"):
        repo(dep("a"), defaults={"text": "zzz"})


def test_runtime_changes_keep_order_and_refuse_removing_an_explicit_default():
    r = repo(dep("a"), dep("b"), defaults={"text": "a"})
    changed = r.with_deployment(r.find("a").model_copy(update={"description": "new"}))
    assert [d.name for d in changed.deployments] == ["a", "b"] and changed.find("a").description == "new"
    assert [d.name for d in r.with_deployment(r.find("b").model_copy(update={"name": "c"})).deployments] == \
        ["a", "b", "c"]
    assert [d.name for d in r.without("b").deployments] == ["a"]
    with pytest.raises(ValueError, match="default"):
        r.without("a")
    with pytest.raises(KeyError):
        r.without("zzz")


def test_state_file_wins_over_the_configured_file(tmp_path):
    cfg = tmp_path / "models.yaml"
    cfg.write_text(yaml.safe_dump({"deployments": [dep("a")]}))
    state = tmp_path / "state" / "deployments.json"
    assert load_repository(cfg, state).find("a") is not None  # no state yet: the file
    save_state(repo(dep("a"), dep("b")), state)
    assert [d.name for d in load_repository(cfg, state).deployments] == ["a", "b"]


def test_slot_overrides_from_the_environment(monkeypatch, tmp_path):
    cfg = tmp_path / "models.yaml"
    cfg.write_text(yaml.safe_dump({"deployments": [dep("intent")]}))
    monkeypatch.setenv("TRISERVE_SLOTS__INTENT__REF", "canary")
    monkeypatch.setenv("TRISERVE_SLOTS__INTENT_FALLBACK__BATCHING__MAX_BATCH_SIZE", "4")
    r = load_repository(cfg, overrides=Settings().slots)
    assert r.slots["intent"].ref == "canary" and r.slots["intent"].batching.max_batch_size == 32
    assert r.slots["intent_fallback"].batching.max_batch_size == 4 and r.slots["intent_fallback"].ref == "stable"
    with pytest.raises(ValueError, match="unknown slots"):
        with_overrides(r, {"nope": SlotOverride(ref="x")})
    with pytest.raises(ValidationError):
        with_overrides(r, {"intent": SlotOverride(batching={"max_batch_size": 0})})
