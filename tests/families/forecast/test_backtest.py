"""POST /v1/forecast/backtest (families/forecast/backtest.py) through a real server: rolling origins of one horizon
each, the actuals and per-step errors, interval coverage, a straight line scored exactly, covariates that help
lowering the error, the client's method, and clear 422s for too many origins, too short a series or a bad
covariate."""
from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.families.forecast.test_covariates import promo_series

START = "2024-01-01T00:00:00"


def post(server, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/forecast/backtest", json=body, timeout=120)


def test_rolling_origins_with_actuals_errors_and_coverage(server):
    values, _, _ = promo_series()
    resp = post(server, {"values": values, "start": START, "frequency": "D", "horizon": 7, "origins": 3})
    assert resp.status_code == 200, resp.text
    bt = resp.json()
    assert (bt["frequency"], bt["horizon"], len(bt["origins"])) == ("D", 7, 3)
    assert [o["origin"][:10] for o in bt["origins"]] == ["2024-04-09", "2024-04-16", "2024-04-23"]  # day 99, 106, 113
    assert [o["actual"] for o in bt["origins"]] == [values[99:106], values[106:113], values[113:120]]
    assert all(o["method"] and len(o["forecast"]) == 7 for o in bt["origins"])
    assert len(bt["mase_by_step"]) == len(bt["rmsse_by_step"]) == 7 and bt["mase"] > 0 and bt["rmsse"] > 0
    assert bt["mase"] == pytest.approx(np.mean([o["mase"] for o in bt["origins"]]))
    assert 0 <= bt["coverage_50"] <= bt["coverage_90"] <= 1


def test_a_straight_line_is_scored_exactly_and_the_client_reads_it(server):
    from triserve_client import BacktestResponse, TriserveClient

    line = [10.0 + 2 * t for t in range(60)]
    bt = post(server, {"values": line, "start": START, "frequency": "D", "horizon": 5, "origins": 2}).json()
    assert bt["mase"] == pytest.approx(0, abs=1e-6) and bt["coverage_90"] == 1.0
    with TriserveClient(server.url, timeout=120) as client:
        answer = client.forecast_backtest(line, start=START, frequency="D", horizon=5, origins=2)
    assert isinstance(answer, BacktestResponse) and answer.mase == pytest.approx(bt["mase"], abs=1e-9)
    assert [o.origin.isoformat()[:10] for o in answer.origins] == ["2024-02-20", "2024-02-25"]


def test_an_informative_covariate_lowers_the_backtest_error(server):
    values, past, future = promo_series()
    body = {"values": values, "start": START, "frequency": "D", "horizon": 7, "origins": 3}
    plain = post(server, body).json()
    with_promo = post(server, {**body, "covariates": {"promo": past}}).json()
    assert with_promo["mase"] < 0.5 * plain["mase"]


@pytest.mark.parametrize("change,code", [
    (lambda b: b.update(origins=11), "too_many_origins"),
    (lambda b: b.update(values=b["values"][:30], origins=5), "backtest_too_short"),
    (lambda b: b.update(covariates={"promo": [1.0] * 10}), "covariate_length_mismatch"),
    (lambda b: b.update(calendar=["holidays:XX"]), "unknown_holiday_country"),
])
def test_bad_backtests_get_a_clear_422(server, change, code):
    values, _, _ = promo_series()
    body = {"values": values, "start": START, "frequency": "D", "horizon": 7, "origins": 3}
    change(body)
    resp = post(server, body)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["code"] == code, resp.text
