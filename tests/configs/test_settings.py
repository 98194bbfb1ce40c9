import pytest
from pydantic import ValidationError

from triserve.configs.settings import Settings


def test_yaml_defaults_load():
    s = Settings()
    lim = s.family_limits("detection")
    assert lim.pre_nms_topk >= lim.max_detections
    assert s.family_limits("text", {"max_texts": 3}).max_texts == 3  # a deployment's override


def test_environment_overrides_nested_fields(monkeypatch):
    monkeypatch.setenv("TRISERVE_LIMITS__TEXT__MAX_TEXTS", "7")
    s = Settings()
    assert s.family_limits("text").max_texts == 7
    assert s.family_limits("text").max_chars == Settings().family_limits("text").max_chars


def test_invalid_values_fail_at_startup(monkeypatch):
    monkeypatch.setenv("TRISERVE_LIMITS__TEXT__MAX_TEXTS", "0")
    with pytest.raises(ValidationError):
        Settings()
    monkeypatch.setenv("TRISERVE_LIMITS__TEXT__MAX_TEXTS", "8")
    monkeypatch.setenv("TRISERVE_LIMITS__AUDIO__MAX_SECONDS", "8")  # no such family
    with pytest.raises((ValidationError, KeyError)):
        Settings()


def test_local_runner_placement_requires_gateway_batching(monkeypatch):
    monkeypatch.setenv("TRISERVE_RUNNER__PLACEMENT", "local")
    assert Settings().runner.placement == "local"
    monkeypatch.setenv("TRISERVE_RUNNER__BATCHING", "runner")
    with pytest.raises(ValidationError, match="placement='local'"):
        Settings()
