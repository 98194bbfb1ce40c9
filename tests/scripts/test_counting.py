"""Benchmark honesty (issue 32): every benchmark and drill counts a 200 whose answer says `degraded: true` (a fallback
model answered) apart, never as throughput; throughput and latency count primary answers. Each counting place is fed a
mix of primary, degraded and failed answers: from a loopback server (the load generators) or as rows/counters."""
from __future__ import annotations

import asyncio
import json
from argparse import Namespace

import pytest

from scripts.bench import harness, knee, load_mix, scaleout_batching, wrk
from scripts.drills import loadgen, overload
from scripts.drills.common import DEGRADED, FAILED, PRIMARY, Row, answer_kind, by_kind, says_degraded

PRIMARY_MS, DEGRADED_MS = 2.0, 60.0  # the fake fallback is slow: mixing its latency in would show in p50


def _answer(path: str, body: dict) -> tuple[int, dict, float]:
    """Like triserve: the request body's "answer" says which kind ("primary", "degraded" or "failed"); load_mix's
    bodies (no "answer") get a degraded answer on /v1/forecast and a primary one elsewhere."""
    kind = body.get("answer") or ("degraded" if path == "/v1/forecast" else "primary")
    if kind == "failed":
        return 503, {"error": {"code": "overloaded", "message": "full"}}, 0.0
    delay = (DEGRADED_MS if kind == "degraded" else PRIMARY_MS) / 1000
    return 200, {"results": [{"label": "x"}], "degraded": kind == "degraded",
                 "degraded_reason": "overload" if kind == "degraded" else None}, delay


@pytest.fixture()
def server(json_server):
    return json_server(_answer)


def _requests(base: str, kinds: list[str]) -> list[tuple[str, bytes]]:
    return [(f"{base}/v1/classify", json.dumps({"texts": ["hi"], "answer": k}).encode()) for k in kinds]


def _row(ms: float, status: int | str = 200, degraded: bool | None = False, sent: float = 0.0) -> Row:
    return Row("/v1/classify", sent, sent + ms / 1000, status, degraded=degraded)


# --------------------------------------------------------------------------------------------------------------------
# the rule
# --------------------------------------------------------------------------------------------------------------------
def test_the_rule_primary_degraded_failed():
    assert answer_kind(200, False) == answer_kind(200, None) == PRIMARY  # peers say nothing: primary
    assert answer_kind(200, True) == DEGRADED
    assert answer_kind(503, False) == answer_kind("ClientOSError", None) == answer_kind(503, True) == FAILED
    assert says_degraded(b'{"degraded": true, "degraded_reason": "overload"}')
    assert says_degraded(b'{"parameters":{"degraded":true}}')  # OIP: in the parameters
    assert not says_degraded(b'{"degraded": false}') and not says_degraded(b'{"results": []}')
    assert not says_degraded(b'{"label": "\\"degraded\\": true"}')  # inside a string, escaped
    rows = [_row(1), _row(2, degraded=True), _row(3, 503), _row(4, degraded=None)]
    assert [r.primary for r in rows] == [True, False, False, True] and [r.ok for r in rows] == [True, True, False, True]
    assert {k: len(v) for k, v in by_kind(rows).items()} == {PRIMARY: 2, DEGRADED: 1, FAILED: 1}


# --------------------------------------------------------------------------------------------------------------------
# the bench harness: closed loop, wrk, open loop, the tables
# --------------------------------------------------------------------------------------------------------------------
def test_tally_counts_degraded_answers_apart_from_throughput():
    t = harness.Tally()
    for _ in range(6):
        t.add(200, PRIMARY_MS, b'{"degraded": false}')
    for _ in range(3):
        t.add(200, DEGRADED_MS, b'{"degraded": true, "degraded_reason": "overload"}')
    t.add(503, 1.0, b'{"error": {}}')
    t.add("transport_error", 5.0, error="ClientOSError")
    cell = t.cell(seconds=2.0)
    assert cell["ok"] == 6 and cell["texts_per_s"] == 3.0  # primary answers per second, not 9 / 2
    assert cell["degraded"] == 3 and cell["degraded_per_s"] == 1.5 and cell["degraded_reasons"] == {"overload": 3}
    assert cell["non_200"] == 2 and cell["errors"] == {"ClientOSError": 1}
    assert cell["latency_ms"]["p99"] == PRIMARY_MS  # the degraded answers' 40 ms are not in it
    assert cell["latency_degraded_ms"]["p50"] == DEGRADED_MS and cell["latency_of"] == "primary answers"


def test_closed_loop_counts_primary_answers_as_throughput(server):
    reqs = _requests(server, ["primary", "primary", "degraded", "failed"])
    cell = harness.load_cell("aiohttp", reqs, 4, 0.0, 1.0, 400, None)
    assert cell["ok"] > 0 and cell["degraded"] > 0 and cell["non_200"] > 0
    assert cell["texts_per_s"] == pytest.approx(cell["ok"] / cell["seconds"], rel=0.05)
    assert cell["ok"] + cell["degraded"] + cell["non_200"] == sum(cell["status"].values())
    assert cell["latency_ms"]["p50"] < DEGRADED_MS <= cell["latency_degraded_ms"]["p50"]  # (a shared host: p50s)
    assert cell["degraded_reasons"] == {"overload": cell["degraded"]}


def test_wrk_counts_degraded_answers_apart():
    raw = {"requests": 100, "sent": 101, "degraded": 30, "duration_us": 2_000_000, "bytes": 1,
           "errors": {"connect": 0, "read": 0, "write": 0, "status": 10, "timeout": 0},
           "latency_us": {"p50": 1000, "p90": 2000, "p99": 3000, "p99.9": 4000, "max": 5000, "mean": 1500.0}}
    cell = wrk.summarise(raw, concurrency=8, max_requests=1000)
    assert cell["ok"] == 60 and cell["texts_per_s"] == 30.0 and cell["degraded"] == 30
    assert cell["status"] == {"<400": 90, ">=400": 10} and cell["non_200"] == 10
    assert cell["latency_of"].startswith("every answer")  # wrk cannot time the primary answers alone: it says so
    clean = wrk.summarise({**raw, "degraded": 0, "errors": {**raw["errors"], "status": 0}}, 8, 1000)
    assert clean["ok"] == 100 and clean["latency_of"].startswith("primary")
    old = {k: v for k, v in raw.items() if k != "degraded"}  # a wrk_replay.lua without the counter
    assert wrk.summarise(old, 8, 1000)["ok"] == 90


def test_wrk_replay_script_counts_the_degraded_200s():
    lua = wrk.LUA.read_text()
    assert "function response(status, headers, body)" in lua and '"degraded"%s*:%s*true' in lua
    assert '"degraded":%d' in lua


def test_open_loop_cell_counts_and_times_primary_answers(server, tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "k6_binary", lambda: None)
    reqs = _requests(server, ["primary", "degraded", "primary", "failed"])
    cell = harness.open_loop("triserve", reqs, rate=40, duration_s=1.0, tmp=tmp_path, cpu=0)
    assert cell["requests"] >= 35 and cell["ok"] + cell["degraded"] < cell["requests"]
    assert cell["degraded"] >= 8 and cell["ok"] >= 16 and cell["failed_share"] == pytest.approx(0.25, abs=0.05)
    assert cell["latency_ms"]["p50"] < DEGRADED_MS <= cell["latency_degraded_ms"]["p50"]
    assert cell["latency_all_ms"]["max"] >= DEGRADED_MS


def test_k6_cell_reads_the_primary_and_degraded_metrics(tmp_path, monkeypatch):
    summary = {"metrics": {"http_reqs": {"count": 100}, "dropped_iterations": {"count": 0},
                           "http_req_failed": {"value": 0.1}, "primary_answers": {"count": 60},
                           "degraded_answers": {"count": 30},
                           "http_req_duration": {"p(50)": 5, "p(90)": 40, "p(99)": 45, "max": 50},
                           "primary_req_duration": {"p(50)": 2, "p(90)": 3, "p(99)": 4, "max": 5},
                           "degraded_req_duration": {"p(50)": 40, "p(90)": 42, "p(99)": 45, "max": 50}}}

    def fake_k6(cmd, **kw):
        out = cmd[cmd.index("--summary-export") + 1]
        with open(out, "w") as f:
            json.dump(summary, f)
        return Namespace(returncode=0, stdout="", stderr="")

    monkeypatch.setattr(harness, "k6_binary", lambda: "/usr/bin/k6")
    monkeypatch.setattr(harness.subprocess, "run", fake_k6)
    cell = harness.open_loop("triserve", [("http://127.0.0.1:1/v1/classify", b"{}")], 10, 1.0, tmp_path, 0)
    assert (cell["ok"], cell["degraded"], cell["latency_ms"]["p99"]) == (60, 30, 4)
    assert cell["latency_degraded_ms"]["p50"] == 40 and cell["latency_all_ms"]["p50"] == 5
    js = (harness.ROOT / "scripts/bench/k6_open_loop.js").read_text()
    assert "primary_req_duration" in js and "degraded_answers" in js and "responseType: 'text'" in js


def test_tables_keep_degraded_answers_out_of_throughput_and_say_so():
    def cell(tp, degraded, latency_of="primary answers"):
        return {"texts_per_s": tp, "latency_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0}, "non_200": 0,
                "degraded": degraded, "latency_of": latency_of}

    rounds = [{"triserve_nobatch": {"32": cell(50.0, 400)}, "triserve": {"32": cell(150.0, 0)}},
              {"triserve_nobatch": {"32": cell(60.0, 300, "every answer (wrk)")}, "triserve": {"32": cell(140.0, 0)}}]
    table = harness.system_table(rounds, ["triserve_nobatch", "triserve"], [32], "texts_per_s")
    assert table["triserve_nobatch"]["32"]["degraded_total"] == 700
    assert table["triserve_nobatch"]["32"]["texts_per_s"]["median"] == 55.0
    assert table["triserve_nobatch"]["32"]["latency_includes_degraded"]
    assert not table["triserve"]["32"]["latency_includes_degraded"]
    md = "\n".join(harness.systems_markdown(table, "texts_per_s", "texts"))
    assert "| degraded | non-200 |" in md
    assert "| triserve_nobatch | 32 | 55 [50-60] | 1.00 [1.00-1.00] * | 2.00 [2.00-2.00] * |" in md
    assert "| 700 | 0 |" in md and "wrk cannot time the primary answers alone" in md
    assert "TRISERVE_ADMISSION__OVERLOAD_FALLBACK_SHARE=0" in md


def test_every_compared_triserve_system_starts_with_the_spill_off():
    args = Namespace(intra_op=1, nobatch_env="TRISERVE_SLOTS__INTENT__BATCHING__MAX_BATCH_SIZE=1")
    for name in harness.TRISERVE_SYSTEMS:
        assert harness.triserve_env(name, args)["TRISERVE_ADMISSION__OVERLOAD_FALLBACK_SHARE"] == "0"
    from triserve.configs.settings import Settings

    assert Settings(**{"admission": {"overload_fallback_share": 0}}).admission.overload_fallback_share == 0


def test_the_spill_env_is_the_settings_field(monkeypatch):
    from triserve.configs.settings import Settings

    for k, v in harness.SPILL_OFF.items():
        monkeypatch.setenv(k, v)
    assert Settings().admission.overload_fallback_share == 0


# --------------------------------------------------------------------------------------------------------------------
# knee, load_mix, scaleout, the drills' load generator and the overload drill
# --------------------------------------------------------------------------------------------------------------------
def test_a_knee_step_answered_by_the_fallback_does_not_hold():
    step = {"rate": 100, "seconds": 10, "requests": 1000, "failed_share": 0.0, "dropped_iterations": 0,
            "ok": 990, "degraded": 10, "latency_ms": {"p50": 10.0, "p99": 50.0}}
    assert knee.held(step, slo_ms=100)  # 1% degraded: still held
    assert not knee.held({**step, "ok": 800, "degraded": 200}, slo_ms=100)
    assert not knee.held({**step, "ok": 0, "degraded": 1000, "latency_ms": {"p50": None, "p99": None}}, slo_ms=100)


def test_load_mix_throughput_is_primary_answers(server):
    res = asyncio.run(load_mix.run(server, 30, 3, 30))
    assert res["requests"] == 30 and res["degraded"] == 10 and res["degraded_by_path"] == {"/v1/forecast": 10}
    assert res["ok"] == 20 and res["throughput_rps"] == pytest.approx(20 / res["seconds"], rel=0.05)
    assert set(res["latency_ms"]) == {"/v1/detect", "/v1/classify"}  # forecast answered degraded only
    assert res["latency_degraded_ms"]["/v1/forecast"][50] >= DEGRADED_MS


def test_loadgen_phase_and_per_second_count_primary_answers():
    rows = ([_row(PRIMARY_MS, sent=0.1)] * 6 + [_row(DEGRADED_MS, degraded=True, sent=0.2)] * 3
            + [_row(1.0, 503, sent=1.5)])
    p = loadgen.phase(rows, None, None)
    assert (p["requests"], p["ok"], p["degraded"], p["failed"]) == (10, 6, 3, 1)
    assert p["latency_ok_ms"]["p99"] == PRIMARY_MS and p["latency_degraded_ms"]["p50"] == DEGRADED_MS
    assert [(s["ok"], s["degraded"], s["failed"]) for s in loadgen.per_second(rows)] == [(6, 3, 0), (0, 0, 1)]


def test_scaleout_failed_and_degraded_are_apart():
    def measured(ok, degraded, failed):
        return {"requests": ok + degraded + failed, "ok": ok, "degraded": degraded, "failed": failed,
                "mean_batch": 4.0, "throughput_rps": ok / 10, "latency_ms": {"p50": 1.0, "p99": 2.0},
                "busiest_worker_share": 0.5, "distribution": {"1": 1}}

    cells = [{"mode": "gateway", "topology": "1w", "closed": measured(90, 8, 2), "open": measured(50, 0, 0)}]
    agg = scaleout_batching.aggregate(cells)["gateway/1w"]
    assert agg["closed"]["failed"] == 2 and agg["closed"]["degraded"] == 8
    assert agg["closed"]["throughput_rps"]["median"] == 9.0


def test_overload_goodput_and_capacity_are_primary_answers():
    rows = [_row(100.0)] * 90 + [_row(300.0, degraded=True)] * 10 + [_row(2.0, 503)] * 5
    out = overload.promise(rows, seconds=10)
    assert out["goodput_rps"] == 9.0 and out["degraded_rps"] == 1.0
    assert out["accepted_ms"]["n"] == 90 and out["accepted_ms"]["p99"] == 100.0  # not the fallback's 300 ms
    assert out["degraded_ms"]["n"] == 10 and out["degraded_ms"]["p50"] == 300.0
    per_s = overload.per_second_p99(rows, 0.0, 1.0)
    assert per_s == [{"s": 0, "n": 105, "ok": 90, "degraded": 10, "p50": 100.0, "p99": 100.0}]
