"""The repository page's figures from metric samples: per deployment requests by status class, degraded answers,
pending items and the latency histogram with Prometheus' histogram_quantile; per slot the breaker and the split."""
from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from triserve.services.console.summary import quantile, summarize


def test_quantile_interpolates_within_the_bucket_like_prometheus():
    buckets = [(0.1, 10.0), (0.2, 30.0), (0.5, 40.0), (math.inf, 40.0)]
    assert quantile(0.5, buckets) == pytest.approx(0.15)  # rank 20: halfway through (0.1, 0.2]
    assert quantile(0.25, buckets) == pytest.approx(0.1 * 10 / 10)  # rank 10: the first bucket's upper bound
    assert quantile(0.99, buckets) == pytest.approx(0.2 + 0.3 * (39.6 - 30) / 10)
    assert quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None
    assert quantile(0.99, [(0.1, 1.0), (math.inf, 5.0)]) == 0.1  # in +Inf: the highest finite bound


def samples_of(registry: CollectorRegistry):
    return [(s.name, dict(s.labels), float(s.value)) for m in registry.collect() for s in m.samples]


def test_summarize_groups_by_deployment_and_slot():
    reg = CollectorRegistry()
    requests = Counter("triserve_requests_total", "", ["family", "deployment", "status"], registry=reg)
    degraded = Counter("triserve_degraded_total", "", ["deployment", "reason"], registry=reg)
    stage = Histogram("triserve_stage_seconds", "", ["deployment", "stage"], buckets=(0.01, 0.1, 1.0), registry=reg)
    breaker = Gauge("triserve_breaker_state", "", ["slot"], registry=reg)
    split = Counter("triserve_version_requests_total", "", ["slot", "version", "role", "outcome"], registry=reg)
    requests.labels("text", "intent", "200").inc(8)
    requests.labels("text", "intent", "422").inc(1)
    requests.labels("text", "intent", "503").inc(1)
    requests.labels("text", "", "400").inc(5)  # refused before naming a deployment: no deployment to show it on
    degraded.labels("intent", "primary_failed").inc(2)
    for seconds in (0.005, 0.05, 0.05, 0.5):
        stage.labels("intent", "total").observe(seconds)
    stage.labels("intent", "infer").observe(5.0)  # other stages are not the request's latency
    breaker.labels("intent").set(2)
    split.labels("intent", "1.0.0", "stable", "ok").inc(7)
    split.labels("intent", "1.1.0", "canary", "ok").inc(2)
    split.labels("intent", "1.1.0", "canary", "error").inc(1)

    out = summarize(samples_of(reg), now=123.0)
    assert out["time"] == 123.0 and set(out["deployments"]) == {"intent"}
    dep = out["deployments"]["intent"]
    assert (dep["requests"], dep["ok"], dep["client_errors"], dep["server_errors"], dep["degraded"]) == \
        (10, 8, 1, 1, 2)
    lat = dep["latency"]
    assert lat["count"] == 4 and lat["sum_s"] == pytest.approx(0.605)
    assert lat["buckets"] == [[0.01, 1], [0.1, 3], [1.0, 4], ["+Inf", 4]]
    assert lat["p50_ms"] == pytest.approx(1000 * (0.01 + 0.09 * (2 - 1) / 2))
    assert out["slots"]["intent"] == {"breaker": "open", "versions": {"1.0.0": {"stable": 7}, "1.1.0": {"canary": 3}}}
