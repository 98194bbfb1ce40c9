"""Triton's statistics extension (GET /v2/models[/{name}[/versions/{v}]]/stats, gRPC ModelStatistics), read from the
Prometheus metrics every process of the server writes: pure functions from metric samples to Triton's JSON, plus
`read_samples`, the one place that reads them.

Aggregation: BentoML runs prometheus_client in multiprocess mode, every process of one `bentoml serve` (API workers
and runner workers) writing its own files under PROMETHEUS_MULTIPROC_DIR; `read_samples` merges them on a fresh
registry (as /metrics does), so every API worker answers the same totals, for the whole server, since it started
(BentoML empties the directory at start). Without that directory (a single process: unit tests) it reads the
process's own registry. Runner metrics are only in the directory when the runner runs in the same `bentoml serve`
(runner.placement=remote in one serve, or local); a runner tier served apart (scripts/tiers.py, a split Kubernetes
layout) leaves execution_count and batch_stats of tensor models at 0 / empty.

What each field is here (counts are requests unless said otherwise; durations are cumulative nanoseconds):

Pipelines (a deployment, platform triserve_pipeline; its family alias answers the same numbers under its own name),
version "1", every transport (REST, typed gRPC, OIP REST and gRPC):
- success: successful responses, and their time inside the pipeline (triserve_stage_seconds{stage="total"}: from the
  pipeline's start to its response; request parsing before it is not included).
- fail: requests that entered the pipeline and failed (family validation, capacity, admission, deadline, runner
  errors, no fallback left; triserve_deployment_failed_seconds) and their time in it. Requests refused before the
  pipeline (malformed body, request-schema validation, authentication, rate limits, an unknown deployment) count
  nowhere, as a request Triton refuses before scheduling counts for no model.
- queue, compute_input, compute_infer, compute_output: the stages of successful requests: runner round trip less
  compute (gateway batcher wait + transport + runner queue), preprocess, the runner compute of the batch the request
  rode in, postprocess. queue + compute_* <= success (the stages lie inside the total).
- inference_count = execution_count = success.count: a pipeline reports max_batch_size 0 (oip.model_config), and
  Triton counts one inference and one execution per request of such a model; batch_stats: one entry, batch_size 1,
  with the compute stages (empty before the first success). Items per request: triserve_request_items.
- last_inference: the last successful response (ms since the epoch; 0 = none).

Tensor models (a registry model, platform onnxruntime_onnx), per version, summed over the slots that serve it: every
runner call of that model version, whoever made it (an OIP tensor request, or a pipeline: as Triton counts the
composing models of an ensemble):
- success: successful runner calls and their round trip from the gateway (triserve_version_call_seconds).
- fail: runner calls that failed (runner error, invalid output, timeout, deadline passed in the runner's queue) and
  calls the slot's admission refused (Triton's queue rejections, 0 ns), with their round trip.
- compute_infer: the compute time of the execution each successful call rode in (a call whose items were computed in
  several executions: the longest), queue: round trip less that compute, so queue + compute_infer = success.ns.
  compute_input and compute_output: 0 ns (building the feeds and reading the outputs are inside the runner's compute
  time), counts = success.count as Triton's.
- inference_count: items of the successful calls; execution_count and batch_stats: the runner's executions of that
  version (triserve_runner_execution_seconds), all callers, per exact batch size: compute_infer = executions and
  their compute time (compute_input / compute_output: 0 ns).
- last_inference: the last successful call.
- versions: the version(s) the catalog serves now, and any other version of that model that has statistics since the
  server started (a canary, a version since replaced).

Not measured: cache_hit and cache_miss (no response cache: zeros), memory_usage and response_stats (left out).

perf_analyzer reads a model's statistics by integer version (std::stoll of each version, then its to_string): it finds
a pipeline's ("1"), not a tensor model's registry version ("1.0.0-3fa2b1c9" becomes "1"), so its server-side figures
work for pipelines only; tritonclient and anything reading the versions as strings see every version.
"""
from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

# Triton's name -> the pipeline stage of triserve_stage_seconds
PIPELINE_STAGE = {"queue": "queue", "compute_input": "preprocess", "compute_infer": "infer",
                  "compute_output": "postprocess"}

STAGE = "triserve_stage_seconds"
DEPLOYMENT_FAILED = "triserve_deployment_failed_seconds"
DEPLOYMENT_LAST = "triserve_deployment_last_inference_timestamp_seconds"
VERSION_CALLS = "triserve_version_call_seconds"
VERSION_ITEMS = "triserve_version_items_total"
VERSION_LAST = "triserve_version_last_inference_timestamp_seconds"
EXECUTIONS = "triserve_runner_execution_seconds"
SAMPLE_NAMES = frozenset({
    f"{STAGE}_count", f"{STAGE}_sum", f"{DEPLOYMENT_FAILED}_count", f"{DEPLOYMENT_FAILED}_sum", DEPLOYMENT_LAST,
    f"{VERSION_CALLS}_count", f"{VERSION_CALLS}_sum", VERSION_ITEMS, VERSION_LAST,
    f"{EXECUTIONS}_count", f"{EXECUTIONS}_sum",
})

Sample = tuple[str, dict[str, str], float]  # (sample name, labels, value)


def read_samples(directory: str | None = None, names: frozenset[str] = SAMPLE_NAMES) -> list[Sample]:
    """The samples named (default: those the statistics are made of), merged over every process of the server
    (blocking file reads: call it off the event loop)."""
    directory = directory if directory is not None else os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory and os.path.isdir(directory):
        registry = CollectorRegistry(auto_describe=False)
        MultiProcessCollector(registry, path=directory)
        metrics = registry.collect()
    else:
        metrics = REGISTRY.collect()
    return [(s.name, dict(s.labels), float(s.value)) for m in metrics for s in m.samples if s.name in names]


class Samples:
    """Sums (or maxima) of samples by name and label values."""

    def __init__(self, samples: Iterable[Sample]):
        self.by_name: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
        for name, labels, value in samples:
            self.by_name[name].append((labels, value))

    def matching(self, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
        return [(lab, v) for lab, v in self.by_name.get(name, ()) if all(lab.get(k) == x for k, x in labels.items())]

    def sum(self, name: str, **labels: str) -> float:
        return sum(v for _, v in self.matching(name, **labels))

    def max(self, name: str, **labels: str) -> float:
        return max((v for _, v in self.matching(name, **labels)), default=0.0)

    def duration(self, name: str, **labels: str) -> dict[str, int]:
        """A Summary's or Histogram's _count and _sum (seconds) -> Triton's {"count", "ns"}."""
        return _duration(self.sum(f"{name}_count", **labels), self.sum(f"{name}_sum", **labels))

    def versions(self, model: str) -> set[str]:
        return {lab["version"] for name in (f"{VERSION_CALLS}_count", f"{EXECUTIONS}_count")
                for lab, _ in self.matching(name, model=model) if "version" in lab}


def _duration(count: float, seconds: float) -> dict[str, int]:
    return {"count": max(0, round(count)), "ns": max(0, round(seconds * 1e9))}


def _zero() -> dict[str, int]:
    return {"count": 0, "ns": 0}


def _ms(timestamp_s: float) -> int:
    return max(0, round(timestamp_s * 1000))


def pipeline_stats(samples: Samples, name: str, version: str, deployment: str) -> dict[str, Any]:
    """Triton's statistics of a pipeline model (the deployment `deployment`, served as `name`, its one version)."""
    success = samples.duration(STAGE, deployment=deployment, stage="total")
    stages = {k: samples.duration(STAGE, deployment=deployment, stage=v) for k, v in PIPELINE_STAGE.items()}
    batch = [{"batch_size": 1, **{k: stages[k] for k in ("compute_input", "compute_infer", "compute_output")}}]
    return {
        "name": name,
        "version": version,
        "last_inference": _ms(samples.max(DEPLOYMENT_LAST, deployment=deployment)),
        "inference_count": success["count"],
        "execution_count": success["count"],
        "inference_stats": {"success": success, "fail": samples.duration(DEPLOYMENT_FAILED, deployment=deployment),
                            **stages, "cache_hit": _zero(), "cache_miss": _zero()},
        "batch_stats": batch if success["count"] else [],
    }


def tensor_stats(samples: Samples, name: str, version: str) -> dict[str, Any]:
    """Triton's statistics of one version of a tensor model (the registry model `name`, every slot serving it)."""
    success = samples.duration(VERSION_CALLS, model=name, version=version, stat="success")
    compute = samples.duration(VERSION_CALLS, model=name, version=version, stat="compute")
    folded = {"count": success["count"], "ns": 0}  # inside the runner's compute time
    queue = {"count": success["count"], "ns": max(0, success["ns"] - compute["ns"])}
    sizes: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])  # batch size -> [executions, seconds]
    for suffix, index in (("_count", 0), ("_sum", 1)):
        for lab, value in samples.matching(f"{EXECUTIONS}{suffix}", model=name, version=version):
            if lab.get("size", "").isdigit():
                sizes[int(lab["size"])][index] += value
    executions = {size: _duration(c, s) for size, (c, s) in sorted(sizes.items()) if c > 0}
    batch_stats = [{"batch_size": size, "compute_input": {"count": d["count"], "ns": 0}, "compute_infer": d,
                    "compute_output": {"count": d["count"], "ns": 0}} for size, d in executions.items()]
    return {
        "name": name,
        "version": version,
        "last_inference": _ms(samples.max(VERSION_LAST, model=name, version=version)),
        "inference_count": max(0, round(samples.sum(VERSION_ITEMS, model=name, version=version))),
        "execution_count": sum(d["count"] for d in executions.values()),
        "inference_stats": {"success": success,
                            "fail": samples.duration(VERSION_CALLS, model=name, version=version, stat="fail"),
                            "queue": queue, "compute_input": folded, "compute_infer": compute,
                            "compute_output": dict(folded), "cache_hit": _zero(), "cache_miss": _zero()},
        "batch_stats": batch_stats,
    }


def tensor_versions(samples: Samples, name: str, served: Iterable[str]) -> list[str]:
    """The versions a tensor model reports: those served now and any other with statistics, in order."""
    return sorted(set(served) | samples.versions(name))
