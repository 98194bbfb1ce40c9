"""The overload drill's arithmetic: what a phase delivered, the promise's ratios and verdict, medians over rounds."""
from __future__ import annotations

from types import SimpleNamespace

from scripts.drills.common import Row
from scripts.drills.overload import medians, promise, verdict

ARGS = SimpleNamespace(max_p99_ratio=1.5, min_goodput_ratio=0.9)


def _row(ms: float, status: int | str = 200, code: str | None = None, degraded: bool = False) -> Row:
    return Row("/v1/classify", 0.0, ms / 1000, status, code=code, degraded=degraded)


def test_promise_counts_goodput_tails_refusals_and_other_failures():
    rows = ([_row(100.0)] * 90 + [_row(300.0, degraded=True)] * 10 + [_row(2.0, 503, "overloaded")] * 50
            + [_row(2000.0, 504, "deadline_exceeded")] * 2 + [_row(5.0, "ClientOSError", "reset")])
    out = promise(rows, seconds=10)
    assert out["goodput_rps"] == 10.0 and out["goodput_primary_rps"] == 9.0
    assert out["accepted_ms"]["n"] == 100 and out["accepted_ms"]["p50"] == 100.0 and out["accepted_ms"]["p99"] == 300.0
    assert out["refused"] == 50 and out["refused_ms"]["p99"] == 2.0 and out["refused_with_retry_after_and_code"] == 50
    assert (out["5xx"], out["5xx_other_than_fast_refusals"], out["transport_errors"]) == (52, 2, 1)


def test_verdict_needs_both_ratios():
    assert verdict({"accepted_p99_over_capacity_p99": 1.4, "goodput_over_capacity": 0.95}, ARGS)["both"]
    assert not verdict({"accepted_p99_over_capacity_p99": 1.6, "goodput_over_capacity": 0.95}, ARGS)["both"]
    v = verdict({"accepted_p99_over_capacity_p99": 1.2, "goodput_over_capacity": 0.8}, ARGS)
    assert v == {"accepted_p99": True, "goodput": False, "both": False}
    assert not verdict({"accepted_p99_over_capacity_p99": None, "goodput_over_capacity": 1.0}, ARGS)["both"]


def test_medians_over_rounds_with_ranges():
    runs = [{"capacity": {"ok_rps": r, "latency_ms": {"p99": 200.0}}, "ratios": {"goodput_over_capacity": g}}
            for r, g in ((100.0, 0.9), (140.0, 1.1), (120.0, 0.95))]
    out = medians(runs)
    assert out["capacity_rps"] == 120.0 and out["capacity_rps_range"] == [100.0, 140.0]
    assert out["goodput_over_capacity"] == 0.95 and out["unloaded_p99_ms"] is None
