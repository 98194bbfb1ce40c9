"""Service metrics helpers: GC pause accounting (the collector callback must only record, no prometheus call inside a
collection) and remembered labelled children."""
from __future__ import annotations

import gc

from triserve.observability import metrics


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

    from triserve.observability.metrics import labelled

    counter = Counter("triserve_test_labelled_total", "test", ["task", "status"], registry=CollectorRegistry())
    child = labelled(counter, "text", "200")
    assert child is labelled(counter, "text", "200") is counter.labels("text", "200")  # same child, cached
    assert labelled(counter, "text", "503") is not child
    child.inc()
    labelled(counter, "text", "200").inc(2)
    assert counter.labels("text", "200")._value.get() == 3.0


_WORKER = """
import sys
from triserve.observability.metrics import pending_declared, pending_finished, pending_started
pending_declared("coco")
pending_started("intent", int(sys.argv[1]))
print("started", flush=True)
sys.stdin.readline()
pending_finished("intent", int(sys.argv[1]))
print("finished", flush=True)
sys.stdin.readline()
"""


def test_pending_gauges_add_up_over_live_processes(tmp_path):
    """The scaling signal under Prometheus multiprocess mode (how BentoML serves /metrics): each API worker process
    writes its own share, /metrics sums the live ones (livesum), a deployment is exported at 0 before its first
    request, and a finished request leaves nothing behind."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(root)}

    def values() -> dict[tuple[str, str], float]:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(tmp_path))
        return {(s.name, s.labels["deployment"]): s.value for m in registry.collect() for s in m.samples
                if s.name in ("triserve_deployment_pending_items", "triserve_deployment_pending_requests")}

    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, str(n)], env=env, cwd=root, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE) for n in (3, 1)]
    try:
        for w in workers:
            assert w.stdout.readline().strip() == "started"
        assert values() == {("triserve_deployment_pending_items", "intent"): 4.0,
                            ("triserve_deployment_pending_requests", "intent"): 2.0,
                            ("triserve_deployment_pending_items", "coco"): 0.0,
                            ("triserve_deployment_pending_requests", "coco"): 0.0}
        workers[1].stdin.write("\n")
        workers[1].stdin.flush()
        assert workers[1].stdout.readline().strip() == "finished"
        assert values()[("triserve_deployment_pending_items", "intent")] == 3.0
        # a worker killed mid-request leaves its share until it is marked dead (BentoML's metrics client does so when
        # its process shuts down, not when it is killed: then the share stays until the server restarts and wipes
        # the directory); livesum then drops it
        workers[0].kill()
        workers[0].wait(timeout=10)
        assert values()[("triserve_deployment_pending_items", "intent")] == 3.0
        mark_process_dead(workers[0].pid, str(tmp_path))
        assert values()[("triserve_deployment_pending_requests", "intent")] == 0.0
    finally:
        for w in workers:
            if w.poll() is None:
                w.stdin.write("\n")
                w.stdin.flush()
                try:
                    w.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    w.kill()
                    w.wait(timeout=10)
