"""observability/tracing.py: the OpenTelemetry request middleware is bypassed when nothing is sampled, and with a
sample rate the request and stage spans reach an OTLP collector from a real `bentoml serve`."""
from __future__ import annotations

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.conftest import NO_CAPACITY_LIMITS, Server
from triserve.observability.tracing import ALL_URLS, service_tracing


def test_sample_rate_zero_bypasses_the_middleware():
    assert service_tracing(0.0, None) == {"tracing": {"excluded_urls": ALL_URLS}}
    assert service_tracing(0.0, "http://127.0.0.1:4318/v1/traces") == {"tracing": {"excluded_urls": ALL_URLS}}


def test_sample_rate_configures_bentoml_otlp_export():
    assert service_tracing(0.25, "http://127.0.0.1:4318/v1/traces") == {"tracing": {
        "sample_rate": 0.25, "exporter_type": "otlp",
        "otlp": {"protocol": "http", "endpoint": "http://127.0.0.1:4318/v1/traces"}}}


def test_the_exclusion_matches_every_request_url():
    from opentelemetry.util.http import ExcludeList

    excluded = ExcludeList([ALL_URLS])
    for url in ("http://127.0.0.1:3000/v1/classify", "http://x/", "http://x/metrics?x=1"):
        assert excluded.url_disabled(url)


def test_a_sample_rate_without_an_endpoint_is_refused():
    from triserve.configs.settings import Observability

    with pytest.raises(ValueError, match="otlp_endpoint"):
        Observability(trace_sample_rate=0.5)
    configured = Observability(trace_sample_rate=0.5, otlp_endpoint="http://127.0.0.1:4318/v1/traces")
    assert configured.trace_sample_rate == 0.5


class _Collector(ThreadingHTTPServer):
    """An OTLP/HTTP trace endpoint on 127.0.0.1 that keeps every exported span."""

    def __init__(self):
        self.spans: list = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's naming
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                for rs in req.resource_spans:
                    service = next((a.value.string_value for a in rs.resource.attributes
                                    if a.key == "service.name"), "")
                    for ss in rs.scope_spans:
                        collector.spans.extend((service, s) for s in ss.spans)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_configured_tracing_exports_request_and_stage_spans(tiny_registry, tmp_path):
    collector = _Collector()
    thread = threading.Thread(target=collector.serve_forever, daemon=True)
    thread.start()
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_OBSERVABILITY__TRACE_SAMPLE_RATE": "1.0",
           "TRISERVE_OBSERVABILITY__OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_port}/v1/traces",
           "OTEL_BSP_SCHEDULE_DELAY": "200", "TRISERVE_GRPC__ENABLED": "false"}
    try:
        with Server(tiny_registry.root, env=env, log_path=tmp_path / "serve.log") as srv:
            srv.wait_ready()
            r = httpx.post(f"{srv.url}/v1/classify", json={"texts": ["book a flight"]}, timeout=30)
            assert r.status_code == 200, r.text
            deadline = time.monotonic() + 20
            names: set[str] = set()
            while time.monotonic() < deadline:
                names = {s.name for _, s in collector.spans}
                if {"triserve.preprocess", "triserve.runner", "triserve.postprocess"} <= names:
                    break
                time.sleep(0.2)
    finally:
        collector.shutdown()
    assert {"triserve.preprocess", "triserve.runner", "triserve.postprocess"} <= names, str(sorted(names))
    stages = [s for _, s in collector.spans if s.name.startswith("triserve.")]
    requests = [s for _, s in collector.spans if re.search(r"/v1/classify", s.name) or
                any(a.key in ("http.target", "url.path") and a.value.string_value == "/v1/classify"
                    for a in s.attributes)]
    assert requests, sorted(names)  # BentoML's request span, not excluded when tracing is configured
    request_traces = {s.trace_id for s in requests}
    assert all(s.trace_id in request_traces for s in stages)  # the stages are children of the request's trace
    runner_calls = [s for service, s in collector.spans if service == "triserve-runner" and s.name == "POST /infer"]
    assert any(s.trace_id in request_traces for s in runner_calls), "the runner call is not in the request's trace"
