"""The knee rules: what counts as a held step, and how limits are written into the serving config."""
from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import yaml

from scripts.bench import scaling_targets
from scripts.bench.knee import held, step_seconds, write_limits, write_targets
from scripts.bench.textmix import ROOT
from triserve.configs.settings import Settings


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


def test_low_rate_steps_last_long_enough_for_a_p99():
    args = SimpleNamespace(step_seconds=8.0, min_step_requests=120)
    assert step_seconds(5, args) == 24  # coco's first step: 120 arrivals, not 40
    assert step_seconds(200, args) == 8.0


def test_write_config_derives_targets_from_this_run_and_the_previous_record_of_the_rest(tmp_path):
    """--tasks forecast --write-config: series' targets from this run, intent's and coco's kept from the previous
    docs/bench/knee.json (the smallest target over all three stays the catch-all's)."""
    for f in (*scaling_targets.HPA_FILES, *scaling_targets.KEDA_FILES, scaling_targets.ALERTS,
              scaling_targets.DASHBOARD, scaling_targets.BENTOCLOUD, scaling_targets.OPERATIONS):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / f, tmp_path / f)
    record = json.loads(scaling_targets.KNEE_JSON.read_text())
    forecast = record["tasks"]["forecast"]
    # this run: forecast held one step more (x1.25), the same latencies
    steps = [*forecast["rounds"][0]["steps"]]
    steps = [{**s, "rate": s["rate"] * 1.25} for s in steps]
    run = {**forecast, "knees": [k * 1.25 for k in forecast["knees"]], "knee_rps": forecast["knee_rps"] * 1.25,
           "limit_rps": int(0.8 * forecast["knee_rps"] * 1.25), "rounds": [{"steps": steps}] * 2}
    defaults = {"text": "intent", "detection": "coco", "forecast": "series"}
    out = first = write_targets({"tasks": {"forecast": run}}, defaults, scaling_targets.KNEE_JSON, tmp_path,
                                render=False)
    assert set(out) == {"intent", "coco", "series"}
    hpa = (tmp_path / scaling_targets.HPA_FILES[0]).read_text()
    assert f"averageValue: {out['series']['target']}" in hpa
    for dep in ("intent", "coco"):  # the previous record's targets, unchanged
        assert f"averageValue: {out[dep]['target']}" in hpa

    # a family whose ramp held no step this time keeps its previous record too (and the catch-all its minimum)
    nothing = {**record["tasks"]["detection"], "knees": [0, 0], "knee_rps": 0, "limit_rps": 0}
    out = write_targets({"tasks": {"forecast": run, "detection": nothing}}, defaults, scaling_targets.KNEE_JSON,
                        tmp_path, render=False)
    assert out["coco"] == first["coco"]
    hpa = yaml.safe_load((tmp_path / scaling_targets.HPA_FILES[0]).read_text())
    others = [m for m in hpa["spec"]["metrics"] if m["type"] == "External"]
    smallest = min((o["target"] for o in out.values()), key=lambda t: float(t.rstrip("m")))
    assert [m["external"]["target"]["averageValue"] for m in others] == [smallest]


def _fake_open_loop(capacity: float):
    """A server that holds up to `capacity` req/s: p99 10 ms below, 1 s above."""
    def run(name, requests, rate, seconds, tmp, cpu):
        p99 = 10.0 if rate <= capacity else 1000.0
        return {"rate": rate, "seconds": seconds, "requests": rate * seconds, "failed_share": 0.0,
                "dropped_iterations": 0, "latency_ms": {"p50": p99 / 2, "p99": p99}}
    return run


def test_a_ramp_whose_first_step_breaks_steps_down_and_measures_the_knee(monkeypatch, tmp_path):
    from scripts.bench import knee

    monkeypatch.setattr(knee, "open_loop", _fake_open_loop(capacity=4))
    monkeypatch.setattr(knee.time, "sleep", lambda s: None)
    args = SimpleNamespace(start_rate={"detection": 5.0}, max_rate=100, factor=1.25, step_seconds=1,
                           min_step_requests=0, load_cpu=1)
    out = knee.ramp("detection", [], args, tmp_path)
    assert [(s["rate"], s["held"]) for s in out["steps"]] == [(5, False), (2, True), (3, True), (4, True), (5, False)]
    assert out["knee_rps"] == 4
    monkeypatch.setattr(knee, "open_loop", _fake_open_loop(capacity=0.5))  # nothing holds: bounded, no knee
    out = knee.ramp("detection", [], args, tmp_path)
    assert [s["rate"] for s in out["steps"]] == [5, 2, 1] and out["knee_rps"] is None
    # the same rate measured twice (broke first, held later): the derivation reads the held step
    steps = [{"rate": 5, "held": False, "latency_ms": {"p50": 900.0}}, {"rate": 4, "latency_ms": {"p50": 5.0}},
             {"rate": 5, "held": True, "latency_ms": {"p50": 6.0}}]
    assert scaling_targets.p50_at(steps, 5) == 6.0
