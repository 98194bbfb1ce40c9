"""The canary guard's verdicts (kernel/routing/rollout.py CanaryGuard), fed call outcomes directly: no server, no
clock, so the latency rule is checked on the durations given, never on how fast this host is.
tests/services/test_rollout.py checks the withdrawal of an erroring canary end to end."""
from __future__ import annotations

from triserve.configs.settings import Rollout
from triserve.kernel.routing.rollout import CanaryGuard

CFG = Rollout(canary_window=10, canary_min_calls=5, canary_max_error_rate=0.2, canary_max_latency_ratio=3.0)


def fed(canary: list[tuple[bool, float]], stable: list[tuple[bool, float]], cfg: Rollout = CFG) -> CanaryGuard:
    guard = CanaryGuard(cfg)
    for role, calls in (("stable", stable), ("canary", canary)):
        for ok, seconds in calls:
            guard.record("forecast", role, ok, seconds)
    return guard


def test_a_canary_slower_than_the_ratio_allows_is_withdrawn_for_latency():
    guard = fed(canary=[(True, 0.040)] * 5, stable=[(True, 0.010)] * 10)
    assert guard.verdict("forecast") == "latency"


def test_a_canary_within_the_ratio_stays():
    assert fed(canary=[(True, 0.029)] * 10, stable=[(True, 0.010)] * 10).verdict("forecast") is None


def test_no_verdict_before_min_calls_and_no_latency_verdict_without_enough_stable_calls():
    assert fed(canary=[(False, 0.5)] * 4, stable=[(True, 0.010)] * 10).verdict("forecast") is None
    assert fed(canary=[(True, 0.5)] * 10, stable=[(True, 0.010)] * 4).verdict("forecast") is None


def test_errors_are_judged_first_and_only_successful_calls_time_a_version():
    # 3 of 10 failed (> 0.2), and they were fast: the error rate withdraws it
    assert fed(canary=[(False, 0.001)] * 3 + [(True, 0.010)] * 7,
               stable=[(True, 0.010)] * 10).verdict("forecast") == "error_rate"
    # 2 of 10 failed (allowed): their long timeouts do not count towards the median
    assert fed(canary=[(False, 5.0)] * 2 + [(True, 0.010)] * 8,
               stable=[(True, 0.010)] * 10).verdict("forecast") is None


def test_the_window_forgets_old_calls_and_reset_forgets_the_canary():
    guard = fed(canary=[(False, 0.010)] * 10 + [(True, 0.010)] * 10, stable=[(True, 0.010)] * 10)
    assert guard.verdict("forecast") is None  # the failures have left the 10-call window
    guard.record("forecast", "canary", True, 1.0)
    guard.reset("forecast")
    assert guard.verdict("forecast") is None and ("forecast", "stable") in guard.calls


def test_a_large_ratio_leaves_only_the_error_rule():
    """What tests/services/test_rollout.py's server sets: its canaries are copies of the stable model."""
    cfg = CFG.model_copy(update={"canary_max_latency_ratio": 1e9})
    assert fed(canary=[(True, 10.0)] * 10, stable=[(True, 0.001)] * 10, cfg=cfg).verdict("forecast") is None
    assert fed(canary=[(False, 0.010)] * 10, stable=[(True, 0.010)] * 10, cfg=cfg).verdict("forecast") == "error_rate"
