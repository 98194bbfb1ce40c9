"""Typed serving configuration.

Loaded from configs/serving.yaml (or the file named by TRISERVE_CONFIG), then overridden by environment variables with
the TRISERVE_ prefix and '__' between levels, e.g. TRISERVE_LIMITS__TEXT__MAX_TEXTS=32 or
TRISERVE_REGISTRY_DIR=/models. Every field says what it does; invalid combinations fail at startup, not at request time.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

import triserve.configs.families  # the registry: family modules load by name, on first use
from triserve.configs.access import AccessSettings, TlsSettings
from triserve.configs.section import Section as _Section

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
"""Where the product's packages and their data files (configs/serving.yaml, configs/models.yaml) are: the checkout, a
Bento's src/ or, for an installed wheel, site-packages/triserve. Read-only as far as the server is concerned."""
DEFAULT_CONFIG = PACKAGE_ROOT / "configs" / "serving.yaml"


def installed_as_wheel() -> bool:
    """True when the packages run from an installed wheel (site-packages/triserve), not a checkout or a Bento."""
    return PACKAGE_ROOT.parent.name in ("site-packages", "dist-packages")


def state_root() -> Path:
    """Where writable state goes by default (the local registry, the model cache, the deployments state file, sampled
    payloads): TRISERVE_HOME when set; else the checkout (or Bento) itself, as `make serve` always did; else, for an
    installed wheel, ~/.triserve, never site-packages."""
    home = os.environ.get("TRISERVE_HOME")
    if home:
        return Path(home).expanduser().resolve()
    return Path.home() / ".triserve" if installed_as_wheel() else PACKAGE_ROOT


def registry_root() -> Path:
    """The default local registry: <checkout>/models/store, or <TRISERVE_HOME or ~/.triserve>/models."""
    root = state_root()
    return root / "models" / "store" if root == PACKAGE_ROOT else root / "models"




class Batching(_Section):
    """Adaptive batching of one model's runner API."""

    max_batch_size: int = Field(32, ge=1, le=1024, description="Most items merged into one ONNX Runtime call.")
    max_latency_ms: int = Field(
        20_000, ge=10, le=60_000,
        description="runner.batching=runner only: BentoML's dispatcher sheds a queued call (503 'process is "
                    "overloaded') once its estimated "
                    "latency passes this; it is a last-resort shedding threshold, not a batching window (the "
                    "window adapts to traffic). Keep it far above normal queueing so a closed-loop burst is never "
                    "shed; deadline-aware admission belongs in the gateway.")
    compute_batch: int | None = Field(
        None, ge=1, le=1024,
        description="Most items one ONNX Runtime call runs: a batch that arrives (up to max_batch_size, what "
                    "amortises the hop from the gateway) is computed in chunks of this size, and warm-up and the "
                    "memory reservation stop at it, so the runner's arenas hold one chunk's working set. Unset: "
                    "max_batch_size. Set it where batches do not pay per item: a convolution net on CPU runs "
                    "memory-bound at large batches (YOLOv8n at 640 on one core: ~95 ms per image at batch 1, "
                    "108-113 at 16; docs/performance.md); keep it unset on a GPU.")
    per_item: bool = Field(
        False,
        description="Run the items of a formed batch one by one. For models whose numerics depend on batch "
                    "composition (dynamic INT8 picks activation scales per call), so a result never depends on "
                    "which other requests shared the batch.")


class ModelSlot(_Section):
    """Which registry model serves a slot (a deployment's primary or fallback), and how it batches."""

    name: str = Field(description="Model name in the registry.")
    ref: str = Field("stable", description="Alias or version to load.")
    batching: Batching = Field(default_factory=Batching)








class SlotOverride(_Section):
    """Environment-level changes to one configured slot (Settings.slots)."""

    ref: str | None = Field(None, description="Alias or version to serve instead of the configured one.")
    batching: dict[str, Any] = Field(default_factory=dict, description="Batching fields to replace.")


class FaultInjection(_Section):
    """Drills only (all off by default): make a slot slow, failing, produce NaN, or lose its accelerator."""

    latency_ms: dict[str, int] = Field(default_factory=dict, description="Slot -> extra compute latency per batch.")
    error_rate: dict[str, float] = Field(default_factory=dict, description="Slot -> share of batches that raise.")
    nan_output: list[str] = Field(default_factory=list, description="Slots whose outputs are replaced by NaN.")
    provider_fault: Literal["none", "load", "run"] = Field(
        "none", description="Simulate the accelerator provider failing at session creation ('load') or on the first "
                            "run ('run'); the pool must continue on CPU.")


class RunnerMemory(_Section):
    """The runner's memory budget (runners/memory.py): every model reserves its measured resident size plus its
    per-item working memory times its batch cap; what does not fit is refused at load."""

    budget_mb: float | None = Field(None, gt=0, description="Budget of the runner process in MB; default: "
                                                            "`fraction` x (memory available at start + held).")
    fraction: float = Field(0.8, gt=0, le=1, description="Share of the machine's memory the derived budget takes.")


class RunnerSettings(_Section):
    providers: list[str] = Field(
        default_factory=lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"],
        description="ONNX Runtime providers in preference order; unavailable ones are skipped (and logged).")
    intra_op_threads: int = Field(0, ge=0, description="Threads inside one op (0 = ONNX Runtime default).")
    inter_op_threads: int = Field(1, ge=0, description="Threads across independent ops.")
    bucket_call_cost_tokens: float = Field(
        12.0, ge=0, description="Ragged (text) batches run as one call per length group; a call's fixed cost in "
                                "padded tokens decides the split (runners/ragged.length_buckets; 0 = one call per "
                                "distinct length; large = one padded call).")
    spin_wait: bool = Field(
        False, description="ONNX Runtime intra-op threads spin briefly after each op instead of sleeping. On for a "
                           "runner with one model on dedicated cores: ~10% more text throughput alone "
                           "(docs/bench/tuning.md). Off by default: with compute_lanes=2 two computations share the "
                           "cores, and their spinning threads took each other's CPU (image p99 in a mixed soak "
                           "0.6-1.4 s with spinning, 0.25-0.7 s without; docs/bench/runner_order.md), and it takes "
                           "CPU from API workers that share the cores.")
    warmup_runs: int = Field(
        1, ge=0, le=100, description="Runs per representative shape before ready. One: on CPU a shape's first run "
                                     "costs what its later runs do (docs/performance.md, 'Restart'), so a second run "
                                     "only delayed readiness; on an accelerator the first run picks the kernels, and "
                                     "the first request is then the second run.")
    workers: int = Field(1, ge=1, le=16, description="Runner worker processes.")
    batching: Literal["gateway", "runner"] = Field(
        "gateway",
        description="Where concurrent requests are merged. 'gateway': each API worker coalesces the requests that "
                    "arrive while its previous call for a slot is in flight into one runner call (no batching window, "
                    "one HTTP hop per batch; kernel/runner_call/batcher.py). 'runner': one call per request, merged by "
                    "BentoML's adaptive dispatcher in the runner (learns a wait from recent batches). Measured in "
                    "docs/bench/tuning.md.")
    placement: Literal["remote", "local"] = Field(
        "remote",
        description="'remote': the runner tier is its own BentoML service (own processes, GPU, scaling; the "
                    "gateway calls it over HTTP). 'local': each API worker runs the runner's code in process "
                    "(runners/local.py): no hop, for single-node CPU serving; every API worker loads every model. "
                    "Needs batching='gateway'. Measured in docs/performance.md.")
    fallbacks: Literal["runner", "gateway"] = Field(
        "runner",
        description="Where the deployments' fallback models run. 'runner': in the runner tier with the primaries. "
                    "'gateway': in each API worker (in process, like placement='local' but for fallbacks only), "
                    "so a fallback keeps answering when the runner process dies or restarts: another failure "
                    "domain. Costs the fallbacks' memory per API worker (they are the small models). Needs "
                    "placement='remote'.")
    primary_attempt_ms: float = Field(
        500.0, gt=0, le=60_000,
        description="fallbacks='gateway' only: an 'auto' request's primary call that has not answered within "
                    "max(this, 3 x the admission's estimated wait) is abandoned for the fallback. A killed runner's "
                    "socket accepts connections and never answers until its restart, so without this the requests "
                    "in flight wait for the restart instead of the fallback.")
    merge_gather_ms: float = Field(
        20.0, ge=0, le=200,
        description="runner.batching=gateway: how long an idle runner may wait for the other callers' calls of a slot "
                    "before computing (runners/merge.py). Only when several callers (API workers, gateway instances) "
                    "sent calls of the slot in the last second and the slot is busy; at most half the slot's recent "
                    "computation time, never past an item's deadline; one caller or a quiet slot never waits. "
                    "0: never gather.")
    compute_lanes: int = Field(
        2, ge=1, le=2,
        description="runner.batching=gateway: computations that may run at once in a runner worker "
                    "(runners/merge.py). 2: slots whose items cost at most short_item_ms compute in a lane of their "
                    "own, so a text call never waits for an image batch to finish (docs/bench/runner_order.md). "
                    "1: one computation at a time.")
    short_item_ms: float = Field(
        10.0, gt=0, le=1000,
        description="compute_lanes=2: a slot whose computations cost at most this per item (measured) computes in "
                    "the short lane.")
    timeout_s: float = Field(60, gt=0, description="Runner request timeout.")
    fast_path: bool = Field(
        True, description="Model calls from the gateway to a runner of the same `bentoml serve` (BentoML reaches it "
                          "over a UNIX socket) go over the runner's own socket, past BentoML's service stack (its "
                          "per-call CPU: docs/performance.md; runners/fast_path.py). Needs workers=1 and "
                          "batching='gateway'; a runner tier over TCP (split tiers, another node) always uses "
                          "BentoML's path.")
    respawn_check_s: float = Field(
        1.0, gt=0, le=10, description="How often the server's arbiter looks for dead workers to start again "
                                      "(services/arbiter.py). BentoML's default is 10 s: a SIGKILLed runner waited "
                                      "0-10 s before its restart even began (docs/performance.md, 'Restart').")
    startup_delay_s: float = Field(0.0, ge=0, le=600, description="Fault drill: sleep before loading models "
                                                                 "(simulates a slow model pull/load).")
    faults: FaultInjection = Field(default_factory=FaultInjection)
    memory: RunnerMemory = Field(default_factory=RunnerMemory)

    @model_validator(mode="after")
    def _local_needs_gateway_batching(self) -> RunnerSettings:
        if self.placement == "local" and self.batching != "gateway":
            raise ValueError("runner.placement='local' has no BentoML dispatcher to batch in: use "
                             "runner.batching='gateway'")
        if self.fallbacks == "gateway" and self.placement != "remote":
            raise ValueError("runner.fallbacks='gateway' separates the fallbacks from a remote runner tier: with "
                             "runner.placement='local' every model already runs in the API worker")
        return self


class GatewaySettings(_Section):
    workers: int = Field(1, ge=1, le=64, description="API worker processes.")
    max_body_bytes: int = Field(64 * 2**20, ge=1024, description="Request bodies above this get 413.")
    batch_inflight: int = Field(
        1, ge=1, le=64, description="runner.batching=gateway: runner calls per slot this API worker keeps in flight; "
                                    "new requests queue (and batch) behind them. 1 measured best on CPU (bigger "
                                    "batches; docs/bench/tuning.md); more overlaps transfers with compute, for "
                                    "accelerators with idle time between calls. With several API workers or gateway "
                                    "instances in front of one runner, 2 keeps a call waiting at the runner, which "
                                    "merges the waiting calls (runners/merge.py): with the runner on its own core 4 "
                                    "workers then matched 1 worker's throughput within noise "
                                    "(docs/bench/scaleout_batching_pinned_inflight2.md).")
    coalesce_wait_ms: float = Field(
        2.0, ge=0, le=100, description="runner.batching=gateway: how long a batch for an idle slot may wait for "
                                       "requests of its deployment that this API worker has already admitted and is "
                                       "still parsing or preprocessing (0: never wait). Nobody is on the way at "
                                       "concurrency 1, so a lone request still leaves at once.")
    runner_retries: int = Field(3, ge=0, le=10, description="Retries of an idempotent runner call on a transport "
                                                            "error (connection reset, closed connector).")
    runner_retry_backoff_ms: int = Field(20, ge=0, le=5000, description="Base backoff, doubled per retry.")
    timeout_s: float = Field(60, gt=0, description="Request timeout enforced by BentoML.")
    console: bool = Field(True, description="Serve the web console at /console (services/console): the repository "
                                            "with live health, try-it pages, rollouts with an admin key. It calls "
                                            "the same API with the keys typed into it; off: /console answers 404.")


class Deadlines(_Section):
    """Per-request time budgets (header X-Request-Timeout-Ms; gRPC deadlines map here too)."""

    default_ms: int = Field(10_000, ge=10, description="Budget when the client sends none.")
    max_ms: int = Field(60_000, ge=10, description="Largest budget a client may ask for (larger is clamped).")


class Admission(_Section):
    """Bounded queues and overload routing, per model slot and API worker."""

    max_inflight_requests: int = Field(
        128, ge=1, description="Inference requests one API worker handles at once; beyond it a request is refused 503 "
                               "before its body is even read (the cheapest possible rejection under overload).")

    max_inflight_items: int = Field(512, ge=1, description="Items queued or computing per slot; beyond: reject "
                                                           "(fallback for 'auto' requests, else 503).")
    overload_queue_items: int = Field(256, ge=1, description="Primary queue depth above which a share of 'auto' "
                                                              "traffic is routed to the fallback.")
    overload_fallback_share: float = Field(0.5, ge=0, le=1, description="That share (0 disables routing).")
    queue_control: bool = Field(
        True, description="Standing-queue control (kernel/protection/queue_control.py; runner.batching=gateway): when "
                          "a slot's gateway batcher queue has held more than queue_calls rounds of runner calls for "
                          "queue_interval_ms (a standing queue: the load exceeds what the runner carries), a request "
                          "that would not leave within queue_calls rounds is refused at once (503 overloaded, "
                          "details.reason standing_queue, Retry-After; 'auto' requests try the fallback), so accepted "
                          "requests keep the latency of a service at capacity instead of queueing up to the deadline. "
                          "It also checks deadlines against the measured wall-clock call times (a request that would "
                          "be answered after its deadline: 503 deadline_unattainable now, not 504 later). Unloaded and "
                          "at capacity it does not act (docs/drills/overload.json).")
    queue_interval_ms: float = Field(
        100.0, ge=0, le=60_000,
        description="How long a standing queue must last before control starts (a shorter burst is queued as "
                    "before; 0: no burst allowance), and how long control stays on after its last refusal (CoDel's "
                    "interval).")
    queue_calls: float = Field(
        1.0, gt=0, le=64,
        description="While control is on, the most a request may wait for, in rounds of runner calls (one round = "
                    "the slot's max batch size x gateway.batch_inflight items): 1 = it must leave with the next call, "
                    "so an accepted request waits for at most the call in flight plus its own. Below 1 caps batches "
                    "under overload (lower latency, less throughput); above 1 queues more.")
    queue_front_door: bool = Field(
        True, description="While every gateway-batched slot of a task (a family: its deployments' primaries and "
                          "fallbacks) is full under queue control, refuse that task's requests before their body is "
                          "read (kernel/protection/queue_control.shedding, asked by the request middleware): a refusal "
                          "after parsing and preprocessing costs an API worker about as much CPU as an answer, which "
                          "at 3x capacity starves the answers.")


class Breaker(_Section):
    """Circuit breaker around each primary model."""

    window: int = Field(20, ge=2, description="Most recent calls considered.")
    min_calls: int = Field(10, ge=1, description="Calls needed in the window before the breaker may open.")
    failure_rate: float = Field(0.5, gt=0, le=1, description="Failure share (errors, timeouts, bad outputs) that "
                                                             "opens the breaker.")
    open_seconds: float = Field(10.0, gt=0, description="Time open before half-open probes.")
    half_open_probes: int = Field(3, ge=1, description="Successful probes needed to close again.")


class Rollout(_Section):
    """Hot swap, canary and shadow behaviour on the gateway side."""

    refresh_s: float = Field(1.0, gt=0, le=60, description="How often API workers refresh the runner's routing "
                                                           "table (versions, canary, shadow).")
    retire_after_s: float = Field(10.0, ge=0, description="A swapped-out version stays loaded this long so "
                                                          "in-flight and pinned requests finish on it.")
    canary_header: str = Field("x-canary-key", description="Request header whose value keeps a user on one side of "
                                                            "a canary split (else the API key, else the client address "
                                                            "forwarded by a trusted proxy, else a per-request draw).")
    canary_window: int = Field(100, ge=5, description="Recent canary (and stable) calls judged.")
    canary_min_calls: int = Field(20, ge=1, description="Calls before a canary can be judged.")
    canary_max_error_rate: float = Field(0.1, ge=0, le=1, description="Canary error share that withdraws it.")
    canary_max_latency_ratio: float = Field(3.0, gt=1, description="Canary median latency over stable median "
                                                                    "that withdraws it.")
    shadow_max_inflight: int = Field(8, ge=1, description="Concurrent shadow calls per API worker; more are dropped.")


class Observability(_Section):
    """Request logs, payload sampling, drift windows."""

    request_log: bool = Field(True, description="One JSON line per request on the 'triserve.requests' logger.")
    bentoml_access_log: bool = Field(False, description="BentoML's own access line per request (and per runner "
                                                        "call): it repeats the request log in another format and "
                                                        "costs CPU on every request (docs/performance.md).")
    trace_sample_rate: float = Field(
        0.0, ge=0, le=1, description="Share of requests traced with OpenTelemetry (observability/tracing.py). 0 "
                                     "turns BentoML's per-request tracing middleware into a pass-through (it costs "
                                     "~25% of an API worker's CPU per request even when nothing is sampled).")
    otlp_endpoint: str | None = Field(None, description="OTLP/HTTP traces endpoint the spans go to, e.g. "
                                                        "http://127.0.0.1:4318/v1/traces (required when "
                                                        "trace_sample_rate > 0).")
    drift_window: int = Field(2000, ge=10, description="Recent values per (model, signal) compared with the "
                                                       "manifest reference.")
    drift_every: int = Field(50, ge=1, description="Recompute PSI after this many new values.")
    drift_min_values: int = Field(100, ge=1, description="No PSI before the window holds this many values.")
    payload_sample_rate: float = Field(0.0, ge=0, le=1, description="Share of successful requests whose body is "
                                                                    "written to JSONL (replay, calibration data).")
    payload_dir: Path = Field(default_factory=lambda: state_root() / ".cache" / "payloads",
                              description="Where sampled payloads go.")
    payload_max_bytes: int = Field(256 * 1024, ge=256, description="Larger bodies are skipped (counted).")
    payload_file_bytes: int = Field(64 * 2**20, ge=4096, description="Rotate the JSONL file at this size.")
    payload_files: int = Field(5, ge=1, le=100, description="Rotated files kept.")
    heap_snapshot_dir: Path | None = Field(None, description="Leak hunts only: trace allocations after startup and "
                                                             "write a tracemalloc snapshot here on SIGUSR2 "
                                                             "(scripts/bench/heap_diff). Slows every process.")

    @model_validator(mode="after")
    def _traces_need_a_destination(self) -> Observability:
        if self.trace_sample_rate > 0 and not self.otlp_endpoint:
            raise ValueError("observability.trace_sample_rate > 0 needs observability.otlp_endpoint (where spans go)")
        return self


class MemorySettings(_Section):
    """Resident memory of long-running workers (observability/memory.py; measured in docs/performance.md)."""

    malloc_arena_max: int = Field(2, ge=0, le=64, description="glibc malloc arenas per process (0 = glibc's default "
                                                              "of 8 per core): every thread that allocates can "
                                                              "otherwise get an arena of its own that keeps what it "
                                                              "freed.")
    trim_interval_s: float = Field(60.0, ge=0, description="Hand freed heap pages back to the OS (malloc_trim) this "
                                                           "often, from a background thread; 0 = never.")


class GrpcSettings(_Section):
    """gRPC endpoint served by one API worker (another takes it over when it dies): typed task APIs, Open Inference
    Protocol v2, health, reflection."""

    enabled: bool = Field(True, description="Start the gRPC server with the gateway.")
    host: str = Field("127.0.0.1", description="Bind address ('0.0.0.0' or '::' for every interface).")
    port: int = Field(3001, ge=1, le=65535, description="gRPC port (`triserve serve --grpc-port`), owned by the first "
                                                        "API worker: a port already in use stops the start with an "
                                                        "error naming it, so each instance on a host needs its own.")
    max_message_bytes: int = Field(64 * 2**20, ge=1024, description="Largest request or response message (the "
                                                                     "counterpart of gateway.max_body_bytes).")
    reflection: bool = Field(True, description="Serve gRPC server reflection (service and message discovery).")
    health_interval_s: float = Field(1.0, gt=0, le=60, description="How often grpc.health.v1 is refreshed from the "
                                                                   "gateway's readiness (the /readyz check).")
    shutdown_grace_s: float = Field(5.0, ge=0, le=120, description="Time in-flight RPCs get to finish on shutdown.")
    standby_poll_s: float = Field(0.2, gt=0, le=10, description="How often an API worker that does not serve gRPC "
                                                                "tries to take it over (the serving worker has died: "
                                                                "services/protocols/grpc_server.py).")


class Settings(BaseSettings):
    """The whole serving configuration."""

    model_config = SettingsConfigDict(env_prefix="TRISERVE_", env_nested_delimiter="__", extra="forbid")

    registry_dir: Path = Field(default_factory=registry_root,
                               description="Local registry root (default: <checkout>/models/store; for an installed "
                                           "wheel <TRISERVE_HOME or ~/.triserve>/models).")
    registry_uri: str | None = Field(
        None, description="Registry store to pull the configured models from at startup (oci://host:port/prefix, "
                          "s3://bucket/prefix, http(s)://host/prefix, file:///path); they are verified into "
                          "model_cache_dir and served from there. None: serve registry_dir directly.")
    model_cache_dir: Path = Field(default_factory=lambda: state_root() / ".cache" / "models",
                                  description="Verified local cache of pulled models (local registry layout); "
                                              "used offline when registry_uri is unreachable.")
    verified_stamps: bool = Field(
        True, description="Skip re-hashing a model file hashed at an earlier start and unchanged since (same size, "
                          "mtime, ctime, inode: any write changes them, so a corrupted file is still hashed and "
                          "refused); stamps live in <model_cache_dir>/.verified. False: sha256 of every file at "
                          "every load (models/stamps.py).")
    registry_retries: int = Field(4, ge=0, le=20, description="Extra attempts when registry_uri is unreachable.")
    registry_backoff_s: float = Field(0.5, ge=0, le=60, description="First retry delay, doubled per attempt.")
    registry_startup_wait_s: float = Field(
        2.0, ge=0, le=600, description="At startup, how long registry_uri gets to answer before a model whose verified "
                                       "copy is in model_cache_dir is served from it (refreshed in the background): "
                                       "a restart does not wait on a slow or unreachable registry for what it holds.")
    host: str = Field("127.0.0.1", description="Bind address used by `make serve`.")
    port: int = Field(3000, ge=1, le=65535)
    runner: RunnerSettings = Field(default_factory=RunnerSettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    deployments_state_file: Path = Field(
        default_factory=lambda: state_root() / ".cache" / "deployments.json",
        description="Where deployments added, changed or removed at run time are persisted (the whole repository); "
                    "when it exists it is served instead of configs/models.yaml (TRISERVE_MODELS_FILE). Delete it "
                    "to go back to the file.")
    slots: dict[str, SlotOverride] = Field(
        default_factory=dict,
        description="Overrides per slot ('<deployment>' or '<deployment>_fallback') on top of configs/models.yaml, "
                    "e.g. TRISERVE_SLOTS__INTENT__REF=canary or TRISERVE_SLOTS__INTENT__BATCHING__MAX_BATCH_SIZE=8: "
                    "how a deploy config, a canary or a benchmark changes a model without its own models file.")
    limits: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Request limits per model family (families/<family>/limits.py documents "
                                          "them), e.g. {text: {max_texts: 32}}; deployments may override them.")
    grpc: GrpcSettings = Field(default_factory=GrpcSettings)
    tls: TlsSettings = Field(default_factory=TlsSettings)
    deadlines: Deadlines = Field(default_factory=Deadlines)
    admission: Admission = Field(default_factory=Admission)
    breaker: Breaker = Field(default_factory=Breaker)
    access: AccessSettings = Field(default_factory=AccessSettings)
    observability: Observability = Field(default_factory=Observability)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    rollout: Rollout = Field(default_factory=Rollout)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @model_validator(mode="after")
    def _known_family_limits(self) -> Settings:
        for name, values in self.limits.items():
            # unknown family or field: fails at startup
            triserve.configs.families.limits_model(name).model_validate(values)
        return self

    def family_limits(self, family: str, overrides: dict[str, Any] | None = None):
        """The typed limits of a family, with a deployment's overrides applied."""
        merged = {**self.limits.get(family, {}), **(overrides or {})}
        return triserve.configs.families.limits_model(family).model_validate(merged)

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _YamlSource(settings_cls))


class _YamlSource(PydanticBaseSettingsSource):
    """Lowest-priority source: the YAML file."""

    def get_field_value(self, field, field_name):  # pragma: no cover - unused, __call__ does the work
        return None, field_name, False

    def __call__(self) -> dict:
        path = Path(os.environ.get("TRISERVE_CONFIG", DEFAULT_CONFIG))
        return yaml.safe_load(path.read_text()) or {} if path.is_file() else {}


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
