from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import triserve.kernel.request_context as rc
import triserve.observability.tracing as tracing


def test_each_stage_becomes_a_span_in_order(monkeypatch):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    monkeypatch.setattr(tracing, "_tracer", tracer)
    rc.StageClock().stage("untraced")  # no recording request span (tracing off): nothing is created
    assert exporter.get_finished_spans() == ()
    with tracer.start_as_current_span("request"):  # BentoML's request span when tracing is on
        clock = rc.StageClock()
        for stage in ("preprocess", "runner", "postprocess"):
            clock.stage(stage)
    spans = [s for s in exporter.get_finished_spans() if s.name != "request"]
    assert [s.name for s in spans] == ["triserve.preprocess", "triserve.runner", "triserve.postprocess"]
    assert all(a.end_time <= b.start_time for a, b in zip(spans, spans[1:]))
    t = clock.timings(infer_ms=0.0)
    assert t.total_ms >= t.preprocess_ms + t.postprocess_ms
