"""Fault injection for drills and tests: slow, failing or NaN-producing slots, and a failing accelerator provider.

Off unless configured (configs/settings.py FaultInjection); lets the protection mechanisms be exercised through real
HTTP without a broken model or a GPU.
"""
from __future__ import annotations

import random
import time

from triserve.configs.settings import FaultInjection


class InjectedFault(RuntimeError):
    pass


def inject_faults(slot: str, faults: FaultInjection) -> None:
    """Called once per batch before compute."""
    delay = faults.latency_ms.get(slot, 0)
    if delay:
        time.sleep(delay / 1000.0)
    rate = faults.error_rate.get(slot, 0.0)
    if rate and random.random() < rate:
        raise InjectedFault(f"injected failure in {slot}")
