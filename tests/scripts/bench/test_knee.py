"""The knee rules: what counts as a held step, and how limits are written into the serving config."""
from __future__ import annotations

import yaml

from configs.settings import Settings
from scripts.bench.knee import held, write_limits
from scripts.bench.textmix import ROOT


def cell(p99: float, failed: float = 0.0, dropped: int = 0, rate: int = 100, seconds: float = 10.0) -> dict:
    return {"rate": rate, "seconds": seconds, "requests": rate * seconds, "failed_share": failed,
            "dropped_iterations": dropped, "latency_ms": {"p50": p99 / 3, "p99": p99}}


def test_a_step_holds_only_within_the_slo_without_failures_or_drops():
    assert held(cell(90), slo_ms=100)
    assert not held(cell(101), slo_ms=100)
    assert not held(cell(50, failed=0.02), slo_ms=100)
    assert not held(cell(50, dropped=11), slo_ms=100)  # > 1% of 1000 arrivals
    assert not held({"rate": 100, "seconds": 10, "error": "k6 exited 1"}, slo_ms=100)


def test_limits_are_merged_into_the_access_section_and_load_as_typed_settings(tmp_path, monkeypatch):
    config = tmp_path / "serving.yaml"
    config.write_text((ROOT / "configs" / "serving.yaml").read_text())
    before = (yaml.safe_load(config.read_text()).get("access") or {}).get("deployment_rate_per_s") or {}
    write_limits({"text": 120, "detection": 30}, config)
    write_limits({"text": 150}, config)  # a later run of one task keeps the others
    expected = {**before, "detection": 30, "text": 150}
    data = yaml.safe_load(config.read_text())
    assert data["access"]["deployment_rate_per_s"] == expected
    assert config.read_text().count("deployment_rate_per_s") == 1
    monkeypatch.setenv("TRISERVE_CONFIG", str(config))
    assert Settings().access.deployment_rate_per_s == {k: float(v) for k, v in expected.items()}


def test_report_shows_pause_counts_and_where_the_server_log_is():
    from scripts.bench import knee

    res = {"started_utc": "t", "command": "c", "placement": "p", "step_seconds": 8, "factor": 1.25, "rounds": 1,
           "tasks": {}, "server_log": ".cache/bench/logs/knee_server.log",
           "stall_signals": ['triserve_gc_pause_seconds_bucket{generation="2",le="0.05"} 3.0',
                             'triserve_gc_pause_seconds_bucket{generation="2",le="0.1"} 4.0',
                             'triserve_gc_pause_seconds_count{generation="2"} 4.0',
                             'triserve_malloc_trim_seconds_sum 0.02']}
    md = knee.to_markdown(res)
    assert 'triserve_gc_pause_seconds_count{generation="2"} 4.0' in md and 'le="0.05"} 3.0' in md
    assert 'le="0.1"' not in md and "_sum" not in md  # only what the over-50-ms count needs
    assert ".cache/bench/logs/knee_server.log" in md
