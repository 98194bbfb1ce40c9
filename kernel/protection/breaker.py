"""Circuit breaker around a primary model: closed -> open on a high failure rate -> half-open probes -> closed.

While open, 'auto' requests go straight to the fallback (no time wasted on a sick primary); after `open_seconds` a
few probes are let through, and enough successes close it again, one failure reopens it.
"""
from __future__ import annotations

import time
from collections import deque

from triserve.configs.settings import Breaker
from triserve.observability.metrics import BREAKER_STATE, BREAKER_TRANSITIONS

_CODES = {"closed": 0, "half_open": 1, "open": 2}


class CircuitBreaker:
    def __init__(self, slot: str, cfg: Breaker, clock=time.monotonic):
        self.slot, self.cfg, self.clock = slot, cfg, clock
        self.state = "closed"
        self.calls: deque[bool] = deque(maxlen=cfg.window)
        self.opened_at = 0.0
        self.probe_successes = 0
        self.probes_in_flight = 0
        BREAKER_STATE.labels(slot).set(0)

    def _move(self, state: str) -> None:
        self.state = state
        BREAKER_STATE.labels(self.slot).set(_CODES[state])
        BREAKER_TRANSITIONS.labels(self.slot, state).inc()

    def allow(self) -> bool:
        """May a request use the primary now?"""
        if self.state == "open":
            if self.clock() - self.opened_at < self.cfg.open_seconds:
                return False
            self._move("half_open")
            self.probe_successes = self.probes_in_flight = 0
        if self.state == "half_open":
            if self.probes_in_flight >= self.cfg.half_open_probes:
                return False
            self.probes_in_flight += 1
        return True

    def reprobe(self) -> None:
        """The runner behind the primary was restarted: an open breaker lets its probes through now instead of after
        open_seconds, since the failures that opened it were the old process's (a killed runner's primaries came
        back only when open_seconds had passed, after the new runner was ready)."""
        if self.state == "open":
            self._move("half_open")
            self.probe_successes = self.probes_in_flight = 0

    def retry_after_s(self) -> float:
        """Seconds until an open breaker lets a probe through (0 when it is not open)."""
        if self.state != "open":
            return 0.0
        return max(0.0, self.cfg.open_seconds - (self.clock() - self.opened_at))

    def release(self) -> None:
        """An allowed call that never reached the model (e.g. refused by admission): neither success nor failure."""
        if self.state == "half_open":
            self.probes_in_flight = max(0, self.probes_in_flight - 1)

    def record(self, success: bool) -> None:
        if self.state == "half_open":
            self.probes_in_flight = max(0, self.probes_in_flight - 1)
            if not success:
                self._open()
                return
            self.probe_successes += 1
            if self.probe_successes >= self.cfg.half_open_probes:
                self.calls.clear()
                self._move("closed")
            return
        if self.state == "open":
            return
        self.calls.append(success)
        failures = self.calls.count(False)
        if len(self.calls) >= self.cfg.min_calls and failures / len(self.calls) >= self.cfg.failure_rate:
            self._open()

    def _open(self) -> None:
        self.opened_at = self.clock()
        self.calls.clear()
        self._move("open")

    def describe(self) -> dict:
        return {"state": self.state, "recent_calls": len(self.calls), "recent_failures": self.calls.count(False)}
