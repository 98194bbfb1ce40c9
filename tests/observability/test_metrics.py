"""Service metrics helpers: GC pause accounting (the collector callback must only record, no prometheus call inside a
collection) and remembered labelled children."""
from __future__ import annotations

import gc

from observability import metrics


def _count(service: str) -> float:
    return sum(s.value for m in metrics.GC_PAUSE.collect() for s in m.samples
               if s.name.endswith("_count") and s.labels.get("service") == service)


def test_gc_pauses_are_recorded_by_the_callback_and_observed_only_when_drained():
    callbacks = list(gc.callbacks)
    try:
        metrics.settle_heap("unit-test")
        assert gc.get_freeze_count() > 0  # startup objects are out of the collector's reach
        before = _count("unit-test")
        gc.collect()
        assert _count("unit-test") == before  # nothing observed from inside the collection
        assert any(service == "unit-test" for service, _, _ in metrics._gc_pauses)
        metrics._last_rss = 0.0
        metrics.observe_rss("unit-test")
        assert _count("unit-test") > before
        assert not metrics._gc_pauses
    finally:
        gc.callbacks[:] = callbacks
        gc.unfreeze()


def test_labelled_children_are_the_metrics_own_and_looked_up_once():
    from prometheus_client import CollectorRegistry, Counter

    from observability.metrics import labelled

    counter = Counter("triserve_test_labelled_total", "test", ["task", "status"], registry=CollectorRegistry())
    child = labelled(counter, "text", "200")
    assert child is labelled(counter, "text", "200") is counter.labels("text", "200")  # same child, cached
    assert labelled(counter, "text", "503") is not child
    child.inc()
    labelled(counter, "text", "200").inc(2)
    assert counter.labels("text", "200")._value.get() == 3.0
