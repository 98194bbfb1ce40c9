"""The runner's memory budget through a real `bentoml serve`: measured footprints and batch caps in /v1/models, and a
budget too small for the configured models refuses them at load with the numbers (not ready, never an OOM later)."""
from __future__ import annotations

import time

import httpx

from tests.conftest import NO_CAPACITY_LIMITS, Server


def _models(srv) -> dict:
    return httpx.get(f"{srv.url}/v1/models", timeout=10).json()


def test_footprints_and_caps_are_reported(server):
    status = _models(server)
    memory = {slot: m["memory"] for slot, m in status["models"].items()}
    assert set(memory) == {"detection", "detection_fallback", "text", "text_fallback", "forecast", "forecast_fallback",
                           "segmentation", "segmentation_fallback", "classification", "classification_fallback"}
    for slot, mem in memory.items():
        assert mem["resident_mb"] >= 0 and mem["per_item_mb"] >= 0 and mem["batch_cap"] >= 1, (slot, mem)
    assert memory["text"]["batch_cap"] == 64  # the default budget (80% of the machine) does not cap the tiny models
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert 'triserve_model_memory_bytes{kind="reserved",slot="text"' in metrics
    assert 'triserve_runner_memory_budget_bytes{state="total"}' in metrics


def test_budget_smaller_than_the_models_refuses_them_at_load_with_the_numbers(tiny_registry, tmp_path):
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_RUNNER__MEMORY__BUDGET_MB": "1"}
    srv = Server(tiny_registry.root, env=env, log_path=tmp_path / "budget.log")
    try:
        status, deadline = None, time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                status = _models(srv)
                if status.get("errors"):
                    break
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.5)
        assert status and status["ready"] is False, status
        errors = status["errors"]
        assert errors and all(e.startswith("MemoryRefused: ") for e in errors.values()), errors
        assert any("of 1.0 MB free" in e for e in errors.values()), errors
        assert httpx.get(f"{srv.url}/readyz", timeout=5).status_code == 503
        assert httpx.get(f"{srv.url}/livez", timeout=5).status_code == 200  # alive, just not ready: no crash loop
    finally:
        srv.stop()
