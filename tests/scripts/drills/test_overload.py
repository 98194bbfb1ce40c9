"""The overload drill's arithmetic: what a phase delivered, the promise's ratios and verdict, medians over rounds;
the --tiers option and which topology a round is served on (fakes: no server starts)."""
from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from scripts.drills import overload
from scripts.drills.common import Row
from scripts.drills.overload import medians, parse_args, promise, serving, tiers_spec, topology, verdict

ARGS = SimpleNamespace(max_p99_ratio=1.5, min_goodput_ratio=0.9)


def _row(ms: float, status: int | str = 200, code: str | None = None, degraded: bool = False) -> Row:
    return Row("/v1/classify", 0.0, ms / 1000, status, code=code, degraded=degraded)


def test_promise_counts_goodput_tails_refusals_and_other_failures():
    rows = ([_row(100.0)] * 90 + [_row(300.0, degraded=True)] * 10 + [_row(2.0, 503, "overloaded")] * 50
            + [_row(2000.0, 504, "deadline_exceeded")] * 2 + [_row(5.0, "ClientOSError", "reset")])
    out = promise(rows, seconds=10)
    # goodput and its tail are primary answers; the fallback's (degraded) answers apart (issue 32)
    assert out["goodput_rps"] == 9.0 and out["degraded_rps"] == 1.0
    assert out["accepted_ms"]["n"] == 90 and out["accepted_ms"]["p50"] == 100.0 and out["accepted_ms"]["p99"] == 100.0
    assert out["degraded_ms"]["n"] == 10 and out["degraded_ms"]["p99"] == 300.0
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


def test_tiers_option_parses_rxg_and_picks_its_own_default_out():
    single = parse_args([])
    assert single.tiers is None and topology(single) == "single" and single.out.name == "overload.json"
    bare = parse_args(["--tiers", "--modes", "on"])
    assert bare.tiers == (1, 1) and topology(bare) == "tiers 1x1" and bare.out.name == "overload_tiers.json"
    assert bare.modes == ["on"]
    two = parse_args(["--tiers", "2X3", "--out", "/tmp/x.json"])
    assert two.tiers == (2, 3) and topology(two) == "tiers 2x3" and str(two.out) == "/tmp/x.json"
    for bad in ("2", "0x1", "1x0", "axb", "1x2x3"):
        with pytest.raises(argparse.ArgumentTypeError):
            tiers_spec(bad)
    with pytest.raises(SystemExit):
        parse_args(["--tiers", "1x0"])


STARTED: list = []  # the fake servers and tiers running now


class _FakeServer:
    def __init__(self, registry, env, log_path):
        self.url, self.port, self.env, self.log_path = "http://127.0.0.1:1", 1, env, log_path
        STARTED.append(self)

    def pids(self) -> list[int]:
        return []

    def wait_ready(self) -> float:
        return 1.0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        STARTED.remove(self)


class _FakeTiers:
    def __init__(self, cfg):
        self.cfg, self.url, self.timings = cfg, "http://127.0.0.1:2", {"all_ready_s": 2.0}
        self.gateways = [SimpleNamespace(log_path=Path(f"/tmp/g{j}.log")) for j in range(cfg.gateways)]

    def pids(self) -> list[int]:
        return []

    def describe(self) -> dict:
        return {"gateway_lb": self.cfg.gateway_lb, "haproxy_stats": "x", "haproxy_config": "y"}

    def __enter__(self):
        STARTED.append(self)
        return self

    def __exit__(self, *exc):
        STARTED.remove(self)


def test_serving_picks_the_server_or_the_tiers_with_the_same_env(monkeypatch, tmp_path):
    monkeypatch.setattr(overload, "Server", _FakeServer)
    monkeypatch.setattr(overload, "Tiers", _FakeTiers)
    env = {"TRISERVE_ADMISSION__QUEUE_CONTROL": "true"}
    log = tmp_path / "serve.log"
    with serving(parse_args([]), env, log) as target:
        srv = STARTED[-1]
        assert isinstance(srv, _FakeServer) and srv.env == env and srv.log_path == log
        assert (target.url, target.ready_s, target.logs) == ("http://127.0.0.1:1", 1.0, [log])
    with serving(parse_args(["--tiers", "1x2"]), env, log) as target:
        cfg = STARTED[-1].cfg
        assert (cfg.runners, cfg.gateways, cfg.gateway_lb, cfg.deployments) == (1, 2, True, ("intent",))
        assert cfg.env == env and cfg.log_dir == tmp_path / "serve"
        assert target.url == "http://127.0.0.1:2" and target.logs == [Path("/tmp/g0.log"), Path("/tmp/g1.log")]
        assert target.info["deployments"] == ["intent"] and "haproxy_stats" not in target.info["tiers"]
    with serving(parse_args(["--tiers", "--mix", "mixed"]), env, log):
        assert STARTED[-1].cfg.deployments == () and not STARTED[-1].cfg.gateway_lb
    with serving(parse_args(["--tiers", "--edge-limit", "8"]), env, log):
        cfg = STARTED[-1].cfg  # one gateway, but haproxy in front of it for the limit
        assert cfg.gateway_lb and (cfg.balancer.gateway_maxconn, cfg.balancer.gateway_queue_ms) == (8, 20)
    assert not STARTED  # every one stopped


def test_the_middleware_the_report_inspects_exists():
    """The report says whether the front-door hook is in the request middleware by reading its source: a moved module
    must fail here, not at the end of a 5-minute drill."""
    assert overload.MIDDLEWARE.is_file() and "queue_control.shedding(" in overload.MIDDLEWARE.read_text()
