"""End to end through a real `bentoml serve` with tiny models: golden outputs against in-process ONNX Runtime with the
same pre/post-processing, batched == unbatched, the error model, request ids, readiness."""
from __future__ import annotations

import base64
import io
import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from PIL import Image, ImageDraw

from scripts.common import ort_session
from triserve import families
from triserve.families.forecast.ensemble import backtest_cuts, backtest_steps, combine
from triserve.families.forecast.features import MAX_HORIZON, MEDIAN_INDEX
from triserve.families.forecast.postprocess import quantile_forecast
from triserve.families.forecast.preprocess import model_item
from triserve.families.text.preprocess import TextTokenizer
from triserve.families.vision.letterbox import boxes_to_original, preprocess_image
from triserve.families.vision.nms import NMSParams, nms

TEXTS = ["what is my balance", "book a table for two at an italian restaurant tonight please", "hi",
         "set an alarm for 7am", "how do I say thank you in french", "transfer $100 from checking to savings",
         "tell me a joke", "what's the weather like in the city where I am going next week for my vacation",
         "ok", "cancel my reservation", "play some music", "what time is it in tokyo"]


def png_bytes(w=320, h=240, seed=0) -> bytes:
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 60, (h, w, 3), dtype=np.uint8))
    draw = ImageDraw.Draw(img)
    draw.rectangle([40, 30, 140, 120], fill=(220, 40, 40))
    draw.ellipse([180, 100, 280, 200], fill=(40, 200, 60))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def post(server, path, **kw) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", timeout=60, **kw)


def artifact(registry, name):
    return registry.load_verified(name, "stable")


# --- golden outputs -----------------------------------------------------------------------------------------------
def test_detection_matches_in_process_pipeline(server, tiny_registry):
    raw = png_bytes()
    resp = post(server, "/v1/detect", json={"images": [{"data": base64.b64encode(raw).decode()}],
                                            "conf_threshold": 0.001, "max_detections": 20})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    directory, m = artifact(tiny_registry, body["model"]["name"])
    assert body["model"]["version"] == m.version and body["degraded"] is False
    image = np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"))
    tensor, meta = preprocess_image(image, m.preprocess.imgsz)
    out = ort_session(directory / m.model_file).run(None, {m.inputs[0].name: tensor[None]})[0][0]
    det = nms(out, NMSParams(conf_threshold=0.001, max_detections=20))
    expected = boxes_to_original(det.boxes, meta)
    got = body["results"][0]
    assert (got["width"], got["height"]) == (320, 240)
    assert len(got["detections"]) == len(det.scores) > 0
    assert np.allclose([d["box"] for d in got["detections"]], expected, atol=0.02)
    assert np.allclose([d["score"] for d in got["detections"]], det.scores, atol=1e-4)
    assert [d["label"] for d in got["detections"]] == [m.labels[c] for c in det.classes]


def test_multipart_upload_equals_json(server):
    raw = png_bytes(seed=3)
    j = post(server, "/v1/detect", json={"images": [{"data": base64.b64encode(raw).decode()}],
                                         "conf_threshold": 0.001}).json()
    u = post(server, "/v1/detect/upload", files=[("images", ("a.png", raw, "image/png"))],
             data={"conf_threshold": "0.001"})
    assert u.status_code == 200, u.text
    assert u.json()["results"] == j["results"]


def test_text_matches_in_process_pipeline(server, tiny_registry):
    resp = post(server, "/v1/classify", json={"texts": TEXTS[:3], "top_k": 3})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    directory, m = artifact(tiny_registry, body["model"]["name"])
    tok = TextTokenizer(directory / m.preprocess.tokenizer_file, m.preprocess.max_length)
    ids, mask = tok.encode_padded(TEXTS[:3])
    probs = ort_session(directory / m.model_file).run(None, {"input_ids": ids, "attention_mask": mask})[0]
    for row, p in zip(body["results"], probs):
        top = np.argsort(-p)[:3]
        assert [x["label"] for x in row["top_k"]] == [m.labels[i] for i in top]
        assert np.allclose([x["score"] for x in row["top_k"]], p[top], atol=1e-5)


def test_forecast_matches_in_process_pipeline(server, tiny_registry):
    n = 53
    values = (340 + np.sin(np.arange(n) / 12 * 2 * np.pi) * 3 + np.arange(n) * 0.1).round(3).tolist()
    resp = post(server, "/v1/forecast", json={"values": values, "start": "1990-01-01T00:00:00", "frequency": "MS",
                                              "horizon": 6})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    directory, m = artifact(tiny_registry, body["model"]["name"])
    pre = m.preprocess
    # the served forecaster: the model on the full history and on each backtest cut, combined with the classical
    # methods (families/forecast/ensemble.py)
    y = np.array(values)
    cuts = backtest_cuts(n, 6)
    session = ort_session(directory / m.model_file)
    model_q = []
    for k, c in enumerate([n, *cuts]):  # the first step after c points: month c from 1990-01
        item = model_item(pre, y[:c], "MS", np.datetime64(f"{1990 + c // 12}-{c % 12 + 1:02d}-01T00:00:00", "s"))
        feeds = families.runtime("forecast").feeds(m, [i.name for i in m.inputs], [item.x])
        raw = session.run(None, feeds)[0][0]
        model_q.append(quantile_forecast(raw, pre, item.loc, item.scale, 6 if k == 0 else backtest_steps(n, 6))[1])
    expected = combine(y, "MS", 6, model_q)
    assert np.allclose([p["point"] for p in body["forecast"]], expected.quantiles[:, MEDIAN_INDEX], rtol=1e-6)
    assert np.allclose([p["quantiles"]["0.05"] for p in body["forecast"]], expected.quantiles[:, 0], rtol=1e-6)
    assert body["forecast"][0]["timestamp"].startswith(f"{1990 + n // 12}-{n % 12 + 1:02d}-01")
    for p in body["forecast"]:
        assert p["lower_90"] <= p["lower_50"] <= p["point"] <= p["upper_50"] <= p["upper_90"]
        assert list(p["quantiles"]) == [f"{q:g}" for q in pre.quantiles]
    assert body["input"] == {"frequency": "MS", "frequency_inferred": False, "sorted": False, "duplicates_merged": 0,
                             "imputed": 0, "points": n, "used": n, "padded": pre.context - n,
                             "method": expected.method, "method_weights": pytest.approx(expected.weights),
                             "backtest_mase": pytest.approx(expected.backtest_mase), "backtest_origins": len(cuts),
                             "interval_calibration": "conformal", "level_shift": None, "covariates": None,
                             "static": None}


@pytest.mark.parametrize("frequency,step", [("YS", None), ("QS", None), ("MS", None), ("W", 7 * 86400),
                                            ("D", 86400), ("h", 3600), ("30min", 1800), ("15min", 900), ("min", 60)])
def test_forecast_every_frequency_inferred_from_timestamps(server, frequency, step):
    """No frequency given: it is inferred from the timestamps, and the default horizon is the model's for it."""
    n = 40
    if step is None:
        months = {"YS": 12, "QS": 3, "MS": 1}[frequency]
        ts = [f"{1950 + (i * months) // 12}-{(i * months) % 12 + 1:02d}-01T00:00:00Z" for i in range(n)]
    else:
        t0 = np.datetime64("2026-11-02T00:00:00", "s")
        ts = [f"{t0 + i * np.timedelta64(step, 's')}Z" for i in range(n)]
    values = [float(v) for v in 1e9 + 1e7 * np.sin(np.arange(n))]
    resp = post(server, "/v1/forecast", json={"values": values, "timestamps": ts})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["input"]["frequency"] == frequency and body["input"]["frequency_inferred"] is True
    assert len(body["forecast"]) == MAX_HORIZON[frequency]
    points = np.array([p["point"] for p in body["forecast"]])
    assert np.isfinite(points).all() and np.abs(points / 1e9 - 1).max() < 1  # the series' own units


@pytest.mark.parametrize("values", [[1e-6 * (1 + 0.1 * (i % 5)) for i in range(30)],
                                    [1e12 + 1e9 * (i % 5) for i in range(30)],
                                    [7.0] * 30, [-3.5] * 2 + [-3.0] * 28, [0.0] * 30])
def test_forecast_any_finite_scale_and_constant_series(server, values):
    resp = post(server, "/v1/forecast", json={"values": values, "start": "2000-01-01T00:00:00", "frequency": "D"})
    assert resp.status_code == 200, resp.text
    points = np.array([p["point"] for p in resp.json()["forecast"]])
    span = max(values) - min(values)
    assert np.isfinite(points).all()
    # a constant series has the floor scale max(1e-10 |level|, 1e-300) (families/forecast/features.py): its forecast
    # is the constant to that precision
    tol = 10 * span + 1e-9 * abs(np.mean(values)) + 1e-290
    assert np.all(np.abs(points - np.mean(values)) <= tol)
    if span == 0:
        assert np.allclose(points, values[0], rtol=1e-8, atol=1e-290)


@pytest.mark.parametrize("frequency", ["MS", "D", "h"])
def test_forecast_continues_a_straight_line(server, frequency):
    """The issue's first try: a noise-free trend 10, 20, ..., 300 is continued 310, 320, 330 (within 1 %) whatever
    the global model does with it, and the answer says so (drift, backtest error 0)."""
    body = post(server, "/v1/forecast", json={"values": [10.0 * i for i in range(1, 31)], "frequency": frequency,
                                              "start": "2020-01-01T00:00:00", "horizon": 3}).json()
    points = [p["point"] for p in body["forecast"]]
    assert np.allclose(points, [310, 320, 330], rtol=0.01), points
    assert "drift" in body["input"]["method"] and body["input"]["backtest_mase"] == pytest.approx(0, abs=1e-6)


def test_forecast_short_series_padded_not_refused(server):
    body = post(server, "/v1/forecast", json={"values": [5.0, 6.0, 7.0], "start": "2020-01-01T00:00:00",
                                              "frequency": "QS", "horizon": 4}).json()
    assert len(body["forecast"]) == 4 and body["input"]["used"] == 3 and body["input"]["padded"] == 768 - 3


def test_forecast_regularises_messy_input(server):
    n = 60
    ts = [f"{2000 + i // 12}-{i % 12 + 1:02d}-01T00:00:00" for i in range(n)]
    values = [float(v) for v in 350 + np.arange(n) * 0.2]
    messy_ts, messy_v = ts[::-1] + [ts[10]], values[::-1] + [values[10]]
    messy_v[5] = None  # a null in the middle
    del messy_ts[20], messy_v[20]  # a gap
    body = post(server, "/v1/forecast", json={"values": messy_v, "timestamps": messy_ts, "horizon": 3,
                                              "frequency": "MS"}).json()
    assert body["input"]["sorted"] is True and body["input"]["duplicates_merged"] == 1
    assert body["input"]["imputed"] == 2 and body["input"]["points"] == n


# --- batching ---------------------------------------------------------------------------------------------------
def test_batched_equals_unbatched_and_batches_form(server):
    single = {t: post(server, "/v1/classify", json={"texts": [t], "top_k": 5}).json()["results"][0] for t in TEXTS}
    together = post(server, "/v1/classify", json={"texts": TEXTS, "top_k": 5}).json()["results"]
    with ThreadPoolExecutor(max_workers=16) as pool:
        concurrent = list(pool.map(lambda t: post(server, "/v1/classify", json={"texts": [t], "top_k": 5}),
                                   TEXTS * 4))
    for t, row in zip(TEXTS, together):
        assert np.allclose([x["score"] for x in row["top_k"]], [x["score"] for x in single[t]["top_k"]], atol=1e-5)
    for t, resp in zip(TEXTS * 4, concurrent):
        row = resp.json()["results"][0]
        assert [x["label"] for x in row["top_k"]] == [x["label"] for x in single[t]["top_k"]]
        assert np.allclose([x["score"] for x in row["top_k"]], [x["score"] for x in single[t]["top_k"]], atol=1e-5)
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    count = le1 = 0.0
    for line in metrics.splitlines():
        if line.startswith("triserve_runner_batch_size_bucket") and 'slot="text"' in line and 'le="1.0"' in line:
            le1 = float(line.split()[-1])
        if line.startswith("triserve_runner_batch_size_count") and 'slot="text"' in line:
            count = float(line.split()[-1])
    assert count > le1, "no text batch ever held more than one request"
    assert 'triserve_stage_seconds_count{deployment="text",stage="infer"}' in metrics
    assert 'triserve_runner_queue_depth{slot="text"}' in metrics
    assert 'triserve_requests_total{deployment="text",family="text",status="200"}' in metrics


def test_model_calls_take_the_runners_fast_path_past_bentomls_stack(server):
    """One `bentoml serve`: the gateway reaches the runner over BentoML's UNIX socket, so its model calls go to the
    runner's own socket (runners/fast_path.py) and never through BentoML's /infer."""
    def counts() -> tuple[float, float]:
        fast = bentoml_infer = 0.0
        for line in httpx.get(f"{server.url}/metrics", timeout=10).text.splitlines():
            if line.startswith('triserve_runner_fast_path_calls_total{outcome="ok"}'):
                fast = float(line.split()[-1])
            if line.startswith("bentoml_service_request_total") and 'endpoint="/infer"' in line \
                    and 'service_name="triserve-runner"' in line:
                bentoml_infer += float(line.split()[-1])
        return fast, bentoml_infer

    fast_before, bentoml_before = counts()
    for text in TEXTS[:5]:  # one after the other: a model call each
        assert post(server, "/v1/classify", json={"texts": [text]}).json()["degraded"] is False
    fast_after, bentoml_after = counts()
    assert fast_after - fast_before >= 5
    assert bentoml_after == bentoml_before


# --- envelope -----------------------------------------------------------------------------------------------------
def test_request_id_is_echoed_and_timings_present(server):
    resp = post(server, "/v1/classify", json={"texts": ["hello"]}, headers={"X-Request-ID": "abc-123"})
    assert resp.headers["x-request-id"] == "abc-123"
    body = resp.json()
    assert body["request_id"] == "abc-123"
    assert set(body["timings"]) == {"preprocess_ms", "queue_ms", "infer_ms", "postprocess_ms", "total_ms"}
    assert body["timings"]["total_ms"] >= body["timings"]["infer_ms"] > 0
    generated = post(server, "/v1/classify", json={"texts": ["hello"]}, headers={"X-Request-ID": "bad id with spaces!"})
    assert generated.headers["x-request-id"] != "bad id with spaces!" and len(generated.headers["x-request-id"]) == 32


def test_request_and_batch_lines_reach_the_log_and_bentoml_access_lines_do_not(server):
    """The background writers flush within their interval; BentoML's duplicate access log is off by default."""
    rid = "log-check-7"
    assert post(server, "/v1/classify", json={"texts": ["hello"]}, headers={"X-Request-ID": rid}).status_code == 200
    deadline, lines = time.monotonic() + 5, []
    while time.monotonic() < deadline:
        lines = server.log_path.read_text(errors="replace").splitlines()
        if any(f'"request_id": "{rid}"' in x for x in lines) and any(rid in x and '"event": "batch"' in x
                                                                     for x in lines):
            break
        time.sleep(0.1)
    request_lines = [json.loads(x) for x in lines if x.startswith('{"ts"') and f'"request_id": "{rid}"' in x]
    assert request_lines and request_lines[0]["path"] == "/v1/classify" and request_lines[0]["status"] == 200
    assert any(rid in x and '"event": "batch"' in x for x in lines)
    assert not any("(scheme=" in x and "/v1/classify" in x for x in lines)


def test_fallback_on_request_is_flagged(server):
    body = post(server, "/v1/classify", json={"texts": ["hello"], "model": "fallback"}).json()
    assert body["degraded"] is True and body["degraded_reason"] == "requested"
    assert body["model"]["name"] == "minilm-intent-int8"


# --- error model --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path,kwargs,status,code", [
    ("/v1/classify", {"json": {"texts": []}}, 422, "validation_error"),
    ("/v1/classify", {"json": {"texts": ["   \u200b "]}}, 422, "empty_text"),
    ("/v1/classify", {"json": {"texts": ["x" * 1_000_001]}}, 422, "text_too_long"),  # shorter: truncated
    ("/v1/classify", {"json": {"texts": ["a"] * 1000}}, 422, "too_many_texts"),
    ("/v1/classify", {"json": {"texts": ["a"], "extra": 1}}, 422, "validation_error"),
    ("/v1/classify", {"content": b"{not json", "headers": {"content-type": "application/json"}}, 400,
     "malformed_json"),
    ("/v1/classify", {"content": b"texts=a", "headers": {"content-type": "text/plain"}}, 415,
     "unsupported_media_type"),
    ("/v1/detect", {"json": {"images": [{"data": "!!notbase64!!"}]}}, 422, "invalid_base64"),
    ("/v1/detect", {"json": {"images": [{"data": base64.b64encode(b"hello, not an image").decode()}]}}, 422,
     "invalid_image"),
    ("/v1/detect", {"json": {"images": [{"data": base64.b64encode(png_bytes()[:200]).decode()}]}}, 422,
     "invalid_image"),
    ("/v1/detect", {"json": {"images": [{"data": "aGVsbG8="}] * 50}}, 422, "too_many_images"),
    ("/v1/detect/upload", {"files": [("images", ("a.txt", b"plain text", "text/plain"))]}, 422, "invalid_image"),
    ("/v1/forecast", {"json": {"values": [1.0, 2.0], "start": "2000-01-01T00:00:00", "frequency": "MS"}}, 422,
     "series_too_short"),
    ("/v1/forecast", {"json": {"values": [1.0] * 40, "start": "2000-01-01T00:00:00", "frequency": "MS",
                               "horizon": 25}}, 422, "horizon_too_long"),
    ("/v1/forecast", {"json": {"values": [1.0] * 40}}, 422, "validation_error"),
    ("/v1/forecast", {"json": {"values": [1.0] * 40, "start": "2000-01-01T00:00:00"}}, 422, "validation_error"),
    ("/v1/forecast", {"json": {"values": [1.0, 2.0], "timestamps": ["2000-01-01T00:00:00"] * 2}}, 422,
     "frequency_required"),
    ("/v1/forecast", {"content": b'{"values": [1.0, Infinity], "start": "2000-01-01T00:00:00", "frequency": "D"}',
                      "headers": {"content-type": "application/json"}}, 422, "non_finite_value"),
    ("/v1/forecast", {"json": {"values": [1.0] * 20_000, "start": "2000-01-01T00:00:00", "frequency": "D"}}, 422,
     "series_too_long"),
    ("/v1/forecast", {"json": {"values": [1.5] * 1_000_000, "start": "2000-01-01T00:00:00", "frequency": "D"}}, 422,
     "series_too_long"),
    ("/v1/forecast", {"json": {"values": [1.0] + [None] * 9, "start": "2000-01-01T00:00:00", "frequency": "D"}}, 422,
     "too_many_missing"),
    ("/v1/forecast", {"json": {"values": [1.0] * 40, "start": "2000-01-01T00:00:00", "frequency": "Q"}}, 422,
     "validation_error"),
    ("/v1/detect", {"json": {"images": []}}, 422, "validation_error"),
    ("/v1/detect", {"json": {"images": [{"data": "http://169.254.169.254/latest/meta-data"}]}}, 422,
     "invalid_base64"),
])
def test_bad_input_gets_a_4xx_with_the_error_model(server, path, kwargs, status, code):
    resp = post(server, path, **kwargs)
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["code"] == code
    assert err["message"] and err["request_id"] == resp.headers["x-request-id"]


@pytest.mark.parametrize("text", ["\u202eevil rtl override", "emoji \U0001F600\U0001F680 mix", "nul\x00byte",
                                  "\u0000\u0001", "ｆｕｌｌｗｉｄｔｈ", "e\u0301\u0301\u0301" * 300])
def test_odd_unicode_is_classified_or_refused_cleanly(server, text):
    resp = post(server, "/v1/classify", json={"texts": [text]})
    assert resp.status_code in (200, 422), resp.text
    if resp.status_code == 422:
        assert resp.json()["error"]["code"] == "empty_text"


def test_decompression_bomb_is_refused_before_decoding(server):
    img = Image.new("L", (10_000, 10_000))  # 100 MP of zeros compresses to ~100 KB
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    resp = post(server, "/v1/detect/upload", files=[("images", ("bomb.png", buf.getvalue(), "image/png"))])
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "image_too_many_pixels"


def test_oversized_body_is_413(server):
    resp = post(server, "/v1/classify", content=b"x" * (65 * 2**20), headers={"content-type": "application/json"})
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "payload_too_large"


def test_openapi_documents_schemas_and_examples(server):
    spec = httpx.get(f"{server.url}/openapi.json", timeout=10).json()
    assert {"/v1/detect", "/v1/detect/upload", "/v1/classify", "/v1/forecast"} <= set(spec["paths"])
    schemas = spec["components"]["schemas"]
    assert schemas["ClassifyRequest"]["examples"]
    assert "description" in schemas["ForecastRequest"]["properties"]["values"]


def test_models_endpoint_reports_provider(server):
    status = httpx.get(f"{server.url}/v1/models", timeout=10).json()
    assert status["ready"] is True
    providers = {slot: m["provider"] for slot, m in status["models"].items()}
    assert providers.pop("forecast_fallback") == "numpy"  # the Theta method: no ONNX Runtime provider
    assert set(providers.values()) == {"CPUExecutionProvider"}
    assert set(status["models"]) == {"detection", "detection_fallback", "text", "text_fallback", "forecast",
                                     "forecast_fallback", "segmentation", "segmentation_fallback", "classification",
                                     "classification_fallback"}
    # where the runner's start went (scripts/bench/restart.py reports it)
    startup = status["runner_startup"]
    assert set(startup) == {"process_to_init_s", "registry_s", "load_s"} and min(startup.values()) >= 0
    # every loaded model says under which licence its weights are served, and where they came from
    from triserve.models.manifest import check_spdx

    for m in status["models"].values():
        assert check_spdx(m["license"]) and m["source"]["kind"] in ("package", "recipe", "user")
    for dep in status["deployments"]:
        for role in ("model", "fallback"):
            if role not in dep:
                continue
            slot = dep[role]
            assert slot["license"] == status["models"][slot["slot"]]["license"]
            assert slot["source"] == status["models"][slot["slot"]]["source"]


# --- readiness ------------------------------------------------------------------------------------------------
def test_readiness_turns_green_only_after_models_are_warm(tiny_registry, tmp_path):
    from tests.conftest import NO_CAPACITY_LIMITS, Server

    srv = Server(tiny_registry.root, env={**NO_CAPACITY_LIMITS, "TRISERVE_RUNNER__STARTUP_DELAY_S": "8"},
                 log_path=tmp_path / "slow.log")
    try:
        saw_not_ready = False
        for _ in range(200):
            try:
                live = httpx.get(f"{srv.url}/livez", timeout=2)
                ready = httpx.get(f"{srv.url}/readyz", timeout=6)
            except httpx.HTTPError:
                import time

                time.sleep(0.2)
                continue
            if ready.status_code == 503:
                assert live.status_code == 200
                saw_not_ready = True
                break
        assert saw_not_ready, "never observed /readyz 503 while the runner was loading"
        srv.wait_ready(timeout=120)
        assert post(srv, "/v1/classify", json={"texts": ["hello"]}).status_code == 200
    finally:
        srv.stop()
