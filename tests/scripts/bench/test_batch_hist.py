"""scripts/bench/batch_hist.py: per-cell batch-size histograms from two /metrics snapshots."""
from __future__ import annotations

import math

from scripts.bench import batch_hist

METRICS_BEFORE = """# HELP triserve_runner_batch_size Items per ONNX Runtime call, per model slot.
triserve_runner_batch_size_bucket{le="1.0",model="yolo-shapes",slot="detection"} 2.0
triserve_runner_batch_size_bucket{le="2.0",model="yolo-shapes",slot="detection"} 2.0
triserve_runner_batch_size_bucket{le="4.0",model="yolo-shapes",slot="detection"} 2.0
triserve_runner_batch_size_bucket{le="+Inf",model="yolo-shapes",slot="detection"} 2.0
triserve_runner_batch_size_count{model="yolo-shapes",slot="detection"} 2.0
triserve_runner_batch_size_sum{model="yolo-shapes",slot="detection"} 2.0
triserve_runner_batch_size_bucket{le="1.0",model="minilm",slot="text"} 9.0
triserve_runner_batch_size_count{model="minilm",slot="text"} 9.0
"""
METRICS_AFTER = METRICS_BEFORE.replace(
    '{le="1.0",model="yolo-shapes",slot="detection"} 2.0', '{le="1.0",model="yolo-shapes",slot="detection"} 3.0'
).replace('{le="2.0",model="yolo-shapes",slot="detection"} 2.0', '{le="2.0",model="yolo-shapes",slot="detection"} 4.0'
          ).replace('{le="4.0",model="yolo-shapes",slot="detection"} 2.0',
                    '{le="4.0",model="yolo-shapes",slot="detection"} 7.0'
                    ).replace('{le="+Inf",model="yolo-shapes",slot="detection"} 2.0',
                              '{le="+Inf",model="yolo-shapes",slot="detection"} 8.0'
                              ).replace('_count{model="yolo-shapes",slot="detection"} 2.0',
                                        '_count{model="yolo-shapes",slot="detection"} 8.0'
                                        ).replace('_sum{model="yolo-shapes",slot="detection"} 2.0',
                                                  '_sum{model="yolo-shapes",slot="detection"} 26.0')


def test_histogram_parse_and_delta():
    before = batch_hist.parse_histogram(METRICS_BEFORE, "triserve_runner_batch_size", "detection")
    after = batch_hist.parse_histogram(METRICS_AFTER, "triserve_runner_batch_size", "detection")
    assert after["buckets"][1.0] == 3 and after["buckets"][math.inf] == 8 and after["count"] == 8
    d = batch_hist.histogram_delta(after, before)
    assert d["buckets"] == {"1": 1, "2": 1, "3-4": 3, ">4": 1}
    assert d["count"] == 6 and d["sum"] == 24 and d["mean"] == 4.0
    assert batch_hist.parse_histogram(METRICS_BEFORE, "triserve_gateway_batch_requests", "detection")["count"] == 0
    both = batch_hist.add_histograms(d, d)
    assert both["buckets"]["3-4"] == 6 and both["count"] == 12 and both["mean"] == 4.0


def test_rounds_add_up_and_render():
    cell = {"triserve_runner_batch_size": {"buckets": {"1": 2, "9-16": 2}, "count": 4, "sum": 30.0, "mean": 7.5}}
    rounds = [{"batch_histograms": {"triserve": {"32": cell}}},
              {"batch_histograms": {"triserve": {"32": cell, "1": {"error": "metrics unreachable"}}}}]
    total = batch_hist.over_rounds(rounds)
    assert total["triserve"]["32"]["triserve_runner_batch_size"] == {"buckets": {"1": 4, "9-16": 4}, "count": 8,
                                                                      "sum": 60.0, "mean": 7.5}
    assert "1" not in total["triserve"]  # a failed snapshot is left out, not counted as zero
    table = "\n".join(batch_hist.markdown(total, "text"))
    assert "| triserve | 32 | triserve_runner_batch_size | 8 | 7.5 | 50% | 50% |" in table


def test_plot_writes_a_png(tmp_path):
    cell = {"triserve_runner_batch_size": {"buckets": {"1": 1, "9-16": 3}, "count": 4, "sum": 40.0, "mean": 10.0}}
    out = batch_hist.plot({"triserve": {"32": cell}}, tmp_path / "b.png", "text", "python -m x")
    assert out and (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bucket_labels_sort_by_their_lower_bound():
    labels = [">128", "3-4", "1", "129-256", "2"]
    assert sorted(labels, key=batch_hist.bucket_low) == ["1", "2", "3-4", ">128", "129-256"]


def test_around_a_cell_takes_the_delta_only_for_a_server(monkeypatch):
    snapshots = iter([batch_hist.parse_histogram(METRICS_BEFORE, m, "detection") for m in batch_hist.BATCH_METRICS] +
                     [batch_hist.parse_histogram(METRICS_AFTER, m, "detection") for m in batch_hist.BATCH_METRICS])
    monkeypatch.setattr(batch_hist, "metrics_snapshot",
                        lambda url, slot: {m: next(snapshots) for m in batch_hist.BATCH_METRICS})
    cell, delta = batch_hist.around("http://127.0.0.1:1", "detection", lambda: {"ok": 7})
    assert cell == {"ok": 7}
    assert delta["triserve_runner_batch_size"]["count"] == 6
    assert batch_hist.describe(delta) == ", runner batch mean 4.0 over 6 calls"
    assert batch_hist.around(None, "detection", lambda: {"ok": 1}) == ({"ok": 1}, None)
    assert batch_hist.describe(None) == ""
