"""GC pause accounting: the collector callback must only record (no prometheus call inside a collection)."""
from __future__ import annotations

import gc

from services.common import metrics


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
