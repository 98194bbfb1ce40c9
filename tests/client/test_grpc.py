"""triserve_client.grpc: its own copy of the stubs is the server's (the serialized FileDescriptorProto of each, read in
a process of its own, and a fresh generation from the server's proto); against the real session server its
classify/detect/segment/forecast answer what REST answers for the same inputs, sync and async; errors carry the
service's code; and `import triserve_client` works without grpcio."""
from __future__ import annotations

import asyncio
import base64
import importlib.util
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import descriptor_pb2, text_format

from tests.conftest import free_port
from tests.families.classification.test_serving import COLOURS
from tests.families.classification.test_serving import png as colour_png
from tests.families.forecast.test_covariates import promo_series
from tests.families.segmentation.test_serving import png as seg_png
from tests.services.test_gateway import png_bytes
from triserve_client import (
    BacktestResponse,
    ClassifyImageResponse,
    ClassifyResponse,
    DetectResponse,
    ForecastResponse,
    RetryPolicy,
    SegmentResponse,
    TriserveAPIError,
    TriserveClient,
    TriserveTimeoutError,
    TriserveTransportError,
)
from triserve_client.grpc import AsyncTriserveGrpcClient, TriserveGrpcClient

ROOT = Path(__file__).resolve().parents[2]
SERIES = [round(340 + 3 * math.sin(i * math.pi / 6) + 0.1 * i, 3) for i in range(48)]
# every field of an answer but the two that differ between any two calls
VOLATILE = {"request_id", "timings"}


# --- the client's stubs are the server's ------------------------------------------------------------------------
def serialized_descriptor(module: str) -> bytes:
    """DESCRIPTOR.serialized_pb of `module`, imported alone in a fresh interpreter: in one process the second of two
    files named triserve.proto would get the first one's descriptor from protobuf's default pool (or fail to load)."""
    code = f"import sys, {module} as m; sys.stdout.buffer.write(m.DESCRIPTOR.serialized_pb)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout


def descriptor_drift(server: bytes, client: bytes) -> str:
    """'' when both serialized FileDescriptorProtos are the same file, else both as text, for the failure message."""
    if server == client:
        return ""
    s, c = descriptor_pb2.FileDescriptorProto(), descriptor_pb2.FileDescriptorProto()
    s.ParseFromString(server)
    c.ParseFromString(client)
    if s == c:  # the same descriptor, serialized differently
        return ""
    return (f"the client's stubs (client/triserve_client/_proto) differ from the server's: run "
            f"`python client/gen_protos.py`\n--- server\n{text_format.MessageToString(s)}\n--- client\n"
            f"{text_format.MessageToString(c)}")


def test_the_client_stubs_describe_the_servers_proto():
    server = serialized_descriptor("triserve.services.protocols.generated.triserve_pb2")
    client = serialized_descriptor("triserve_client._proto.triserve_pb2")
    assert descriptor_drift(server, client) == ""
    parsed = descriptor_pb2.FileDescriptorProto.FromString(client)
    assert parsed.package == "triserve.v1" and [s.name for s in parsed.service] == ["Triserve"]
    assert [m.name for m in parsed.service[0].method] == ["Detect", "Classify", "Forecast", "ForecastPanel",
                                                          "ForecastBacktest", "Pose", "Segment", "ClassifyImage"]


def test_a_drifted_client_descriptor_is_caught():
    server = serialized_descriptor("triserve.services.protocols.generated.triserve_pb2")
    drifted = descriptor_pb2.FileDescriptorProto.FromString(server)
    request = next(m for m in drifted.message_type if m.name == "ClassifyRequest")
    request.field.add(name="language", number=9, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    assert 'name: "language"' in descriptor_drift(server, drifted.SerializeToString())


def test_the_client_stubs_are_a_fresh_generation_of_the_servers_proto():
    spec = importlib.util.spec_from_file_location("client_gen_protos", ROOT / "client" / "gen_protos.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.stale() == [], "client/triserve_client/_proto is stale: run `python client/gen_protos.py`"


def test_triserve_client_imports_without_grpcio():
    probe = """
import importlib.abc, sys

class NoGrpc(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "grpc" or name.startswith("google.protobuf"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoGrpc())
import triserve_client
assert "TriserveClient" in triserve_client.__all__
try:
    import triserve_client.grpc
except ImportError as exc:
    print("ImportError:", exc)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ImportError: triserve_client.grpc needs grpcio and protobuf: pip install 'triserve-client[grpc]'" \
        in done.stdout


# --- the same answers as REST --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rest(server):
    with TriserveClient(server.url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def rpc(server):
    with TriserveGrpcClient(server.grpc_target, timeout=60) as client:
        yield client


def same(a, b) -> None:
    assert type(a) is type(b)
    assert a.model_dump(exclude=VOLATILE) == b.model_dump(exclude=VOLATILE)


def test_classify_answers_what_rest_answers(rest, rpc):
    texts = ["what is my balance", "book a flight to paris " * 400]
    r = rpc.classify(texts, top_k=2, request_id="grpc-classify-1")
    assert isinstance(r, ClassifyResponse) and r.request_id == "grpc-classify-1"
    same(r, rest.classify(texts, top_k=2))
    assert r.results[1].truncated and len(r.results[0].top_k) == 2
    fallback = rpc.classify("hi", model="fallback", deployment="text")
    assert fallback.degraded and fallback.degraded_reason == "requested"
    same(fallback, rest.classify("hi", model="fallback", deployment="text"))


def test_detect_answers_what_rest_answers(rest, rpc, tmp_path):
    raw = png_bytes(seed=7)
    path = tmp_path / "shapes.png"
    path.write_bytes(raw)
    opts = {"conf_threshold": 0.001, "max_detections": 10}
    r = rpc.detect([raw, path], **opts)
    assert isinstance(r, DetectResponse) and r.results[0].detections and r.results[0].width == 320
    same(r, rest.detect([raw, path], **opts))
    assert rpc.detect(base64.b64encode(raw).decode(), **opts).results == r.results[:1]
    lite = rpc.detect(raw, model="fallback", class_aware=False, iou_threshold=0.5)
    same(lite, rest.detect(raw, model="fallback", class_aware=False, iou_threshold=0.5))


def test_forecast_answers_what_rest_answers(rest, rpc):
    r = rpc.forecast(SERIES, start="1990-01-01T00:00:00", frequency="MS", horizon=6)
    assert isinstance(r, ForecastResponse) and len(r.forecast) == 6 and r.input.frequency == "MS"
    same(r, rest.forecast(SERIES, start="1990-01-01T00:00:00", frequency="MS", horizon=6))
    gappy = [None if i in (5, 17) else v for i, v in enumerate(SERIES)]
    stamps = [f"{1990 + i // 12}-{i % 12 + 1:02d}-01T00:00:00" for i in range(len(SERIES))]
    g = rpc.forecast(gappy, timestamps=stamps, horizon=3)
    assert g.input.imputed == 2 and g.input.frequency_inferred
    same(g, rest.forecast(gappy, timestamps=stamps, horizon=3))
    theta = rpc.forecast(SERIES, start="1990-01-01T00:00:00", frequency="MS", horizon=3, model="fallback")
    same(theta, rest.forecast(SERIES, start="1990-01-01T00:00:00", frequency="MS", horizon=3, model="fallback"))


def test_forecasts_with_covariates_and_panels_answer_what_rest_answers(rest, rpc):
    values, past, future = promo_series()
    kw = {"start": "2024-01-01T00:00:00", "frequency": "D", "horizon": 7, "covariates": {"promo": past},
          "future_covariates": {"promo": future}, "calendar": ["weekday", "holidays:US"]}
    r = rpc.forecast(values, **kw)
    assert r.input.covariates is not None and r.input.covariates.used
    assert [e.name for e in r.input.covariates.effects][-1] == "holidays:US"
    same(r, rest.forecast(values, **kw))
    # a panel: each series its own start (or the call's), one with covariates
    series = {"promo": {"values": values, "start": "2024-01-01", "covariates": {"promo": past},
                        "future_covariates": {"promo": future}},
              "late": {"values": SERIES, "start": "2025-03-01"}, "plain": values}
    p = rpc.forecast_panel(series, start="2024-02-01", frequency="D", horizon=7, calendar=["weekday"])
    assert [s.id for s in p.series] == ["promo", "late", "plain"]
    assert p.series[0].input.covariates.used and p.series[2].input.covariates.effects[0].name == "weekday=tue"
    assert [str(s.forecast[0].timestamp.date()) for s in p.series] == ["2024-04-30", "2025-04-18", "2024-05-31"]
    same(p, rest.forecast_panel(series, start="2024-02-01", frequency="D", horizon=7, calendar=["weekday"]))
    short = {**kw, "future_covariates": {"promo": future[:3]}}
    with pytest.raises(TriserveAPIError) as g:
        rpc.forecast(values, **short)
    with pytest.raises(TriserveAPIError) as h:
        rest.forecast(values, **short)
    assert g.value.code == h.value.code == "covariate_horizon" and g.value.status == h.value.status == 422


def test_a_panel_with_static_categoricals_answers_what_rest_answers(rest, rpc):
    """SeriesInput.static on the typed gRPC ForecastPanel (and the gRPC client): the same pooling and the same
    input.static report as REST; a series without the panel's names is the same 422 on both."""
    rng = np.random.default_rng(11)
    series = {f"sku-{i}": {"values": (100 + 10 * np.sin(np.arange(40) / 7 * 2 * np.pi) + rng.normal(0, 3, 40)
                                      ).round(3).tolist(), "static": {"store_type": "AB"[i % 2], "region": "north"}}
              for i in range(6)}
    kw = {"start": "2024-01-01", "frequency": "D", "horizon": 5}
    p = rpc.forecast_panel(series, **kw)
    static = p.series[0].input.static
    assert static is not None and {c.name for c in static.categoricals} == {"store_type", "region"}
    same(p, rest.forecast_panel(series, **kw))
    series["sku-0"] = {"values": series["sku-0"]["values"]}
    with pytest.raises(TriserveAPIError) as g:
        rpc.forecast_panel(series, **kw)
    with pytest.raises(TriserveAPIError) as h:
        rest.forecast_panel(series, **kw)
    assert g.value.code == h.value.code == "static_missing" and g.value.status == h.value.status == 422


def test_a_backtest_answers_what_rest_answers(rest, rpc):
    """Triserve/ForecastBacktest: the same origins, metrics and forecasts as POST /v1/forecast/backtest; a step
    without a scale (a constant history: REST's null) comes back as None too (NaN on the wire)."""
    kw = {"start": "1990-01-01T00:00:00", "frequency": "MS", "horizon": 3, "origins": 2}
    r = rpc.forecast_backtest(SERIES, **kw)
    assert isinstance(r, BacktestResponse) and len(r.origins) == 2 and len(r.mase_by_step) == 3
    assert all(len(o.forecast) == len(o.actual) == 3 for o in r.origins)
    same(r, rest.forecast_backtest(SERIES, **kw))
    flat = rpc.forecast_backtest([5.0] * 40, **kw)
    assert flat.mase is None and flat.mase_by_step == [None, None, None]
    same(flat, rest.forecast_backtest([5.0] * 40, **kw))
    with pytest.raises(TriserveAPIError) as g:
        rpc.forecast_backtest(SERIES[:5], **kw)
    with pytest.raises(TriserveAPIError) as h:
        rest.forecast_backtest(SERIES[:5], **kw)
    assert (g.value.code, g.value.status) == (h.value.code, h.value.status) and g.value.status == 422


def test_segment_answers_what_rest_answers_but_polygons(rest, rpc):
    raw = seg_png()
    opts = {"conf_threshold": 0.3, "max_detections": 10}
    both = rpc.segment(raw, mask_format="both", request_id="grpc-seg-1", **opts)
    assert isinstance(both, SegmentResponse) and both.request_id == "grpc-seg-1" and both.results[0].instances
    same(both, rest.segment(raw, mask_format="both", **opts))
    r = rpc.segment(raw, **opts)  # mask_format rle: proto3 repeated polygons come as [], REST's as None
    expected = rest.segment(raw, **opts).model_dump(exclude=VOLATILE)
    for inst in expected["results"][0]["instances"]:
        inst["polygons"] = []
    assert r.model_dump(exclude=VOLATILE) == expected and all(i.rle for i in r.results[0].instances)


def test_classify_image_answers_what_rest_answers(rest, rpc, tmp_path):
    raw = [colour_png(COLOURS["black"]), colour_png(COLOURS["green"], 120, 40)]
    path = tmp_path / "green.png"
    path.write_bytes(raw[1])
    r = rpc.classify_image([raw[0], path], top_k=3, request_id="grpc-classify-image-1")
    assert isinstance(r, ClassifyImageResponse) and r.request_id == "grpc-classify-image-1"
    assert [x.label for x in r.results] == ["black", "green"] and len(r.results[0].top_k) == 3
    same(r, rest.classify_image([raw[0], path], top_k=3))
    lite = rpc.classify_image(base64.b64encode(raw[0]).decode(), model="fallback", deployment="classification")
    assert lite.degraded and lite.degraded_reason == "requested"
    same(lite, rest.classify_image(raw[0], model="fallback", deployment="classification"))


def test_pose_is_routed_to_the_services_pose_method(rpc):
    """No pose deployment on the test server: Triserve/Pose answers the service's error, as REST does."""
    with pytest.raises(TriserveAPIError) as err:
        rpc.pose(seg_png(), request_id="grpc-pose-1")
    assert err.value.request_id == "grpc-pose-1" and err.value.code and err.value.code != "grpc_unimplemented"


def test_async_grpc_client(server, rest):
    async def go():
        async with AsyncTriserveGrpcClient(server.grpc_target, timeout=60) as ts:
            return await asyncio.gather(ts.classify(["what is my balance"], request_id="grpc-async-1"),
                                        ts.detect(png_bytes(seed=8), conf_threshold=0.001),
                                        ts.forecast(SERIES, start="1990-01-01T00:00:00", frequency="MS", horizon=2),
                                        ts.segment(seg_png(), conf_threshold=0.3, mask_format="both"),
                                        ts.classify_image(colour_png(COLOURS["red"]), top_k=2),
                                        ts.forecast_backtest(SERIES, start="1990-01-01", frequency="MS", horizon=2))

    c, d, f, sg, ci, bt = asyncio.run(go())
    assert c.request_id == "grpc-async-1"
    same(c, rest.classify(["what is my balance"]))
    same(d, rest.detect(png_bytes(seed=8), conf_threshold=0.001))
    same(f, rest.forecast(SERIES, start="1990-01-01T00:00:00", frequency="MS", horizon=2))
    same(sg, rest.segment(seg_png(), conf_threshold=0.3, mask_format="both"))
    same(ci, rest.classify_image(colour_png(COLOURS["red"]), top_k=2))
    same(bt, rest.forecast_backtest(SERIES, start="1990-01-01", frequency="MS", horizon=2))


# --- errors ---------------------------------------------------------------------------------------------------------
def test_grpc_errors_carry_the_services_code(rpc):
    with pytest.raises(TriserveAPIError) as err:
        rpc.classify([], request_id="grpc-422")
    e = err.value
    assert (e.status, e.code, e.request_id, e.attempts) == (422, "validation_error", "grpc-422", 1)
    assert e.message and not e.message.startswith("validation_error:") and e.details
    with pytest.raises(TriserveAPIError) as err:
        rpc.classify("hi", deployment="nope")
    assert (err.value.status, err.value.code) == (404, "unknown_deployment")
    assert err.value.details["known"] == ["text"]
    with pytest.raises(TriserveAPIError) as err:
        rpc.forecast([1.0, 2.0], start="2000-01-01T00:00:00", frequency="MS")
    assert err.value.code == "series_too_short"
    with pytest.raises(ValueError):
        rpc.classify("hi", model="best")


def test_grpc_without_a_server_is_a_transport_error_after_retries():
    policy = RetryPolicy(attempts=2, backoff_initial=0.01, backoff_max=0.02)
    target = f"127.0.0.1:{free_port()}"
    with TriserveGrpcClient(target, retry=policy, timeout=5, wait_for_ready=False) as ts:
        with pytest.raises(TriserveTransportError) as err:
            ts.classify("hi", request_id="grpc-refused")
    assert err.value.attempts == 2 and err.value.request_id == "grpc-refused"
    # waiting for the service ends at the call's deadline, as a timeout
    with TriserveGrpcClient(target, retry=policy, timeout=1.5, wait_for_ready=True) as ts:
        started = time.monotonic()
        with pytest.raises(TriserveTimeoutError) as late:
            ts.classify("hi", request_id="grpc-waited")
    assert late.value.request_id == "grpc-waited" and 1.4 <= time.monotonic() - started < 5


def test_a_call_made_while_the_service_restarts_waits_for_it():
    """wait_for_ready: the port opens 1.5 s after the call is made (as when the gateway worker serving gRPC is
    started again), and the call is answered instead of refused with UNAVAILABLE; without wait_for_ready (the
    default) the same call fails at once (one attempt: no retry hides the difference)."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    from triserve_client._proto import triserve_pb2, triserve_pb2_grpc

    class LateServicer(triserve_pb2_grpc.TriserveServicer):
        def Classify(self, request, context):  # the gRPC method name
            return triserve_pb2.ClassifyResponse(model=triserve_pb2.ModelInfo(name="late", version="1"),
                                                 deployment="text")

    target = f"127.0.0.1:{free_port()}"
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    triserve_pb2_grpc.add_TriserveServicer_to_server(LateServicer(), server)
    one_attempt = RetryPolicy(attempts=1)
    with TriserveGrpcClient(target, retry=one_attempt, timeout=20) as fast:
        with pytest.raises(TriserveTransportError):
            fast.classify("hi")

    def open_port() -> None:
        server.add_insecure_port(target)
        server.start()

    opener = threading.Timer(1.5, open_port)
    try:
        with TriserveGrpcClient(target, retry=one_attempt, timeout=20, wait_for_ready=True) as ts:
            opener.start()
            started = time.monotonic()
            answer = ts.classify("hi")
            waited = time.monotonic() - started
    finally:
        opener.cancel()
        server.stop(0)
    assert (answer.model.name, answer.deployment) == ("late", "text")
    assert waited >= 1.4  # answered after the port opened, not before
