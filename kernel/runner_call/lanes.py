"""Which of the runner's compute lanes a slot computes in: one rule for the runner, which runs the lanes
(runners/merge.py), and for the gateway's admission, which counts the work ahead of a request in its lane
(kernel/protection/admission.py). Each tier measures the slot's cost itself; both decide the lane the same way.

By the least cost per item seen, not the mean: contention (the other lane computing) inflates a computation, and a
mean let a text slot (1.8-12 ms per item) swing between the lanes with it (docs/bench/runner_order.md).
"""
from __future__ import annotations


def least_per_item(least: float, seconds: float, items: int) -> float:
    """The least seconds per item after a computation of `items` items that took `seconds` (`least` 0: none yet)."""
    per_item = seconds / max(items, 1)
    return per_item if least == 0 else min(least, per_item)


def lane_of(least: float, lanes: int, short_item_s: float) -> int:
    """0: short items (or not measured yet), 1: long ones (one lane: always 0)."""
    return int(lanes > 1 and least > short_item_s)
