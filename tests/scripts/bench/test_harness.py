"""scripts/bench/harness.py, what compare.py and compare_detect.py run on: the rounds against a loopback server (the
aiohttp closed loop), the tables over rounds and the reports of both families (no triserve, no model)."""
from __future__ import annotations

import json
import time
from argparse import Namespace

import pytest

from scripts.bench import compare, compare_detect, harness


@pytest.fixture()
def server(json_server):
    return json_server(lambda path, body: (200, {"results": [{"label": "x"}], "degraded": False}, 0.0))


def _args(**kw) -> Namespace:
    base = {"rounds": 2, "systems": ["inproc", "naive"], "concurrency": [1, 2], "warmup": 0.0, "duration": 0.4,
            "max_requests": 200, "load_generator": "aiohttp", "load_cpu": None, "max_total_seconds": 60}
    return Namespace(**{**base, **kw})


def test_rounds_interleave_the_systems_and_name_the_family_unit(server):
    calls = []

    def inproc() -> dict:
        calls.append(1)
        return {"ceiling_images_per_s": 10.0, "best": "intra1/b4", "single_call_ms_p50": 5.0}

    notes: list[str] = []
    servers: dict = {"naive": (None, server)}  # (the peer is not needed: the load goes to the URL)
    requests = {"naive": [compare_detect.request_for("naive", server, "QUJD")]}
    rounds = harness.run_rounds(_args(), compare_detect.FAMILY, servers, requests, inproc, time.monotonic(), notes)
    assert len(rounds) == 2 and len(calls) == 2 and not notes
    for rec in rounds:
        assert rec["inproc"]["ceiling_images_per_s"] == 10.0 and rec["batch_histograms"] == {}
        for c in ("1", "2"):
            cell = rec["naive"][c]
            assert "texts_per_s" not in cell and cell["images_per_s"] > 0 and cell["non_200"] == 0
            assert cell["ok"] > 0 and cell["latency_ms"]["p50"] > 0
    table = harness.system_table(rounds, ["inproc", "naive"], [1, 2], "images_per_s")
    assert set(table) == {"naive"} and table["naive"]["1"]["images_per_s"]["n"] == 2


def test_rounds_stop_starting_cells_after_the_time_budget():
    notes: list[str] = []
    rounds = harness.run_rounds(_args(max_total_seconds=-1), compare.FAMILY, {}, {}, dict, time.monotonic(), notes)
    assert rounds == [{"batch_histograms": {}}, {"batch_histograms": {}}]
    assert notes and "round 1" in notes[0]


def _text_round(tri32: float) -> dict:
    def cell(tp, p50=2.0):
        return {"texts_per_s": tp, "latency_ms": {"p50": p50, "p90": 3.0, "p99": 4.0}, "non_200": 0}

    by_config = {"intra1/b1/padded": {"texts_per_s": 50.0, "pad_efficiency": 1.0},
                 "intra1/b8/bucketed": {"texts_per_s": 100.0, "pad_efficiency": 0.9}}
    return {"inproc": {"ceiling_texts_per_s": 100.0, "single_call_ms_p50": 1.0, "best": "intra1/b8/bucketed",
                       "best_padded_same_threads": "intra1/b1/padded", "ceiling_padded_same_threads_texts_per_s": 50.0,
                       "by_config": by_config},
            "triserve": {"1": cell(40, p50=3.5), "32": cell(tri32)}, "triserve_nobatch": {"32": cell(tri32 / 3)},
            "naive": {"32": cell(tri32 / 2)}, "batch_histograms": {}}


def test_text_summary_and_report():
    args = Namespace(systems=["inproc", "naive", "triserve_nobatch", "triserve"], concurrency=[1, 32])
    s = compare.summarise([_text_round(90.0), _text_round(80.0)], args)
    assert s["table"]["inproc"]["ceiling_texts_per_s"]["median"] == 100.0
    assert s["table"]["inproc"]["pad_efficiency"] == {"intra1/b1/padded": 1.0, "intra1/b8/bucketed": 0.9}
    assert s["table"]["triserve"]["32"]["texts_per_s"]["median"] == 85.0
    assert s["goals"]["batching_on_vs_off_c32"]["median"] == pytest.approx(3.0)
    # 2.5 ms over the in-process call misses the 2.0 ms goal
    assert s["goals"]["c1_p50_overhead_ms"]["median"] == 2.5 and s["goals"]["c1_p50_overhead_ms"]["met"] is False
    # naive is the only peer measured: the best-peer goal reads it (85 / 42.5)
    assert s["goals"]["triserve_vs_best_peer_c32"]["median"] == pytest.approx(2.0)
    res = {"summary": s, "started_utc": "t", "command": "python -m scripts.bench.compare", "model": "m",
           "texts_source": "src", "placement": {"server_cpu": 0, "load_cpu": 1, "load": "closed loop, wrk"},
           "rounds": 2, "warmup_s": 1, "duration_s": 2, "host": "h", "skipped": {"pytriton": "no venv"},
           "notes": ["a note"], "c1_breakdown": {"triserve/fresh": {"requests": 3, "client_ms_p50": 1.0,
                                                                  "server_timings_ms_p50": {"total_ms": 0.5}}}}
    md = compare.to_markdown(res)
    assert "| triserve | 32 | 85 [80-90] | 2.00 [2.00-2.00] |" in md
    assert "- pytriton: no venv" in md and "- a note" in md and "triserve/fresh, 3 sequential requests" in md
    assert "**100 [100-100] texts/s**" in md


def test_detection_report_renders_the_shared_blocks():
    rec = {"inproc": {"ceiling_images_per_s": 20.0, "single_call_ms_p50": 4.0, "best": "intra1/b4",
                      "by_config": {"intra1/b4": {"images_per_s": 20.0, "call_ms_p50": 9.0}},
                      "single_call_stage_ms_p50": {"run": 3.0}},
           "naive": {"32": {"images_per_s": 10.0, "latency_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0}, "non_200": 1}},
           "batch_histograms": {}}
    s = compare_detect.summarise([rec], ["inproc", "naive"], [32], 32)
    res = {"summary": s, "started_utc": "t", "command": "c", "model": "m", "images_source": "src",
           "placement": {"server_cpu": 0, "load_cpu": 1, "load": "closed loop, aiohttp"}, "rounds": 1, "warmup_s": 1,
           "duration_s": 2, "wall_seconds": 3, "host": "h"}
    md = compare_detect.to_markdown(res)
    assert "| naive | 32 | 10 [10-10] | 1.00 [1.00-1.00] | 2.00 [2.00-2.00] | 3.00 [3.00-3.00] | 0 | 1 |" in md
    assert "| intra1/b4 | 20 [20-20] | 9.00 [9.00-9.00] |" in md and "run 3.00 [3.00-3.00]" in md
    assert "Not measured" not in md and "Notes" not in md


def test_back_to_back_cycles_the_items_in_batches_for_the_time_given():
    seen: list[list[int]] = []

    def call(chunk: list[int]) -> int:
        seen.append(chunk)
        return sum(chunk)

    row, results = harness.back_to_back(call, [1, 2, 3], 2, 0.05, "things_per_s")
    assert seen[:3] == [[1, 2], [3, 1], [2, 3]] and results[:3] == [3, 4, 5]
    assert row["calls"] == len(seen) >= 3 and row["things_per_s"] > 0
    assert 0 <= row["call_ms_p50"] <= row["call_ms_p99"]


def test_detection_ceiling_is_the_best_configuration_at_the_servers_threads(monkeypatch):
    def pipeline(sess, manifest, b64s):  # fake: a batch of 4 is twice as fast per image as one image
        time.sleep(0.002 if len(b64s) == 1 else 0.004)
        return [[] for _ in b64s], {"decode": 0.1, "run": 1.0 * len(b64s)}

    monkeypatch.setattr(compare_detect, "open_session", lambda intra: (f"sess{intra}", {}))
    monkeypatch.setattr(compare_detect, "run_pipeline", pipeline)
    out = compare_detect.inproc_measure(["a", "b", "c"], [1, 4], 0.05, [1, 0])
    assert set(out["by_config"]) == {"intra1/b1", "intra1/b4", "intra0/b1", "intra0/b4"}
    assert out["best"] == "intra1/b4" and out["best_batch"] == 4
    assert out["ceiling_images_per_s"] == out["by_config"]["intra1/b4"]["images_per_s"]
    assert out["single_call_ms_p50"] == out["by_config"]["intra1/b1"]["call_ms_p50"]
    assert out["single_call_stage_ms_p50"] == {"decode": 0.1, "run": 1.0}


# --------------------------------------------------------------------------------------------------------------------
# the KServe and MLServer peers (issue 32 part 3): systems, starters, request bodies, the latency-vs-throughput plot
# --------------------------------------------------------------------------------------------------------------------
def test_batching_off_is_batch_one_with_the_standing_queue_control_off():
    """With batch 1 the control's round is one item: a closed loop would measure its refusals, not batching."""
    env = dict(kv.split("=", 1) for kv in harness.nobatch_env("intent").split(","))
    assert env == {"TRISERVE_SLOTS__INTENT__BATCHING__MAX_BATCH_SIZE": "1",
                   "TRISERVE_ADMISSION__QUEUE_CONTROL": "false"}


def test_kserve_and_mlserver_are_http_peers_not_triserve():
    for name in ("kserve", "mlserver"):
        assert name in harness.SYSTEMS and name in harness.HTTP_SYSTEMS and name in harness.PEER_STARTERS
        assert name not in harness.TRISERVE_SYSTEMS


@pytest.mark.parametrize("fam", [compare.FAMILY, compare_detect.FAMILY])
def test_a_peer_without_its_venv_is_skipped_with_the_recipe(fam, tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "model_dir", lambda name: (tmp_path / name, {}))  # no model store needed
    args = Namespace(systems=["kserve", "mlserver"], kserve_python=str(tmp_path / "no/bin/python"),
                     mlserver_python=str(tmp_path / "none/bin/python"), intra_op=1, server_cpu=0,
                     mlserver_batch_time_ms=2.0, pytriton_max_batch=16)
    servers, skipped = harness.start_servers(args, fam, tmp_path, tmp_path)
    assert servers == {}
    assert fam.kserve_script in skipped["kserve"] and str(tmp_path / "no/bin/python") in skipped["kserve"]
    recipe = fam.mlserver_runtime.rsplit(".", 1)[0].replace(".", "/") + ".py"
    assert recipe in skipped["mlserver"] and (harness.ROOT / recipe).is_file()
    assert (harness.ROOT / fam.kserve_script).is_file()


def test_mlserver_batches_as_each_family_says(tmp_path):
    args = Namespace(mlserver_batch_time_ms=2.5, intra_op=1, pytriton_max_batch=8)
    text = harness.mlserver_peer(compare.FAMILY, args, tmp_path)
    assert (text.model_name, text.max_batch_size, text.max_batch_time_s, text.intra_op) == ("intent", 64, 0.0025, 1)
    assert text.implementation == "scripts.bench.peers.mlserver_text.IntentRuntime"
    det = harness.mlserver_peer(compare_detect.FAMILY, args, tmp_path)
    assert (det.model_name, det.max_batch_size) == ("detector", 8)  # the PyTriton peer's max batch


def test_every_text_system_gets_the_same_text_and_answers_its_top_label():
    text = "play some jazz"
    seen = {}
    for system in ("naive", "triserve", "pytriton", "kserve", "mlserver"):
        url, body = compare.request_for(system, "http://127.0.0.1:1", text)
        seen[system] = (url.removeprefix("http://127.0.0.1:1"), json.loads(body))
    assert seen["kserve"] == ("/v1/models/intent:predict", {"instances": [text]})
    assert seen["mlserver"] == seen["pytriton"]
    assert seen["mlserver"][0] == "/v2/models/intent/infer"
    assert seen["mlserver"][1]["inputs"] == [{"name": "text", "shape": [1, 1], "datatype": "BYTES", "data": [text]}]
    assert seen["naive"][1] == {"texts": [text], "top_k": 3}
    assert seen["triserve"][1] == {"texts": [text], "top_k": 3, "model": "primary"}  # never a cheaper fallback
    v2 = {"outputs": [{"name": "scores", "data": [0.7, 0.2, 0.1]}, {"name": "labels", "data": ["x", "y", "z"]}]}
    assert compare.top1("mlserver", v2) == "x"
    assert compare.top1("kserve", {"predictions": [{"label": "x", "score": 0.7, "top_k": []}]}) == "x"


def test_text_agreement_is_against_the_naive_peer(json_server):
    def answer(path, body):
        if path.startswith("/v1/models/"):  # a KServe peer that gets the second text wrong
            return 200, {"predictions": [{"label": "x" if body["instances"][0] == "a" else "wrong"}]}, 0.0
        return 200, {"results": [{"label": "x" if body["texts"][0] == "a" else "y"}]}, 0.0

    url = json_server(answer)
    got = compare.check_agreement({"kserve": (None, url), "naive": (None, url)}, ["a", "b"], n=2)
    assert got["reference"] == "naive"
    assert got["agreement_with_reference"] == {"kserve": 0.5, "naive": 1.0}


def _curve_table() -> dict:
    def row(tp, p50, p99):
        return {"texts_per_s": {"median": tp}, "p50": {"median": p50}, "p90": {"median": p50},
                "p99": {"median": p99}}

    return {"inproc": {"ceiling_texts_per_s": {"median": 200.0}},
            "kserve": {"8": row(40.0, 150.0, 300.0), "1": row(50.0, 17.0, 45.0)},
            "mlserver": {"1": row(45.0, 20.0, 50.0), "8": {**row(0, 1, 1), "texts_per_s": {"median": None}}}}


def test_latency_curves_are_per_system_by_concurrency():
    curves = harness.latency_curves(_curve_table(), "texts_per_s")
    assert curves == {"kserve": [(1, 50.0, 17.0, 45.0), (8, 40.0, 150.0, 300.0)],
                      "mlserver": [(1, 45.0, 20.0, 50.0)]}  # a cell without a throughput is left out


def test_the_plots_include_latency_against_throughput(tmp_path):
    pytest.importorskip("matplotlib")
    table = _curve_table()
    for per_c in (table["kserve"], table["mlserver"]):
        for row in per_c.values():
            for k in ("texts_per_s", "p50", "p90", "p99"):
                row[k] = {**row[k], "min": row[k]["median"], "max": row[k]["median"]}
    table["mlserver"].pop("8")
    res = {"summary": {"table": table}, "concurrency": [1, 8], "command": "python -m scripts.bench.compare"}
    made = harness.plot_rounds(res, tmp_path / "cmp", "texts", "t")
    assert [p.rsplit("/", 1)[-1] for p in made] == ["cmp_throughput.png", "cmp_latency.png",
                                                    "cmp_latency_vs_throughput.png"]
    assert (tmp_path / "cmp_latency_vs_throughput.png").stat().st_size > 1000
