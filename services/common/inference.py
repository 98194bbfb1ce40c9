"""Primary-or-fallback execution of one task's runner call.

Why: every task has a cheaper degraded sibling with the same tensor contract; when the primary cannot answer the
request still gets an answer, flagged `degraded` with the reason, instead of an error.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from configs.settings import GatewaySettings
from services.common.errors import ApiError
from services.common.metrics import DEGRADED
from services.common.runner_client import call_runner
from services.common.request_context import StageClock


@dataclass
class RunnerResult:
    outputs: list[Any]  # one output row per item, in order
    model: str
    version: str
    infer_ms: float
    batch: int
    slot: str
    degraded: bool
    degraded_reason: str | None


async def run_task(runner: Any, task: str, payload_for: Any, choice: str, settings: GatewaySettings,
                   clock: StageClock) -> RunnerResult:
    """Call `task` (or `task_fallback`); payload_for(slot) builds the runner payload for that slot's model."""
    slots = [(f"{task}_fallback", "requested")] if choice == "fallback" else [(task, None)]
    if choice == "auto":
        slots.append((f"{task}_fallback", "primary_failed"))
    last_error: ApiError | None = None
    for slot, reason in slots:
        payload = payload_for(slot)
        clock.stage("preprocess")
        try:
            items = await call_runner(runner, slot, payload, settings.runner_retries,
                                      settings.runner_retry_backoff_ms)
        except ApiError as exc:
            last_error = exc
            continue
        finally:
            clock.stage("runner")
        first = items[0]
        if reason:
            DEGRADED.labels(task, reason).inc()
        return RunnerResult(outputs=[it["y"] for it in items], model=first["model"], version=first["version"],
                            infer_ms=max(it["infer_ms"] for it in items), batch=max(it["batch"] for it in items),
                            slot=slot, degraded=reason is not None, degraded_reason=reason)
    assert last_error is not None
    raise last_error
