"""The soak drill: its schedule and accounting without a server (fast), and one 3-minute soak on the tiny models
through a real `bentoml serve` (slow: `make test-slow`)."""
from __future__ import annotations

import pytest

from scripts.drills.common import ROOT
from scripts.drills.soak_plan import (
    QUIET_TAIL,
    STEPS,
    WEIGHTS,
    Event,
    SoakRow,
    burst_factor,
    knees,
    later_failures,
    leak_check,
    lost,
    minute_table,
    p99_drift,
    rates,
    recoveries,
    recovery_s,
    rss_growth,
    schedule,
    slope_per_min,
    step_problems,
    window_p99,
    wrong_version,
)


def row(sent: float, status: int | str = 200, done: float | None = None, **kw) -> SoakRow:
    return SoakRow("p", sent, sent + 0.01 if done is None else done, status, **kw)


@pytest.mark.parametrize("minutes", [3, 60])
def test_schedule_has_every_step_once_in_order_before_the_quiet_tail(minutes):
    events = schedule(minutes)
    assert [e.name for e in events] == list(STEPS)
    times = [e.at_s for e in events]
    assert times == sorted(times) and times[0] >= 10
    assert all(e.at_s + e.duration_s <= minutes * 60 * (1 - QUIET_TAIL) for e in events)
    assert [e.name for e in events if e.duration_s] == ["burst"]
    assert {e.name for e in events if e.fault} == {"runner_kill", "redis_stop", "redis_start", "gateway_kill",
                                                   "registry_slow_add", "registry_down_add", "corrupt_add", "burst"}
    names = [e.name for e in events]
    assert names.index("redis_stop") < names.index("redis_start")  # Redis is down between the two, then back


def test_registry_adds_get_the_room_their_weight_gives():
    events = schedule(3)
    gap = {a.name: b.at_s - a.at_s for a, b in zip(events, events[1:], strict=False)}
    unit = gap["hot_add"]
    for name, weight in WEIGHTS.items():
        assert gap[name] == pytest.approx(weight * unit, abs=0.05)
    assert gap["canary"] == pytest.approx(unit, abs=0.02)


def test_a_run_too_short_for_its_schedule_is_refused():
    with pytest.raises(ValueError, match="no time"):
        schedule(0.1)


def test_a_subset_of_steps_keeps_their_order_and_the_whole_span():
    events = schedule(4, steps=["burst", "runner_kill"])
    assert [e.name for e in events] == ["runner_kill", "burst"]  # STEPS' order, whatever order was asked
    step = (4 * 60 * (1 - QUIET_TAIL) - 10) / (WEIGHTS["runner_kill"] + 1)  # the span shared by the two steps
    assert events[0].at_s == 10 and events[1].at_s == pytest.approx(10 + WEIGHTS["runner_kill"] * step, abs=0.01)
    assert events[1].duration_s == pytest.approx(step / 3, abs=0.01)
    lone = schedule(4, steps=["burst"])
    assert [(e.name, e.at_s) for e in lone] == [("burst", 10.0)]
    assert lone[0].duration_s == pytest.approx((4 * 60 * (1 - QUIET_TAIL) - 10) / 3, abs=0.01)


@pytest.mark.parametrize("steps, message", [(["promote"], "promote needs canary"), (["bogus"], "unknown steps")])
def test_a_subset_that_cannot_run_is_refused(steps, message):
    with pytest.raises(ValueError, match=message):
        schedule(4, steps=steps)


def test_burst_triples_the_rate_only_while_it_lasts():
    events = [Event("canary", 5), Event("burst", 10, 5)]
    assert [burst_factor(events, t) for t in (9.9, 10, 14.9, 15)] == [1.0, 3.0, 3.0, 1.0]


def test_rates_come_from_the_option_the_knee_or_the_default():
    deps = {"intent": "text", "plates": "segmentation"}
    by_knee = rates(deps, {"text": 100.0}, None, default=1.5)
    assert by_knee["intent"]["rate"] == 30.0 and "knee" in by_knee["intent"]["source"]  # 0.6 x 100 / 2 deployments
    assert by_knee["plates"] == {"rate": 1.5, "source": "default 1.5 req/s (no knee measured)"}
    assert {v["rate"] for v in rates(deps, {"text": 100.0}, 4.0).values()} == {4.0}
    # an image family without a knee of its own takes detection's; --load scales the whole mix
    proxied = rates(deps, {"text": 100.0, "detection": 10.0}, None, load=0.3)
    assert proxied["plates"]["rate"] == 1.5 and "detection's" in proxied["plates"]["source"]
    assert proxied["intent"]["rate"] == 15.0


def test_knees_are_read_from_the_committed_measurement():
    assert {"text", "detection", "forecast"} <= set(knees(ROOT / "docs" / "bench" / "knee.json"))
    assert knees(ROOT / "no-such.json") == {}
    assert knees(ROOT / "no-such.json", ROOT / "docs" / "bench" / "knee.json") == knees(ROOT / "docs" / "bench" /
                                                                                   "knee.json")


def test_lost_is_only_what_the_server_never_answered():
    answered = (200, 503, 429, "grpc:UNAVAILABLE", "grpc:RESOURCE_EXHAUSTED", "grpc:DEADLINE_EXCEEDED")
    assert [lost(row(0, s)) for s in answered] == [False] * 6  # the server's own deadline is an answer
    assert lost(row(0, "ServerDisconnectedError")) and lost(row(0, "client_deadline"))


def test_wrong_version_counts_only_pinned_answers_from_another_version():
    assert wrong_version(row(0, pinned="1.0", version="1.1"))
    assert not wrong_version(row(0, pinned="1.0", version="1.0"))
    assert not wrong_version(row(0, 404, pinned="1.0"))  # refused, not answered by another version
    assert not wrong_version(row(0, version="1.1"))  # not pinned


def test_minute_table_counts_answered_failed_degraded_and_latency_per_deployment():
    rows = [row(1, deployment="a"), row(2, degraded=True, deployment="a"), row(3, 503, code="overloaded"),
            row(61, "ClientOSError"), row(62, deployment="b", done=62.5)]
    m0, m1 = minute_table(rows)
    assert (m0["sent"], m0["answered"], m0["degraded"], m0["failed"], m0["lost"]) == (3, 2, 1,
                                                                                      {"503:overloaded": 1}, 0)
    assert m0["latency_ms"]["a"]["p50"] == pytest.approx(10.0)  # primary answers only
    assert (m1["failed"], m1["lost"], m1["latency_ms"]["b"]["p99"]) == ({"ClientOSError": 1}, 1, 500.0)


def test_recovery_is_zero_without_failures_and_none_without_a_success_after_them():
    assert recovery_s([row(11)], 10, 20) == 0.0
    assert recovery_s([row(11, 503), row(12, 503), row(13, done=14.5)], 10, 20) == 4.5
    assert recovery_s([row(11, 503), row(11.5, done=11.6), row(12, 503)], 10, 20) is None


def test_recovery_ends_with_the_failures_the_fault_opened_and_later_ones_are_counted_apart():
    opened = [row(11, 503), row(12, 503), row(13, done=14.5), *(row(t) for t in range(15, 40))]
    stray = [row(30.5, 503)]  # 17 s after the opening run ended: the system had long recovered
    assert recovery_s(opened + stray, 10, 40) == 4.5
    assert later_failures(opened + stray, 10, 40) == 1
    assert later_failures(opened, 10, 40) == 0
    # nothing failed in the first 5 s: recovered at once, the failure at 25 s is a later one
    late = [row(11), row(25, 503), row(26)]
    assert (recovery_s(late, 10, 40), later_failures(late, 10, 40)) == (0.0, 1)
    # failures less than 5 s apart belong to one run
    chain = [row(11, 503), row(15, 503), row(19, 503), row(19.5, done=20.0)]
    assert (recovery_s(chain, 10, 40), later_failures(chain, 10, 40)) == (10.0, 0)
    events = [Event("runner_kill", 10)]
    assert recoveries(opened + stray, events, 40, measure=later_failures) == {"runner_kill": 1}


def test_burst_recovery_is_measured_from_its_end():
    events = [Event("burst", 10, 5), Event("hot_remove", 30)]
    rows = [row(11, 429), row(16, 429), row(17, done=17.5)]
    assert recoveries(rows, events, 40) == {"burst": 2.5}


def test_window_p99_shows_a_stall_that_failed_nothing():
    events = [Event("redis_stop", 10), Event("canary", 15), Event("registry_slow_add", 20)]
    rows = [row(11, done=11.01), row(12, done=18.0), row(13, 503), row(21, done=21.05)]
    p99 = window_p99(rows, events, 30)
    assert p99["redis_stop"] == pytest.approx(6000, rel=0.05)  # up to the next fault, changes included; failures not
    assert p99["registry_slow_add"] == pytest.approx(50)
    assert window_p99(rows, [Event("burst", 25, 1)], 30) == {"burst": None}


def test_step_problems_name_each_fault_step_that_did_not_show_its_outcome():
    good = [{"event": "registry_slow_add", "status": 200, "listed": True},
            {"event": "registry_down_add", "status": 409, "code": "deployment_refused", "listed": False},
            {"event": "redis_start", "shared_again_s": 1.2}, {"event": "canary", "status": 500}]
    assert step_problems(good) == {}
    assert step_problems([{"event": "registry_slow_add", "status": 504, "code": "deadline_exceeded"}]) == {}
    bad = step_problems([{"event": "registry_slow_add", "error": "ReadTimeout: timed out"},
                         {"event": "registry_down_add", "status": 200, "listed": True},
                         {"event": "redis_start", "shared_again_s": None}])
    assert set(bad) == {"registry_slow_add", "registry_down_add", "redis_start"}
    assert "ReadTimeout" in bad["registry_slow_add"]
    half = step_problems([{"event": "registry_down_add", "status": 409, "code": "deployment_refused", "listed": True}])
    assert "half added" in half["registry_down_add"]


def test_leak_check_reads_the_last_half_slope():
    flat = [{"t": t, "proc": "runner[0]", "rss_mb": 100.0, "fds": 40, "threads": 12} for t in range(0, 600, 30)]
    grow = [{"t": t, "proc": "gw[0]", "rss_mb": 100.0 + t / 60, "fds": 40, "threads": 12} for t in range(0, 600, 30)]
    check = leak_check(flat + grow, 600)
    assert check["runner[0]"]["rss_mb"]["slope_per_min"] == 0.0
    assert check["gw[0]"]["rss_mb"]["slope_per_min"] == pytest.approx(1.0)
    assert check["gw[0]"]["threads"]["growth"] == 0.0
    assert slope_per_min([(0, 1.0), (60, 2.0)]) is None


@pytest.mark.slow
def test_three_minute_soak_on_the_tiny_models_loses_nothing(tiny_registry, tmp_path):
    """~4 minutes: the whole drill against a real server; functional outcomes only, no timing."""
    from scripts.drills import soak
    from tests.conftest import TINY_MODELS

    res = soak.main(["--minutes", "3", "--rate", "2", "--registry", str(tiny_registry.root),
                     "--models-file", str(TINY_MODELS), "--out", str(tmp_path / "soak"),
                     "--env", "TRISERVE_ACCESS__CAPACITY_LIMITS=false"])
    steps = {a["event"]: a for a in res["actions"]}
    assert set(steps) == set(STEPS)
    assert res["lost"] == 0 and res["wrong_version"] == 0 and res["pinned_requests"] > 0
    assert steps["corrupt_add"]["refused"], steps["corrupt_add"]
    assert all(steps[s]["status"] == 200 for s in ("hot_add", "canary", "promote", "rollback", "hot_remove"))
    assert res["step_problems"] == {}, res["step_problems"]  # registry adds served or refused cleanly, Redis back
    assert steps["registry_down_add"]["status"] >= 400 and not steps["registry_down_add"]["listed"]
    assert steps["redis_stop"]["bucket_checks_before"] > 0  # the limits were checked in Redis before it died
    assert all(v is not None for v in res["recovery_s"].values()), res["recovery_s"]  # each fault recovered from
    assert {"rest", "grpc", "oip_rest", "oip_grpc"} <= set(res["by_transport"])
    assert (tmp_path / "soak.md").exists() and (tmp_path / "soak.json").exists()


def test_p99_drift_compares_the_first_ten_minutes_with_the_quiet_tail():
    rows = [row(t, done=t + 0.1) for t in range(0, 600, 2)] + [row(t, done=t + 0.15) for t in range(3200, 3600, 2)]
    rows.append(row(1000, done=1030))  # in the middle of the run: neither
    drift = p99_drift(rows, 3600)
    assert (drift["first_s"], drift["first_p99_ms"], drift["end_p99_ms"], drift["ratio"]) == (600, 100.0, 150.0, 1.5)
    assert p99_drift(rows, 180)["first_s"] == 30  # a short run: its first sixth


def test_rss_growth_is_measured_after_each_process_settles():
    procs = [{"t": t, "proc": "runner 1", "rss_mb": 100 + t / 100} for t in range(0, 3600, 5)]
    procs += [{"t": t, "proc": "runner 2", "rss_mb": 200.0} for t in range(1000, 3600, 5)]  # started by a fault
    procs += [{"t": t, "proc": "gateway 3", "rss_mb": 50.0} for t in range(0, 900, 5)]  # killed: not at the end
    growth = rss_growth(procs, 3600)
    assert set(growth) == {"runner 1", "runner 2"}
    assert growth["runner 1"]["from_s"] == 600 and growth["runner 1"]["from_mb"] == 106.0
    assert growth["runner 1"]["growth"] == round((135.95 - 106) / 106, 4)
    assert (growth["runner 2"]["from_s"], growth["runner 2"]["growth"]) == (1300, 0.0)
