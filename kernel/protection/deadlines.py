"""Per-request deadlines: a budget from X-Request-Timeout-Ms (or a gRPC deadline), clamped to config.

The deadline travels with the request into the runner queue (as epoch seconds, since the runner is another process);
the runner drops an item whose deadline passed before computing it, and the gateway stops waiting when it passes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from triserve.configs.settings import Deadlines
from triserve.kernel.errors import ApiError

HEADER = "x-request-timeout-ms"


@dataclass(frozen=True)
class Deadline:
    budget_ms: int
    mono: float  # time.monotonic() at expiry (for waiting here)
    epoch: float  # time.time() at expiry (for other processes)

    @classmethod
    def from_budget(cls, budget_ms: int, since: tuple[float, float] | None = None) -> Deadline:
        """`since`: (monotonic, epoch) of the request's arrival; default now."""
        mono, epoch = since or (time.monotonic(), time.time())
        return cls(budget_ms, mono + budget_ms / 1000, epoch + budget_ms / 1000)

    @classmethod
    def from_header(cls, value: str | None, cfg: Deadlines, since: tuple[float, float] | None = None) -> Deadline:
        if value is None or value == "":
            return cls.from_budget(cfg.default_ms, since)
        try:
            budget = int(value)
        except ValueError:
            raise ApiError(400, "invalid_timeout", "X-Request-Timeout-Ms must be an integer number of milliseconds",
                           {"received": value[:64]}) from None
        if budget <= 0:
            raise ApiError(400, "invalid_timeout", "X-Request-Timeout-Ms must be positive", {"received": budget})
        return cls.from_budget(min(budget, cfg.max_ms), since)

    def remaining(self) -> float:
        return self.mono - time.monotonic()

    def check(self, stage: str) -> None:
        if self.remaining() <= 0:
            raise ApiError(504, "deadline_exceeded", f"request deadline of {self.budget_ms} ms passed during {stage}",
                           {"budget_ms": self.budget_ms, "stage": stage})
