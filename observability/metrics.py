"""The gateway tier's Prometheus metrics (exported through BentoML's /metrics, aggregated across processes): the
request path, admission, batching, breakers, rollouts and drift, in one module (the runner tier's: runners/metrics.py;
process-wide ones, the allocator's, the accelerator's and the log writer's, stay with their modules in observability/).

Buckets are dense between 1 ms and 10 s so P50, P99 and P999 can be read with histogram_quantile.
"""
from __future__ import annotations

import functools
import os
import time

from prometheus_client import Counter, Gauge, Histogram, Summary

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                   0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0)

REQUESTS = Counter("triserve_requests_total", "Inference requests by model family, deployment ('' when the request "
                   "was refused before naming one) and HTTP status.", ["family", "deployment", "status"])
STAGE_SECONDS = Histogram("triserve_stage_seconds", "Per-stage latency (preprocess, queue, infer, postprocess, "
                          "total) per deployment.", ["deployment", "stage"], buckets=LATENCY_BUCKETS)
RUNNER_INFLIGHT = Gauge("triserve_runner_queue_depth", "Runner calls (batches) in flight per model slot: at most "
                        "gateway.workers x gateway.batch_inflight per slot and instance, whatever the load. Not a load "
                        "signal: scale and alert on triserve_deployment_pending_items.", ["slot"],
                        multiprocess_mode="livesum")
# The scaling signal (issue 19): the work a deployment holds in an instance, from admission to the runner's answer:
# admitted items in the API worker's batcher queue, in a runner call (the runner's queue and compute), on either slot
# (primary, fallback). Every API worker process exports its share (it holds its own admission, batcher and runner
# calls; runner.placement=local runs the runner inside it); livesum adds the live workers of the instance up. Not
# counted: requests still being parsed or preprocessed (the CPU metric sees those), shadow mirrors, and a runner call
# still computing after every request in it gave up (504: their items leave the gauge when the request ends).
# Items = requests for one-item requests, which is how the knee was measured (docs/bench/knee.md); items are what the
# runner's cost follows when requests carry several. Targets derived from the knee: docs/operations.md "Autoscaling".
PENDING_ITEMS = Gauge("triserve_deployment_pending_items", "Items (images, texts, series) of a deployment admitted and "
                      "not yet answered by the runner: in the gateway batcher's queue or in a runner call (queued or "
                      "computing), primary and fallback slots together; summed over the instance's API workers.",
                      ["deployment"], multiprocess_mode="livesum")
PENDING_REQUESTS = Gauge("triserve_deployment_pending_requests", "Requests of a deployment admitted and not yet "
                         "answered by the runner (the requests that triserve_deployment_pending_items' items belong "
                         "to); summed over the instance's API workers.", ["deployment"], multiprocess_mode="livesum")
RUNNER_RETRIES = Counter("triserve_runner_retries_total", "Runner calls retried after a transport error.", ["slot"])
DEGRADED = Counter("triserve_degraded_total", "Requests answered by a fallback model, by deployment and reason.",
                   ["deployment", "reason"])
REJECTED = Counter("triserve_rejected_total", "Requests refused before inference, by family, deployment ('' when "
                   "refused before naming one) and error code.", ["family", "deployment", "code"])
ITEMS = Histogram("triserve_request_items", "Items (images, texts, series) per request.", ["deployment"],
                  buckets=(1, 2, 4, 8, 16, 32, 64, 128))


# Triton's statistics extension (GET /v2/models/stats, gRPC ModelStatistics: services/protocols/statistics.py reads
# these back from every process's multiprocess files; a pipeline's successes and stage times are STAGE_SECONDS'). The
# per-version ones count runner calls of a registry model, whichever deployment or transport they come from.
DEPLOYMENT_FAILED = Summary("triserve_deployment_failed_seconds", "Requests that entered a deployment's pipeline and "
                            "failed (refused, timed out, errored; any transport) and their time in it.",
                            ["deployment"])
DEPLOYMENT_LAST = Gauge("triserve_deployment_last_inference_timestamp_seconds", "Unix time of a deployment's last "
                        "successful response.", ["deployment"], multiprocess_mode="max")
VERSION_CALLS = Summary("triserve_version_call_seconds", "Runner calls per registry model version by outcome "
                        "(success, fail: refused by admission, errored, timed out, invalid output) and their round "
                        "trip; compute: the compute time of the execution each successful call rode in.",
                        ["slot", "model", "version", "stat"])
VERSION_ITEMS = Counter("triserve_version_items_total", "Items of successful runner calls per registry model "
                        "version.", ["slot", "model", "version"])
VERSION_LAST = Gauge("triserve_version_last_inference_timestamp_seconds", "Unix time of a registry model version's "
                     "last successful runner call.", ["slot", "model", "version"], multiprocess_mode="max")

# batcher (kernel/runner_call/batcher.py)
GATEWAY_BATCH = Histogram("triserve_gateway_batch_requests", "Requests coalesced into one runner call, per slot.",
                          ["slot"], buckets=(1, 2, 4, 8, 16, 32, 64, 128))
QUEUE_WAIT = Histogram("triserve_gateway_queue_wait_seconds", "Wait of the oldest request of each runner call in its "
                       "slot's gateway batcher queue (submitted -> call left), per slot.", ["slot"],
                       buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))

# rollout (kernel/routing/rollout.py)
VERSION_REQUESTS = Counter("triserve_version_requests_total", "Runner calls per model version and role "
                           "(stable/canary), by outcome.", ["slot", "version", "role", "outcome"])
VERSION_SECONDS = Histogram("triserve_version_seconds", "Runner round trip per model version and role.",
                            ["slot", "version", "role"], buckets=LATENCY_BUCKETS)
CANARY_ROLLBACKS = Counter("triserve_canary_rollbacks_total", "Canaries withdrawn automatically.", ["slot", "reason"])
SHADOW_CALLS = Counter("triserve_shadow_total", "Shadow mirror calls by outcome (ok, dropped, error).",
                       ["slot", "version", "outcome"])
SHADOW_AGREEMENT = Histogram("triserve_shadow_agreement", "Per-request agreement of shadow vs served answer "
                             "(1 = identical; detection: matched-box share, text: top-1 match, forecast: 1 - "
                             "relative difference).", ["slot", "version"],
                             buckets=(0.0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0))
SHADOW_SECONDS = Histogram("triserve_shadow_seconds", "Shadow runner round trip.", ["slot", "version"],
                           buckets=LATENCY_BUCKETS)

# drift (kernel/routing/drift.py)
DRIFT_PSI = Gauge("triserve_drift_psi", "Population Stability Index of a live distribution vs the manifest reference "
                  "(0.1 moderate, 0.2 significant drift).", ["family", "model", "signal"], multiprocess_mode="max")

# breaker (kernel/protection/breaker.py)
BREAKER_STATE = Gauge("triserve_breaker_state", "Circuit breaker state per primary slot: 0 closed, 1 half-open, "
                      "2 open.", ["slot"], multiprocess_mode="max")
BREAKER_TRANSITIONS = Counter("triserve_breaker_transitions_total", "Breaker state changes.", ["slot", "to"])


@functools.cache
def labelled(metric, *values: str):
    """metric.labels(*values), looked up once per label set. Why: prometheus_client rebuilds the label key and takes
    a lock on every .labels() call (~3 us); the dozen per request on the hot path were ~4% of the API worker's CPU
    under load (py-spy, docs/performance.md). Children are never removed here, so remembering them is safe."""
    return metric.labels(*values)


def pending_declared(deployment: str) -> None:
    """Export the deployment's pending gauges at 0 before its first request: an autoscaler metric with no series at
    all is an error, and a Kubernetes HPA with an invalid metric never scales down."""
    labelled(PENDING_ITEMS, deployment)
    labelled(PENDING_REQUESTS, deployment)


def pending_started(deployment: str, items: int) -> None:
    """A request's items were admitted (called with admission's own count, paired with pending_finished)."""
    labelled(PENDING_REQUESTS, deployment).inc()
    labelled(PENDING_ITEMS, deployment).inc(items)


def pending_finished(deployment: str, items: int) -> None:
    labelled(PENDING_ITEMS, deployment).dec(items)
    labelled(PENDING_REQUESTS, deployment).dec()


def observe_timings(deployment: str, timings) -> None:
    """A successful response's per-stage latency, and the deployment's last successful inference (kernel/call.py)."""
    for stage in ("preprocess", "queue", "infer", "postprocess", "total"):
        labelled(STAGE_SECONDS, deployment, stage).observe(getattr(timings, f"{stage}_ms") / 1000.0)
    labelled(DEPLOYMENT_LAST, deployment).set(time.time())


def deployment_failed(deployment: str, seconds: float) -> None:
    labelled(DEPLOYMENT_FAILED, deployment).observe(seconds)


def version_succeeded(slot: str, model: str, version: str, items: int, seconds: float, compute_s: float) -> None:
    """A successful runner call: its round trip, the compute of its execution (at most the round trip), its items."""
    labelled(VERSION_CALLS, slot, model, version, "success").observe(seconds)
    labelled(VERSION_CALLS, slot, model, version, "compute").observe(min(compute_s, seconds))
    labelled(VERSION_ITEMS, slot, model, version).inc(items)
    labelled(VERSION_LAST, slot, model, version).set(time.time())


def version_failed(slot: str, model: str, version: str, seconds: float) -> None:
    labelled(VERSION_CALLS, slot, model, version, "fail").observe(seconds)
INFLIGHT = Gauge("triserve_inflight_requests", "Inference requests being handled, per model family.", ["family"],
                 multiprocess_mode="livesum")
RSS = Gauge("triserve_process_rss_bytes", "Resident memory per process.", ["service"], multiprocess_mode="all")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


_last_rss = 0.0


def observe_rss(service: str) -> None:
    """Resident set size from /proc, sampled at most once a second (called from request and batch paths)."""
    global _last_rss
    _drain_gc_pauses()
    now = time.monotonic()
    if now - _last_rss < 1.0:
        return
    _last_rss = now
    try:
        with open("/proc/self/statm") as fh:
            RSS.labels(service).set(int(fh.read().split()[1]) * _PAGE)
    except OSError:
        pass


GC_PAUSE = Histogram("triserve_gc_pause_seconds", "Python garbage-collector pauses per generation (every request "
                     "of the process waits for them).", ["service", "generation"],
                     buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0))


_gc_pauses: list[tuple[str, str, float]] = []  # filled by the GC callback, drained by observe_rss
_pause_service = ""


def settle_heap(service: str) -> None:
    """Call once startup is done. Moves everything allocated so far (frameworks, models, schemas: hundreds of
    thousands of long-lived objects) out of the collector's reach with gc.freeze(), so a full collection under traffic
    scans only what requests created: it was a source of ~100 ms stalls at the open-loop p99. Then times every
    collection. The callback only appends to a list: a collection can start inside prometheus_client while it holds
    its (non-reentrant) lock, so observing the histogram from the callback deadlocks the worker; observe_rss moves
    the pauses into triserve_gc_pause_seconds from ordinary code."""
    import gc

    gc.collect()
    gc.freeze()
    global _pause_service
    _pause_service = service  # the process's last settled role names its pauses
    for generation in ("0", "1", "2"):  # every series from the start: the first full collection adds none
        GC_PAUSE.labels(service, generation)
    if any(getattr(cb, "triserve_pause_timer", False) for cb in gc.callbacks):
        return  # one timer per process (runner.placement=local settles the runner inside the API worker)
    gc.callbacks.append(_PauseTimer())


class _PauseTimer:
    """The gc callback of settle_heap: each collection's pause appended to _gc_pauses (nothing else)."""

    triserve_pause_timer = True  # how settle_heap recognises one already installed

    def __init__(self) -> None:
        self.started: dict[int, float] = {}

    def __call__(self, phase: str, info: dict) -> None:
        gen = info.get("generation", 0)
        if phase == "start":
            self.started[gen] = time.perf_counter()
        elif gen in self.started and len(_gc_pauses) < 10_000:
            _gc_pauses.append((_pause_service, str(gen), time.perf_counter() - self.started.pop(gen)))


def _drain_gc_pauses() -> None:
    while _gc_pauses:
        service, gen, seconds = _gc_pauses.pop()
        GC_PAUSE.labels(service, gen).observe(seconds)
