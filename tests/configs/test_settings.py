import pytest
from pydantic import ValidationError

from configs.settings import Settings


def test_yaml_defaults_load():
    s = Settings()
    assert s.text.primary.name and s.text.fallback.name
    assert s.detection_limits.pre_nms_topk >= s.detection_limits.max_detections


def test_environment_overrides_nested_fields(monkeypatch):
    monkeypatch.setenv("TRISERVE_TEXT__PRIMARY__BATCHING__MAX_BATCH_SIZE", "7")
    s = Settings()
    assert s.text.primary.batching.max_batch_size == 7
    assert s.text.primary.batching.max_latency_ms == Settings().text.primary.batching.max_latency_ms


def test_invalid_values_fail_at_startup(monkeypatch):
    monkeypatch.setenv("TRISERVE_TEXT__PRIMARY__BATCHING__MAX_BATCH_SIZE", "0")
    with pytest.raises(ValidationError):
        Settings()


def test_local_runner_placement_requires_gateway_batching(monkeypatch):
    monkeypatch.setenv("TRISERVE_RUNNER__PLACEMENT", "local")
    assert Settings().runner.placement == "local"
    monkeypatch.setenv("TRISERVE_RUNNER__BATCHING", "runner")
    with pytest.raises(ValidationError, match="placement='local'"):
        Settings()
