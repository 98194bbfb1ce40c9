"""Forecast covariates over the Open Inference Protocol (families/forecast/oip_fields.py): COVARIATES /
FUTURE_COVARIATES tensors with the parameters covariate_names and calendar give REST's forecast over OIP REST (JSON)
and OIP gRPC (tritonclient, binary); a covariate short of the horizon, a NaN or a column the names do not cover gets
the same error code on every interface."""
from __future__ import annotations

import json

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
from tritonclient.utils import InferenceServerException

from tests.families.forecast.test_covariates import promo_series
from triserve.services.protocols.generated import triserve_pb2 as tpb
from triserve.services.protocols.generated import triserve_pb2_grpc as tpb_grpc

START, H = "2024-01-01T00:00:00", 7
PARAMS = {"start": START, "frequency": "D", "horizon": H, "covariate_names": "promo", "calendar": "weekday,holidays:US"}


@pytest.fixture(scope="module")
def oip_grpc(server):
    client = tgrpc.InferenceServerClient(server.grpc_target)
    yield client
    client.close()


def grpc_inputs(values, past, future) -> list:
    out = []
    for name, data in (("VALUES", np.array(values)), ("COVARIATES", np.array(past)[:, None]),
                       ("FUTURE_COVARIATES", np.array(future)[:, None])):
        tensor = tgrpc.InferInput(name, list(data.shape), "FP64")
        tensor.set_data_from_numpy(data.astype(np.float64))
        out.append(tensor)
    return out


def oip_rest(server, values, past, future, **params) -> httpx.Response:
    inputs = [{"name": "VALUES", "datatype": "FP64", "shape": [len(values)], "data": values},
              {"name": "COVARIATES", "datatype": "FP64", "shape": [len(past), 1], "data": past},
              {"name": "FUTURE_COVARIATES", "datatype": "FP64", "shape": [len(future), 1], "data": future}]
    return httpx.post(f"{server.url}/v2/models/forecast/infer", timeout=60,
                      json={"inputs": inputs, "parameters": {**PARAMS, **params}})


def test_oip_covariates_give_the_rest_forecast(server, oip_grpc):
    values, past, future = promo_series()
    rest = httpx.post(f"{server.url}/v1/forecast", timeout=60, json={
        "values": values, "start": START, "frequency": "D", "horizon": H, "covariates": {"promo": past},
        "future_covariates": {"promo": future}, "calendar": ["weekday", "holidays:US"]}).json()
    assert rest["input"]["covariates"]["used"]
    points = [p["point"] for p in rest["forecast"]]
    answer = oip_grpc.infer("forecast", grpc_inputs(values, past, future), parameters=PARAMS)
    assert answer.as_numpy("POINT").tolist() == points
    assert json.loads(answer.get_response().parameters["input"].string_param) == rest["input"]
    over_rest = oip_rest(server, values, past, future)
    assert over_rest.status_code == 200, over_rest.text
    assert next(o["data"] for o in over_rest.json()["outputs"] if o["name"] == "POINT") == points


def typed_error(server, values, past, future) -> str:
    with grpc.insecure_channel(server.grpc_target) as channel:
        with pytest.raises(grpc.RpcError) as err:
            tpb_grpc.TriserveStub(channel).Forecast(tpb.ForecastRequest(
                values=values, start=START, frequency="D", horizon=H, covariates={"promo": tpb.Doubles(values=past)},
                future_covariates={"promo": tpb.Doubles(values=future)}), timeout=60)
    return dict(err.value.trailing_metadata())["triserve-error-code"]


@pytest.mark.parametrize("change,code", [
    (lambda past, future: (past, future[:3]), "covariate_horizon"),
    (lambda past, future: (past[:5] + [float("nan")] + past[6:], future), "covariate_not_finite"),
    (lambda past, future: (past[:-1], future), "covariate_length_mismatch"),
])
def test_bad_covariates_get_the_same_code_on_every_interface(server, oip_grpc, change, code):
    values, past, future = promo_series()
    past, future = change(past, future)
    rest = httpx.post(f"{server.url}/v1/forecast", timeout=60, json={
        "values": values, "start": START, "frequency": "D", "horizon": H,
        "covariates": {"promo": [None if v != v else v for v in past]}, "future_covariates": {"promo": future}})
    assert (rest.status_code, rest.json()["error"]["code"]) == (422, code), rest.text
    assert typed_error(server, values, past, future) == code
    with pytest.raises(InferenceServerException) as err:
        oip_grpc.infer("forecast", grpc_inputs(values, past, future), parameters=PARAMS)
    assert err.value.message().startswith(f"{code}:")
    if code != "covariate_not_finite":  # JSON has no NaN; the binary gRPC tensor above carries it
        resp = oip_rest(server, values, past, future)
        assert (resp.status_code, resp.json()["code"]) == (422, code), resp.text


def test_covariate_columns_must_match_their_names(server):
    values, past, future = promo_series()
    for params in ({"covariate_names": "promo,price"}, {"covariate_names": ""}, {"covariate_names": "a,a"}):
        resp = oip_rest(server, values, past, future, **params)
        assert (resp.status_code, resp.json()["code"]) == (422, "covariate_names_mismatch"), resp.text
