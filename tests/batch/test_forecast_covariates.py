"""Batch forecasts with covariates (families/forecast/batch.py, batch/sources.py covariate_columns): a long table whose
rows after each series' last value carry the covariates over the horizon; the row's forecast is the service's for
the same series (REST), and a covariate short of the horizon or with a NaN is that series' error with REST's code."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.batch.test_engine import rows_by_key
from tests.families.forecast.test_covariates import promo_series

START = np.datetime64("2024-01-01T00:00:00", "s")


def write_table(path: Path) -> Path:
    values, past, future = promo_series()
    series = {"promo": (values, past, future), "short": (values, past, future[:3]),
              "nan": (values, past[:5] + [None] + past[6:], future)}
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "timestamp", "value", "promo"])
        for key, (ys, xs, fs) in series.items():
            for t, (y, x) in enumerate(zip(ys + [None] * len(fs), xs + fs)):
                w.writerow([key, str(START + np.timedelta64(t, "D")), "" if y is None else y, "" if x is None else x])
    return path


def test_batch_covariates_give_the_service_forecast(run_job, server, tmp_path):
    summary = run_job("forecast", tmp_path / "out", "--workers", "0", "--horizon", "7", "--frequency", "D",
                      "--covariate-columns", "promo", "--calendar", "weekday,holidays:US",
                      source=write_table(tmp_path / "covariates.csv"))
    rows = rows_by_key(tmp_path / "out")
    assert summary["complete"] and summary["errors"] == 2
    assert rows["short"]["error_code"] == "covariate_horizon" and rows["nan"]["error_code"] == "covariate_not_finite"
    row = rows["promo"]
    effects = {e["name"]: e for e in json.loads(row["covariate_effects"])}
    assert row["covariates_used"] and effects["promo"]["used"] and "holidays:US" in effects
    values, past, future = promo_series()
    rest = httpx.post(f"{server.url}/v1/forecast", timeout=60, json={
        "values": values, "start": "2024-01-01T00:00:00", "frequency": "D", "horizon": 7,
        "covariates": {"promo": past}, "future_covariates": {"promo": future},
        "calendar": ["weekday", "holidays:US"]}).json()
    assert row["point"] == pytest.approx([p["point"] for p in rest["forecast"]], rel=1e-6)
    assert [e["name"] for e in rest["input"]["covariates"]["effects"]] == list(effects)
