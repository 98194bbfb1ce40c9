"""The runner tier's Prometheus metrics (BentoML's /metrics of the runner service, aggregated across its workers):
one module, so what the runner exports reads in one place. The gateway tier's are observability/metrics.py."""
from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram, Summary

from triserve.runners.memory import MB

if TYPE_CHECKING:
    from triserve.runners.memory import MemoryBudget
    from triserve.runners.pool import LoadedModel

# the runner's models: compute (runners/compute.py), loads and residency (runners/repository_state.py,
# runners/on_demand.py)
BATCH_SIZE = Histogram("triserve_runner_batch_size", "Items per ONNX Runtime call, per model slot.",
                       ["slot", "model"], buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
EXPIRED = Counter("triserve_runner_expired_total", "Items dropped before compute because their deadline passed.",
                  ["slot"])
MODEL_INFO = Gauge("triserve_model_info", "Loaded model per slot (value 1).", ["slot", "name", "version", "sha256",
                   "provider"], multiprocess_mode="max")
MODEL_MEMORY = Gauge("triserve_model_memory_bytes", "Measured memory of each loaded model version: resident, per "
                     "batch item, and reserved (resident + per item x batch cap; runners/memory.py).",
                     ["slot", "version", "kind"], multiprocess_mode="max")
MEMORY_BUDGET = Gauge("triserve_runner_memory_budget_bytes", "The runner's memory budget: total, reserved, free.",
                      ["state"], multiprocess_mode="max")
MODEL_RESIDENT = Gauge("triserve_model_resident", "1 while a slot's model is loaded in the runner, 0 when it is not "
                       "(on-demand deployments: runners/residency.py).", ["slot"], multiprocess_mode="max")
MODEL_LOADS = Counter("triserve_model_loads_total", "Model loads per slot by trigger (startup, on_demand, admin) and "
                      "outcome (ok, refused).", ["slot", "trigger", "outcome"])
MODEL_EVICTIONS = Counter("triserve_model_evictions_total", "On-demand models unloaded to make room or by the admin "
                          "API.", ["slot"])
LOAD_DURATION = Histogram("triserve_model_load_duration_seconds", "Pull-verify-load-warm time of a model load, "
                          "per slot (an on-demand deployment's first requests wait this long).", ["slot"],
                          buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120))
MEMORY_SPLITS = Counter("triserve_runner_memory_splits_total", "Runner batches split because they exceeded the "
                        "model's memory batch cap.", ["slot"])
BATCH_SECONDS = Histogram("triserve_runner_batch_seconds", "ONNX Runtime time per batch, per model slot.",
                          ["slot", "model"],
                          buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
# Triton's execution_count and batch_stats (services/protocols/statistics.py): BATCH_SECONDS per version and exact
# batch size (one series per size the runner has computed: bounded by its largest batch)
EXECUTIONS = Summary("triserve_runner_execution_seconds", "ONNX Runtime time per batch, per model version and batch "
                     "size (items).", ["slot", "model", "version", "size"])

# merged calls (runners/merge.py)
MERGED_CALLS = Histogram("triserve_runner_merged_calls", "Runner calls (from any API worker or gateway instance) "
                         "served by one computation, per slot.", ["slot"], buckets=(1, 2, 3, 4, 6, 8, 12, 16, 32))
GATHER_SECONDS = Histogram("triserve_runner_gather_seconds", "Time an idle runner waited for the other callers' "
                           "calls before a computation (runners/merge.py), per slot.", ["slot"],
                           buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05))

# the fast path (runners/fast_path.py): calls that bypassed BentoML's stack, so bentoml_service_request_total does not
# count them
FAST_PATH_CALLS = Counter("triserve_runner_fast_path_calls_total", "Model calls the runner answered on its fast path "
                          "(its own UNIX socket), by outcome (ok, error).", ["outcome"])


def model_info(slot: str, m: LoadedModel) -> None:
    """A loaded model's identity and measured memory (set when it is installed or activated; its load time goes to
    LOAD_DURATION where the load happens)."""
    MODEL_INFO.labels(slot, m.manifest.name, m.manifest.version, m.manifest.file(m.manifest.model_file).sha256,
                      m.provider).set(1)
    if m.footprint is not None:
        fp = m.footprint
        for kind, mb in (("resident", fp.resident_mb), ("per_item", fp.per_item_mb),
                         ("reserved", fp.need(m.batch_cap))):
            MODEL_MEMORY.labels(slot, m.manifest.version, kind).set(mb * MB)


def memory_gauges(budget: MemoryBudget) -> None:
    """The memory budget's total, reserved and free bytes (set after every load, install or unload)."""
    for state, mb in (("total", budget.budget_mb), ("reserved", budget.used_mb), ("free", budget.free_mb)):
        MEMORY_BUDGET.labels(state).set(mb * MB)
