"""`triserve batch forecast-panel` and `forecast-backtest` (families/forecast/batch_tables.py) over a long table: each
row is what the session's real server answers on POST /v1/forecast/panel (the chunk as one panel, static categoricals
pooled) and /v1/forecast/backtest for the same series; a series the service refuses is its own error row."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.batch.test_engine import rows_by_key
from tests.families.forecast.test_panel import series

START = np.datetime64("2020-01-01T00:00:00", "s")
ONE_CHUNK = ["--chunk-size", "64", "--shard-size", "64"]


def write_table(path: Path, panel: list[dict], static: dict[str, list[str]] | None = None) -> Path:
    """Rows shuffled; `static[id]`: that series' store_type per row."""
    rows = [(s["id"], str(START + np.timedelta64(t, "D")), v, (static or {}).get(s["id"], ["A"] * len(s["values"]))[t])
            for s in panel for t, v in enumerate(s["values"])]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "timestamp", "value", "store_type"])
        for i in np.random.default_rng(5).permutation(len(rows)):
            w.writerow(rows[i])
    return path


def as_rest(path: Path) -> dict[str, dict]:
    """The table's series as REST fields: values and timestamps in the table's order, the series' store_type."""
    out: dict[str, dict] = {}
    with open(path) as fh:
        for row in csv.DictReader(fh):
            s = out.setdefault(row["id"], {"id": row["id"], "values": [], "timestamps": [],
                                           "static": {"store_type": row["store_type"]}})
            s["values"].append(float(row["value"]))
            s["timestamps"].append(row["timestamp"])
    return dict(sorted(out.items()))


def test_a_panel_job_is_the_rest_panel(run_job, server, tmp_path):
    panel = series(6) + [{"id": "lonely", "values": [1.0]}, {"id": "mixed", "values": [float(i) for i in range(30)]}]
    static = {s["id"]: ["AB"[i % 2]] * 40 for i, s in enumerate(panel[:6])}
    static["mixed"] = ["A"] * 29 + ["B"]
    table = write_table(tmp_path / "panel.csv", panel, static)
    summary = run_job("forecast-panel", tmp_path / "out", "--workers", "1", "--frequency", "D", "--horizon", "5",
                      "--static-columns", "store_type", *ONE_CHUNK, source=table)
    rows = rows_by_key(tmp_path / "out")
    assert summary["complete"] and summary["errors"] == 2
    assert rows["lonely"]["error_code"] == "series_too_short" and rows["mixed"]["error_code"] == "static_not_constant"
    good = [s for k, s in as_rest(table).items() if k not in ("lonely", "mixed")]
    rest = httpx.post(f"{server.url}/v1/forecast/panel", timeout=120,
                      json={"series": good, "frequency": "D", "horizon": 5})
    assert rest.status_code == 200, rest.text
    for answer in rest.json()["series"]:
        row = rows[answer["id"]]
        assert row["point"] == pytest.approx([p["point"] for p in answer["forecast"]], rel=1e-9)
        assert row["upper_90"] == pytest.approx([p["upper_90"] for p in answer["forecast"]], rel=1e-9)
        assert json.loads(row["input"]) == answer["input"]
    assert answer["input"]["static"]["categoricals"][0]["categories"] == 2


def test_a_backtest_job_is_the_rest_backtest(run_job, server, tmp_path):
    panel = series(3, n=50) + [{"id": "short", "values": [float(i) for i in range(12)]}]
    table = write_table(tmp_path / "backtest.csv", panel)
    summary = run_job("forecast-backtest", tmp_path / "out", "--workers", "1", "--frequency", "D", "--horizon", "5",
                      "--origins", "3", source=table)
    rows = rows_by_key(tmp_path / "out")
    assert summary["complete"] and summary["errors"] == 1 and rows["short"]["error_code"] == "backtest_too_short"
    for key, s in as_rest(table).items():
        if key == "short":
            continue
        rest = httpx.post(f"{server.url}/v1/forecast/backtest", timeout=120, json={
            "values": s["values"], "timestamps": s["timestamps"], "frequency": "D", "horizon": 5, "origins": 3})
        assert rest.status_code == 200, rest.text
        want, row = rest.json(), rows[key]
        assert row["mase"] == pytest.approx(want["mase"], rel=1e-9)
        assert row["mase_by_step"] == pytest.approx(want["mase_by_step"], rel=1e-9)
        assert row["coverage_90"] == want["coverage_90"] and row["horizon"] == 5
        assert row["methods"] == [o["method"] for o in want["origins"]]
        assert row["actual"] == [o["actual"] for o in want["origins"]]
        assert row["forecast"] == [pytest.approx([p["point"] for p in o["forecast"]], rel=1e-9)
                                   for o in want["origins"]]
        assert [str(t) for t in row["origins"]] == [o["origin"].replace("T", " ").rstrip("Z")
                                                    for o in want["origins"]]
