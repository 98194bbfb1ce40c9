"""Panel forecasting online (POST /v1/forecast/panel) through a real `bentoml serve` with the tiny models: every
series of a panel gets exactly the answer /v1/forecast gives it alone, in request order, in few runner calls; a bad
series refuses the request and names the series."""
from __future__ import annotations

import httpx
import numpy as np
import pytest

START = "2020-01-01T00:00:00"


def post(server, path, body) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=120)


def series(n_series: int, n: int = 40) -> list[dict]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(n_series):
        level, slope = rng.uniform(10, 1000), rng.uniform(-2, 2)
        values = level + slope * np.arange(n) + 5 * np.sin(np.arange(n) / 7 * 2 * np.pi) + rng.normal(0, 1, n)
        out.append({"id": f"sku-{i}", "values": values.round(3).tolist(), "start": START})
    return out


def test_a_straight_line_in_a_panel_is_continued_exactly(server):
    line = {"id": "line", "values": [10.0 * i for i in range(1, 31)], "start": START}
    flat = {"id": "flat", "values": [7.0] * 30, "start": START}
    body = post(server, "/v1/forecast/panel", {"series": [line, flat], "frequency": "D", "horizon": 3}).json()
    answers = {s["id"]: s for s in body["series"]}
    assert [s["id"] for s in body["series"]] == ["line", "flat"]
    assert np.allclose([p["point"] for p in answers["line"]["forecast"]], [310, 320, 330], rtol=0.01)
    assert np.allclose([p["point"] for p in answers["flat"]["forecast"]], [7, 7, 7], rtol=1e-6)
    assert "drift" in answers["line"]["input"]["method"]


def test_every_series_answers_as_it_would_alone(server):
    panel = series(12)
    body = post(server, "/v1/forecast/panel", {"series": panel, "frequency": "D", "horizon": 5})
    assert body.status_code == 200, body.text
    answers = body.json()["series"]
    assert [a["id"] for a in answers] == [s["id"] for s in panel]
    for s, a in zip(panel, answers):
        alone = post(server, "/v1/forecast", {"values": s["values"], "start": START, "frequency": "D",
                                              "horizon": 5}).json()
        assert a["model"] == alone["model"] and a["input"]["method"] == alone["input"]["method"]
        assert np.allclose([p["point"] for p in a["forecast"]], [p["point"] for p in alone["forecast"]],
                           rtol=1e-5, atol=1e-6)
        assert [p["timestamp"] for p in a["forecast"]] == [p["timestamp"] for p in alone["forecast"]]


def test_a_thousand_series_take_one_request_and_few_runner_calls(server):
    panel = series(1000, n=30)
    resp = post(server, "/v1/forecast/panel", {"series": panel, "frequency": "D", "horizon": 7})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert len(body["series"]) == 1000 and {len(s["forecast"]) for s in body["series"]} == {7}
    assert 1 <= body["runner_calls"] <= 1000 // 8  # chunks of a runner batch, not one call per series
    assert body["degraded"] is False


@pytest.mark.parametrize("panel, code, where", [
    ({"series": [{"id": "a", "values": [1, 2, 3], "start": START}, {"id": "a", "values": [1, 2], "start": START}],
      "frequency": "D"}, "validation_error", None),  # ids must be unique
    ({"series": [{"id": "a", "values": [1, 2, 3], "start": START}]}, "validation_error", None),  # start needs frequency
    ({"series": [], "frequency": "D"}, "validation_error", None),
    ({"series": [{"id": "ok", "values": [1.0, 2.0, 3.0, 4.0], "start": START},
                 {"id": "gappy", "values": [1.0] + [None] * 20 + [2.0], "start": START}], "frequency": "D"},
     None, {"index": 1, "id": "gappy"}),  # a bad series refuses the request and is named
])
def test_bad_panels_are_refused_with_the_series_named(server, panel, code, where):
    resp = post(server, "/v1/forecast/panel", panel)
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    if code:
        assert error["code"] == code
    if where:
        assert {k: error["details"][k] for k in where} == where and "gappy" in error["message"]


@pytest.mark.parametrize("limits, code", [({"max_series": 2}, "too_many_series"),
                                          ({"max_panel_points": 10}, "panel_too_large")])
def test_panel_limits_refuse_before_any_work(limits, code):
    from tests.families.hooks import refusal
    from triserve import families
    from triserve.families.forecast.limits import Limits
    from triserve.families.forecast.schemas import PanelForecastRequest

    body = PanelForecastRequest(series=series(3, n=5), frequency="D")
    refused = refusal(families.family("forecast"), Limits(**limits), body)
    assert refused.status == 422 and refused.code == code


def test_the_python_client_sends_a_panel(server):
    from triserve_client import TriserveClient

    with TriserveClient(server.url) as client:
        answer = client.forecast_panel({"up": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "down": [6.0, 5.0, 4.0, 3.0, 2.0, 1.0]},
                                       start=START, frequency="MS", horizon=2)
    assert [s.id for s in answer.series] == ["up", "down"]
    assert np.allclose([p.point for p in answer.series[0].forecast], [7, 8], rtol=0.01)
    assert np.allclose([p.point for p in answer.series[1].forecast], [0, 0], atol=0.5)  # non-negative history


def test_static_categoricals_are_checked_and_reported(server):
    panel = series(6)
    for i, s in enumerate(panel):
        s["static"] = {"store_type": "AB"[i % 2], "region": "north"}
    resp = post(server, "/v1/forecast/panel", {"series": panel, "frequency": "D", "horizon": 5})
    assert resp.status_code == 200, resp.text
    for a in resp.json()["series"]:
        static = a["input"]["static"]
        cats = {c["name"]: c for c in static["categoricals"]}
        assert set(cats) == {"store_type", "region"} and cats["store_type"]["categories"] == 2
        assert static["used"] == (static["pooled_by"] is not None) and sum(c["used"] for c in cats.values()) <= 1
        for c in cats.values():
            assert c["used"] == (c["name"] == static["pooled_by"])
    plain = post(server, "/v1/forecast/panel", {"series": series(2), "frequency": "D", "horizon": 5}).json()
    assert all(a["input"]["static"] is None for a in plain["series"])


@pytest.mark.parametrize("statics, code, index", [
    ([{"store_type": "A"}, None], "static_missing", 1),  # one series lacks the categorical the others give
    ([{"store_type": "A"}, {"region": "north"}], "static_missing", 0),  # the first series lacks 'region'
    ([{"store_type": ["A"]}, {"store_type": "B"}], "validation_error", None),  # not a name -> category mapping
    ([{"store_type": 3}, {"store_type": "B"}], "validation_error", None),
])
def test_bad_static_categoricals_are_refused(server, statics, code, index):
    panel = series(2)
    for s, st in zip(panel, statics):
        if st is not None:
            s["static"] = st
    resp = post(server, "/v1/forecast/panel", {"series": panel, "frequency": "D"})
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["code"] == code
    if code == "static_missing":
        details = error["details"]
        assert details["index"] == index and details["id"] == f"sku-{index}" and details["missing"]


def test_the_python_client_sends_static_categoricals(server):
    from triserve_client import TriserveClient

    panel = {s["id"]: {"values": s["values"], "static": {"store_type": "AB"[i % 2]}}
             for i, s in enumerate(series(4))}
    with TriserveClient(server.url) as client:
        answer = client.forecast_panel(panel, start=START, frequency="D", horizon=3)
    assert [s.id for s in answer.series] == list(panel)
    assert all(s.input.static is not None and s.input.static.categoricals[0].name == "store_type"
               for s in answer.series)
