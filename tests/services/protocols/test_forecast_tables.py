"""The forecast panel and backtest on OIP v2 (families/forecast/oip_tables.py) through the session's real server: a
long table sent as tensors over OIP REST (JSON) and OIP gRPC (tritonclient, binary) gets, row for row, what
POST /v1/forecast/panel and /v1/forecast/backtest answer for the same series; a table whose tensors do not line up
is refused with a machine-readable code before any runner call."""
from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
from tritonclient.utils import InferenceServerException

from tests.families.forecast.test_covariates import promo_series
from tests.families.forecast.test_panel import series

START = "2020-01-01T00:00:00"


@pytest.fixture(scope="module")
def oip_grpc(server):
    client = tgrpc.InferenceServerClient(server.grpc_target)
    yield client
    client.close()


def long_table(panel: list[dict]) -> tuple[list[str], list[float], list[str]]:
    """(ids, values, timestamps) of a panel, rows interleaved across series (a table in any order)."""
    rows = [(s["id"], v, str(np.datetime64(START) + np.timedelta64(t, "D")))
            for s in panel for t, v in enumerate(s["values"])]
    rows = [rows[i] for i in np.random.default_rng(3).permutation(len(rows))]
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]


def first_appearance(ids: list[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def infer_rest(server, model: str, inputs: list[dict], **parameters) -> httpx.Response:
    return httpx.post(f"{server.url}/v2/models/{model}/infer", timeout=120,
                      json={"inputs": inputs, "parameters": parameters})


def tensor(name: str, data, datatype: str = "FP64") -> dict:
    shape = list(np.shape(np.array(data, dtype=object if datatype == "BYTES" else None)))
    flat = np.array(data, dtype=object).reshape(-1).tolist()
    return {"name": name, "datatype": datatype, "shape": shape, "data": flat}


def outputs(resp: httpx.Response) -> dict[str, list]:
    assert resp.status_code == 200, resp.text
    return {o["name"]: o["data"] for o in resp.json()["outputs"]}


def grpc_input(name: str, data, datatype: str = "FP64"):
    arr = np.array(data, dtype=object if datatype == "BYTES" else np.float64)
    if datatype == "BYTES":
        arr = np.vectorize(lambda s: s.encode())(arr).astype(object)
    t = tgrpc.InferInput(name, list(arr.shape), datatype)
    t.set_data_from_numpy(arr)
    return t


def test_a_panel_over_oip_is_the_rest_panel(server, oip_grpc):
    panel = series(5)
    for i, s in enumerate(panel):
        s["static"] = {"store_type": "AB"[i % 2]}
    ids, values, stamps = long_table(panel)
    static_of = {s["id"]: s["static"] for s in panel}
    same = [{"id": k, "values": [v for i, v in zip(ids, values) if i == k],
             "timestamps": [t for i, t in zip(ids, stamps) if i == k], "static": static_of[k]}
            for k in first_appearance(ids)]  # the table's rows, series by series
    rest = httpx.post(f"{server.url}/v1/forecast/panel", timeout=120, json={
        "series": same, "frequency": "D", "horizon": 4}).json()
    static = [[static_of[k]["store_type"]] for k in ids]
    got = outputs(infer_rest(server, "forecast-panel", [
        tensor("SERIES_ID", ids, "BYTES"), tensor("VALUES", values), tensor("TIMESTAMPS", stamps, "BYTES"),
        tensor("STATIC", static, "BYTES")], frequency="D", horizon=4, static_names="store_type"))
    assert got["SERIES_ID"] == [s["id"] for s in rest["series"] for _ in range(4)]
    assert got["POINT"] == [p["point"] for s in rest["series"] for p in s["forecast"]]
    assert got["TIMESTAMPS"] == [p["timestamp"] for s in rest["series"] for p in s["forecast"]]
    answer = oip_grpc.infer("forecast.panel", [
        grpc_input("SERIES_ID", ids, "BYTES"), grpc_input("VALUES", values), grpc_input("TIMESTAMPS", stamps, "BYTES"),
        grpc_input("STATIC", static, "BYTES")], parameters={"frequency": "D", "horizon": 4,
                                                             "static_names": "store_type"})
    assert answer.as_numpy("POINT").tolist() == got["POINT"]
    params = answer.get_response().parameters
    levels = json.loads(params["quantile_levels"].string_param)
    assert answer.as_numpy("QUANTILES").tolist() == [[p["quantiles"][f"{q:g}"] for q in levels]
                                                     for s in rest["series"] for p in s["forecast"]]
    reports = json.loads(params["series"].string_param)
    assert [r["input"] for r in reports] == [s["input"] for s in rest["series"]]
    assert reports[0]["input"]["static"]["categoricals"][0]["name"] == "store_type"


def test_panel_covariates_over_oip_are_the_rest_panels(server):
    """COVARIATES per row, FUTURE_SERIES_ID + FUTURE_COVARIATES per step, `start` for every series (no TIMESTAMPS)."""
    values, past, future = promo_series()
    half = [v / 2 for v in values]
    rest = httpx.post(f"{server.url}/v1/forecast/panel", timeout=120, json={
        "series": [{"id": k, "values": v, "start": START, "covariates": {"promo": past},
                    "future_covariates": {"promo": future}} for k, v in (("full", values), ("half", half))],
        "frequency": "D", "horizon": 7, "calendar": ["weekday"]}).json()
    got = outputs(infer_rest(server, "forecast-panel", [
        tensor("SERIES_ID", ["full"] * 120 + ["half"] * 120, "BYTES"), tensor("VALUES", values + half),
        tensor("COVARIATES", [[x] for x in past + past]),
        tensor("FUTURE_SERIES_ID", ["half"] * 7 + ["full"] * 7, "BYTES"),
        tensor("FUTURE_COVARIATES", [[x] for x in future + future])],
        start=START, frequency="D", horizon=7, covariate_names="promo", calendar="weekday"))
    assert rest["series"][0]["input"]["covariates"]["used"]
    assert got["POINT"] == [p["point"] for s in rest["series"] for p in s["forecast"]]


def test_a_backtest_over_oip_is_the_rest_backtest(server, oip_grpc):
    values = [float(10 + (i % 7) + 0.1 * i) for i in range(60)]
    rest = httpx.post(f"{server.url}/v1/forecast/backtest", timeout=120, json={
        "values": values, "start": START, "frequency": "D", "horizon": 5, "origins": 3}).json()
    params = {"start": START, "frequency": "D", "horizon": 5, "origins": 3}
    got = outputs(infer_rest(server, "forecast-backtest", [tensor("VALUES", values)], **params))
    assert got["ACTUAL"] == [a for o in rest["origins"] for a in o["actual"]]
    assert got["POINT"] == [p["point"] for o in rest["origins"] for p in o["forecast"]]
    assert got["ORIGIN"] == [o["origin"] for o in rest["origins"] for _ in o["forecast"]]
    answer = oip_grpc.infer("forecast.backtest", [grpc_input("VALUES", values)], parameters=params)
    assert answer.as_numpy("MASE_BY_STEP").tolist() == pytest.approx(rest["mase_by_step"])
    p = answer.get_response().parameters
    assert p["mase"].double_param == pytest.approx(rest["mase"]) and p["horizon"].int64_param == 5
    assert [o["method"] for o in json.loads(p["origins"].string_param)] == [o["method"] for o in rest["origins"]]


def test_every_forecast_deployment_has_its_panel_and_backtest_models(server):
    index = {m["name"] for m in httpx.post(f"{server.url}/v2/repository/index", json={}, timeout=30).json()}
    assert {"forecast-panel", "forecast-backtest", "forecast.panel", "forecast.backtest"} <= index
    meta = httpx.get(f"{server.url}/v2/models/forecast-panel", timeout=30).json()
    assert [t["name"] for t in meta["inputs"]][:2] == ["SERIES_ID", "VALUES"]
    config = httpx.get(f"{server.url}/v2/models/forecast.backtest/config", timeout=30).json()
    assert config["parameters"]["route"]["string_value"] == "/v1/forecast/backtest"


@pytest.mark.parametrize("change, status, code", [
    (lambda t, p: (t[:1] + [tensor("VALUES", [1.0, 2.0])] + t[2:], p), 400, "shape_mismatch"),
    (lambda t, p: (t + [tensor("STATIC", [["A"]] * 12, "BYTES")], {**p, "static_names": "a,b"}), 422,
     "static_names_mismatch"),
    (lambda t, p: (t + [tensor("STATIC", [["A"]] * 11 + [["B"]], "BYTES")], {**p, "static_names": "kind"}), 422,
     "static_not_constant"),
    (lambda t, p: (t + [tensor("FUTURE_COVARIATES", [[1.0]] * 3)], {**p, "covariate_names": "promo"}), 400,
     "missing_input"),
    (lambda t, p: (t, {k: v for k, v in p.items() if k != "start"}), 422, "validation_error"),
    (lambda t, p: (t[1:], p), 400, "missing_input"),
])
def test_bad_panel_tensors_are_refused_with_a_code(server, oip_grpc, change, status, code):
    ids = ["a"] * 6 + ["b"] * 6
    inputs, params = change([tensor("SERIES_ID", ids, "BYTES"), tensor("VALUES", [float(i) for i in range(12)])],
                            {"start": START, "frequency": "D", "horizon": 2})
    resp = infer_rest(server, "forecast-panel", inputs, **params)
    assert (resp.status_code, resp.json()["code"]) == (status, code), resp.text


def test_bad_panel_tensors_are_invalid_argument_over_grpc(oip_grpc):
    with pytest.raises(InferenceServerException) as err:
        oip_grpc.infer("forecast-panel", [grpc_input("SERIES_ID", ["a", "b"], "BYTES"),
                                          grpc_input("VALUES", [1.0, 2.0, 3.0])],
                       parameters={"start": START, "frequency": "D"})
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT" and err.value.message().startswith("shape_mismatch:")
