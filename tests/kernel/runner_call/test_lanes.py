"""kernel/runner_call/lanes: the lane rule the runner and admission share (least cost per item against the limit)."""
from __future__ import annotations

import pytest

from triserve.kernel.runner_call.lanes import lane_of, least_per_item


def test_the_least_cost_per_item_is_kept_and_a_slowed_computation_does_not_raise_it():
    least = least_per_item(0.0, 0.03, 8)  # first computation: 3.75 ms per item
    assert least == pytest.approx(0.00375)
    assert least_per_item(least, 0.06, 2) == pytest.approx(0.00375)  # 30 ms per item under contention: kept
    assert least_per_item(least, 0.002, 1) == pytest.approx(0.002)
    assert least_per_item(0.0, 0.5, 0) == pytest.approx(0.5)  # an empty count counts as one item


def test_short_or_unmeasured_slots_take_lane_0_and_one_lane_is_always_0():
    assert lane_of(0.0, 2, 0.01) == 0  # not measured yet
    assert lane_of(0.01, 2, 0.01) == 0  # at the limit: short
    assert lane_of(0.09, 2, 0.01) == 1
    assert lane_of(0.09, 1, 0.01) == 0
