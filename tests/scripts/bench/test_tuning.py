"""The tuning report's serving table: every config's row, including the runner-batch columns (and rows from runs
that predate them)."""
from __future__ import annotations

from scripts.bench.tuning import to_markdown


def _row(tps: float, batch: dict | None) -> dict:
    c32 = {"texts_per_s": tps, "p50": 120.0, "p99": 200.0, "non_200": 0,
           "cpu_ms_per_request": {"triserve": 0.9, "triserve-runner": 3.4}}
    if batch is not None:
        c32["runner_batch"] = batch
    return {"32": c32, "1": {"texts_per_s": 180.0, "p50": 5.5, "p99": 7.0, "non_200": 0}}


def test_serving_table_shows_runner_batch_mean_and_lone_call_share():
    res = {"started_utc": "t", "command": "c", "rounds": 2, "placement": "p", "serving": {
        "intra1": [_row(250.0, {"mean": 20.0, "calls": 100, "lone_share": 0.4}),
                   _row(260.0, {"mean": 24.0, "calls": 90, "lone_share": 0.2})],
        "intra1_coalesce0": [_row(240.0, None)]}}
    md = to_markdown(res)
    lines = {line.split(" | ")[0]: line for line in md.splitlines() if line.startswith("| intra1")}
    assert "| 255.0 [250.0-260.0] |" in lines["| intra1"]
    assert "| 22.0 [20.0-24.0], 30.0 [20.0-40.0]% |" in lines["| intra1"]
    assert "| n/a, n/a% |" in lines["| intra1_coalesce0"]  # a row without the columns still renders
