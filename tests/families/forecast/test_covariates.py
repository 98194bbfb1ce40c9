"""Covariates (families/forecast/covariates.py, regressors.py): an informative regressor is used and its effect
estimated, a shuffled one is not (and leaves the forecast as it was), calendar dummies; through a real server the
forecast follows the future values, and a covariate that is missing, short, NaN or misnamed gets a clear 422."""
from __future__ import annotations

import httpx
import numpy as np
import pytest

from triserve.families.forecast.covariates import calendar, fit
from triserve.families.forecast.ensemble import combine
from triserve.families.forecast.features import MEDIAN_INDEX

N, H = 200, 14


def demand(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(y, temperature) over N + H days: y = 100 + 3 temperature + a weekly profile + noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(N + H)
    temp = 20 + 5 * np.sin(2 * np.pi * t / 30) + rng.normal(0, 2, N + H)
    y = 100 + 3 * temp + 10 * np.sin(2 * np.pi * t / 7) + rng.normal(0, 2, N + H)
    return y, temp


def test_an_informative_covariate_is_used_and_its_effect_estimated():
    y, temp = demand()
    f = fit(y[:N], temp[:N, None], temp[N:, None], ["temperature"], "D", H)
    assert f.used == [True] and f.effects[0] == pytest.approx(3.0, abs=0.2) and f.t_values[0] > 10
    assert f.error_with < 0.5 * f.error_without
    point = combine(f.series, "D", H).quantiles[:, MEDIAN_INDEX] + f.offset
    plain = combine(y[:N], "D", H).quantiles[:, MEDIAN_INDEX]
    assert np.mean(np.abs(point - y[N:])) < 0.5 * np.mean(np.abs(plain - y[N:]))


@pytest.mark.parametrize("seed", range(5))
def test_a_shuffled_covariate_is_not_used(seed):
    y, temp = demand(seed)
    shuffled = np.random.default_rng(100 + seed).permutation(temp)
    f = fit(y[:N], shuffled[:N, None], shuffled[N:, None], ["noise"], "D", H)
    assert f.used == [False] and np.all(f.offset == 0)
    assert np.array_equal(f.series, y[:N])  # the series the ensemble forecasts is the series itself


def test_too_short_or_constant_covariates_are_not_used():
    y, temp = demand()
    assert fit(y[:8], temp[:8, None], temp[N:, None], ["t"], "D", H).used == [False]
    f = fit(y[:N], np.ones((N, 1)), np.ones((H, 1)), ["one"], "D", H)
    assert f.used == [False] and f.effects == [0.0]


def test_calendar_dummies():
    stamps = np.arange(np.datetime64("2024-01-01"), np.datetime64("2024-01-15")).astype("datetime64[s]")  # a Monday
    names, x = calendar(stamps, ["weekday", "month"])
    assert names[:6] == ["weekday=tue", "weekday=wed", "weekday=thu", "weekday=fri", "weekday=sat", "weekday=sun"]
    assert x.shape == (14, 6 + 11) and x[0].sum() == 0 and x[1, 0] == 1 and x[6, 5] == 1 and x[:, 6:].sum() == 0


def promo_series() -> tuple[list[float], list[float], list[float]]:
    """A daily series with a promotion effect of +50 on promotion days (known in advance)."""
    rng = np.random.default_rng(1)
    promo = (rng.random(120 + 7) < 0.2).astype(float)
    y = 200 + 50 * promo + rng.normal(0, 3, 127)
    return y[:120].round(3).tolist(), promo[:120].tolist(), promo[120:].tolist()


def post(server, body, path="/v1/forecast") -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


def test_the_forecast_follows_the_future_covariate_through_a_real_server(server):
    values, past, future = promo_series()
    body = {"values": values, "start": "2024-01-01T00:00:00", "frequency": "D", "horizon": 7,
            "covariates": {"promo": past}, "future_covariates": {"promo": future + [1.0]}, "calendar": ["weekday"]}
    resp = post(server, body)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    report = answer["input"]["covariates"]
    effects = {e["name"]: e for e in report["effects"]}
    assert report["used"] and effects["promo"]["used"] and effects["promo"]["effect"] == pytest.approx(50, abs=3)
    assert set(effects) == {"promo", "weekday=tue", "weekday=wed", "weekday=thu", "weekday=fri", "weekday=sat",
                            "weekday=sun"}
    point = np.array([p["point"] for p in answer["forecast"]])
    on, off = point[np.array(future) == 1], point[np.array(future) == 0]
    assert on.size and off.size and np.all(np.abs(on - 250) < 10) and np.all(np.abs(off - 200) < 10)
    plain = post(server, {k: v for k, v in body.items() if k not in ("covariates", "future_covariates",
                                                                     "calendar")}).json()
    assert plain["input"]["covariates"] is None
    panel = post(server, {"series": [{"id": "a", "values": values, "start": "2024-01-01T00:00:00",
                                      "covariates": {"promo": past}, "future_covariates": {"promo": future}},
                                     {"id": "b", "values": values, "start": "2024-01-01T00:00:00"}],
                          "frequency": "D", "horizon": 7}, "/v1/forecast/panel")
    assert panel.status_code == 200, panel.text
    a, b = panel.json()["series"]
    assert a["input"]["covariates"]["used"] and b["input"]["covariates"] is None
    assert np.allclose([p["point"] for p in a["forecast"]][:7], point, rtol=0.05)


@pytest.mark.parametrize("change,code", [
    (lambda b: b["future_covariates"].pop("promo") and b["future_covariates"].update(price=[1.0] * 7),
     "covariate_names_mismatch"),
    (lambda b: b["future_covariates"].update(promo=[0.0] * 6), "covariate_horizon"),
    (lambda b: b["covariates"]["promo"].__setitem__(5, None), "covariate_not_finite"),
    (lambda b: b["future_covariates"]["promo"].__setitem__(2, None), "covariate_not_finite"),
    (lambda b: b["covariates"]["promo"].pop(), "covariate_length_mismatch"),
])
def test_bad_covariates_get_a_clear_422(server, change, code):
    values, past, future = promo_series()
    body = {"values": values, "start": "2024-01-01T00:00:00", "frequency": "D", "horizon": 7,
            "covariates": {"promo": past}, "future_covariates": {"promo": future}}
    change(body)
    resp = post(server, body)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["code"] == code, resp.text


def test_the_client_sends_covariates(server):
    from triserve_client import TriserveClient

    values, past, future = promo_series()
    with TriserveClient(server.url, timeout=60) as client:
        answer = client.forecast(values, start="2024-01-01T00:00:00", frequency="D", horizon=7,
                                 covariates={"promo": past}, future_covariates={"promo": future})
    assert answer.input.covariates is not None and answer.input.covariates.used
    assert answer.input.covariates.effects[0].name == "promo" and answer.input.covariates.effects[0].used
