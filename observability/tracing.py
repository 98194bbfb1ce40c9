"""The `tracing` section of both BentoML services, from triserve's typed settings.

Why: BentoML wraps every request of every service in OpenTelemetry's ASGI middleware, which gathers request attributes
and opens a span even when nothing is sampled (BentoML's default sample rate is 0): 0.32 ms of the 1.17 ms of CPU the
gateway spends per text request, 10% of its throughput on one core (docs/bench/tuning.md, otel_middleware). With
`observability.trace_sample_rate` 0 (the default) every URL is excluded from that middleware, which then hands
requests straight through. With a rate > 0 the services
get BentoML's tracing configured here (OTLP over HTTP to `observability.otlp_endpoint`): the request span, the stage
spans of kernel/request_context.StageClock and the runner's spans are exported.

Set here rather than in BENTOML_CONFIG because BentoML 1.4 merges each service's own config over the file's top-level
`tracing` section, so a v1-style file never reached these services.
"""
from __future__ import annotations

from opentelemetry import trace

ALL_URLS = ".*"  # a regular expression OpenTelemetry's ExcludeList matches against every request URL


def service_tracing(sample_rate: float, otlp_endpoint: str | None) -> dict:
    """Keyword arguments for @bentoml.service."""
    if sample_rate <= 0:
        return {"tracing": {"excluded_urls": ALL_URLS}}
    cfg: dict = {"sample_rate": float(sample_rate)}
    if otlp_endpoint:
        cfg.update(exporter_type="otlp", otlp={"protocol": "http", "endpoint": otlp_endpoint})
    return {"tracing": cfg}


_tracer: trace.Tracer | None = None  # BentoML's, on first use (its provider is not OpenTelemetry's global one)


def stage_tracer() -> trace.Tracer:
    """A tracer of the provider BentoML exports request spans with: a tracer from OpenTelemetry's global provider
    (never set in a BentoML worker) would make every stage span a no-op."""
    global _tracer
    if _tracer is None:
        from bentoml._internal.configuration.containers import BentoMLContainer

        _tracer = BentoMLContainer.tracer_provider.get().get_tracer("triserve")
    return _tracer
