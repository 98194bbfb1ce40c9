"""BentoML's own clients against a real `bentoml serve`: /schema.json lists the JSON inference routes, so
bentoml.SyncHTTPClient / AsyncHTTPClient expose .classify, .detect, .pose, .segment and .forecast, which call the REST
routes themselves (same protection, same error model)."""
from __future__ import annotations

import asyncio
import json
from http import HTTPStatus

import bentoml
import httpx
import pytest
from bentoml.exceptions import BentoMLException

from triserve.services.client_schema import client_apis


def test_schema_lists_the_inference_routes(server):
    schema = httpx.get(f"{server.url}/schema.json", timeout=30).json()
    routes = {r["name"]: r for r in schema["routes"]}
    apis = client_apis()
    assert apis == {"classify": "/v1/classify", "detect": "/v1/detect", "pose": "/v1/pose",
                    "segment": "/v1/segment", "forecast": "/v1/forecast", "forecast_panel": "/v1/forecast/panel",
                    "forecast_backtest": "/v1/forecast/backtest", "classify_image": "/v1/classify-image"}
    for name, path in apis.items():
        assert routes[name]["route"] == path
        assert routes[name]["output"]["type"] == "object" and "request_id" in routes[name]["output"]["properties"]
    assert routes["classify"]["input"]["required"] == ["texts"]
    assert routes["detect"]["input"]["properties"]["images"]["items"]["properties"]["data"]["type"] == "string"
    assert set(routes["forecast"]["input"]["properties"]) >= {"values", "start", "frequency", "horizon"}
    assert "$ref" not in json.dumps(schema["routes"])  # flat, as BentoML's own routes are


def test_sync_client_classify_detect_forecast(server, tiny_png_b64):
    with bentoml.SyncHTTPClient(server.url, timeout=60) as client:
        text = client.classify(texts=["what is my account balance", "book me a flight"], top_k=2)
        assert text["deployment"] == "text" and len(text["results"]) == 2
        assert all(len(r["top_k"]) == 2 and 0 <= r["score"] <= 1 for r in text["results"])
        assert text["request_id"]

        det = client.detect(images=[{"data": tiny_png_b64}], conf_threshold=0.001, max_detections=5)
        assert det["results"][0]["width"] == 96 and det["results"][0]["height"] == 64
        assert len(det["results"][0]["detections"]) <= 5

        line = [10.0 + 2.0 * i for i in range(48)]
        fc = client.forecast(values=line, start="2000-01-01T00:00:00", frequency="MS", horizon=6)
        points = [p["point"] for p in fc["forecast"]]
        assert len(points) == 6 and fc["input"]["frequency"] == "MS"
        assert fc["forecast"][0]["timestamp"].startswith("2004-01-01")
        assert points[0] == pytest.approx(line[-1] + 2.0, abs=3.0)  # a straight line goes on straight
        assert points[-1] > points[0]

        seg = client.segment(images=[{"data": tiny_png_b64}], conf_threshold=0.001, max_detections=3)
        assert seg["deployment"] == "segmentation"
        assert seg["results"][0]["width"] == 96 and seg["results"][0]["height"] == 64
        assert len(seg["results"][0]["instances"]) <= 3

        image = client.classify_image(images=[{"data": tiny_png_b64}], top_k=2)  # the sixth family, from the registry
        assert image["deployment"] == "classification" and len(image["results"][0]["top_k"]) == 2


def test_sync_client_gets_the_error_model(server):
    with bentoml.SyncHTTPClient(server.url, timeout=60) as client:
        with pytest.raises(BentoMLException) as info:
            client.classify(texts=["\x00\x01"])  # blank after removing control characters: 422 empty_text
    assert info.value.error_code == HTTPStatus.UNPROCESSABLE_ENTITY
    error = json.loads(str(info.value.message))["error"]
    assert error["code"] == "empty_text" and error["request_id"]


def test_async_client_classify(server):
    async def call():
        async with bentoml.AsyncHTTPClient(server.url, timeout=60) as client:
            return await client.classify(texts=["set an alarm for 7am"])

    body = asyncio.run(call())
    assert body["deployment"] == "text" and body["results"][0]["label"]
