import pytest

from triserve.configs.settings import Admission, Deadlines
from triserve.kernel.errors import ApiError
from triserve.kernel.protection.admission import AdmissionControl
from triserve.kernel.protection.deadlines import Deadline


def test_full_queue_is_rejected_with_retry_after():
    ac = AdmissionControl(Admission(max_inflight_items=4))
    ac.started("text", 3)
    ac.admit("text", 1, Deadline.from_budget(1000))
    with pytest.raises(ApiError) as e:
        ac.admit("text", 2, Deadline.from_budget(1000))
    assert e.value.status == 503 and e.value.code == "overloaded" and "Retry-After" in e.value.headers
    ac.finished("text", 3)
    ac.admit("text", 2, Deadline.from_budget(1000))


def test_wait_estimate_against_the_deadline():
    ac = AdmissionControl(Admission(), {"text": 1}.__getitem__)
    ac.started("text", 10)
    ac.finished("text", 0, infer_ms=100.0, batch=1)  # 0.1 s per call of one item
    assert ac.estimated_wait("text", 1) == pytest.approx(1.1)
    ac.admit("text", 1, Deadline.from_budget(2000))
    with pytest.raises(ApiError) as e:
        ac.admit("text", 1, Deadline.from_budget(500))
    assert e.value.code == "deadline_unattainable"


def test_overload_threshold():
    ac = AdmissionControl(Admission(overload_queue_items=2))
    assert not ac.overloaded("text")
    ac.started("text", 2)
    assert ac.overloaded("text")


@pytest.mark.parametrize("header,budget", [(None, 10_000), ("250", 250), ("999999", 60_000)])
def test_deadline_from_header(header, budget):
    assert Deadline.from_header(header, Deadlines()).budget_ms == budget


@pytest.mark.parametrize("header", ["abc", "-5", "0"])
def test_bad_deadline_header_is_400(header):
    with pytest.raises(ApiError) as e:
        Deadline.from_header(header, Deadlines())
    assert e.value.status == 400 and e.value.code == "invalid_timeout"


def test_wait_model_separates_per_batch_and_per_item_cost():
    fixed = AdmissionControl(Admission(), {"slow": 16}.__getitem__)
    for size in (1, 4, 8, 2):
        fixed.finished("slow", 0, infer_ms=800.0, batch=size)  # a sleep per call, whatever the batch size
    fixed.started("slow", 7)
    assert fixed.estimated_wait("slow", 1) == pytest.approx(0.8, abs=1e-6)  # one batch, not 8 x 0.8 s
    linear = AdmissionControl(Admission(), {"cpu": 8}.__getitem__)
    for size in (1, 2, 4, 8):
        linear.finished("cpu", 0, infer_ms=2.0 + 10.0 * size, batch=size)
    linear.started("cpu", 15)
    assert linear.estimated_wait("cpu", 1) == pytest.approx(2 * 0.002 + 16 * 0.010, rel=1e-6)


def test_running_fit_matches_least_squares_after_the_window_slides():
    import numpy as np

    from triserve.kernel.protection.admission import SlotLoad

    rng = np.random.default_rng(0)
    load = SlotLoad()
    obs = [(int(b), 0.002 + 0.0005 * b + rng.normal(0, 1e-4)) for b in rng.integers(1, 33, 300)]
    for b, t in obs:
        load.observe(b, t)
    window = obs[-64:]
    c, a = np.polyfit([b for b, _ in window], [t for _, t in window], 1)
    assert abs(load.per_item - c) < 1e-9 and abs(load.per_batch - a) < 1e-9


def test_the_wait_counts_batches_of_the_slots_own_limit():
    """A slot seen once (40 items in 2.3 s, one call) predicts two calls for 40 more at a limit of 32, not 40."""
    ac = AdmissionControl(Admission(), {"reviews": 32}.__getitem__)
    ac.finished("reviews", 0, 2300.0, 40)
    assert ac.estimated_wait("reviews", 40) == pytest.approx(2 * 2.3)


def _runner_of_three(**kwargs) -> AdmissionControl:
    """Three slots measured at 1 item per call: det 0.5 s and seg 2 s per item (long lane), text 5 ms (short)."""
    ac = AdmissionControl(Admission(), {"det": 1, "seg": 1, "text": 1}.__getitem__, lanes=2, short_item_s=0.01,
                          **kwargs)
    for slot, seconds in (("det", 0.5), ("seg", 2.0), ("text", 0.005)):
        ac.finished(slot, 0, infer_ms=seconds * 1000, batch=1)
    return ac


def test_the_other_slots_of_a_runner_lane_count_in_a_requests_wait():
    ac = _runner_of_three()
    assert (ac.lane("det"), ac.lane("seg"), ac.lane("text")) == (1, 1, 0)
    ac.started("seg", 3)  # 6 s of segmentation admitted, computed in det's lane
    ac.started("text", 100)  # 0.5 s of text, in the other lane
    assert ac.lane_backlog("det", 1) == pytest.approx(6.5)  # its own 0.5 s behind seg's 6 s; text not counted
    assert ac.lane_backlog("text", 1) == pytest.approx(0.505)
    ac.admit("det", 1, Deadline.from_budget(7000))
    with pytest.raises(ApiError) as e:  # its own queue is empty, but its lane has 6 s of work ahead of it
        ac.admit("det", 1, Deadline.from_budget(5000))
    assert e.value.code == "deadline_unattainable" and e.value.details["estimated_wait_ms"] == 6500
    ac.admit("text", 1, Deadline.from_budget(1000))  # the short lane is not behind segmentation


def test_one_lane_counts_every_slot_and_a_slot_off_the_runner_counts_alone():
    one = AdmissionControl(Admission(), {"det": 1, "seg": 1}.__getitem__, lanes=1)
    for slot, seconds in (("det", 0.5), ("seg", 2.0)):
        one.finished(slot, 0, infer_ms=seconds * 1000, batch=1)
    one.started("seg", 3)
    assert one.lane_backlog("det", 1) == pytest.approx(6.5)
    local = _runner_of_three(shares_runner=lambda slot: slot != "det")  # det computed in this API worker
    local.started("seg", 3)
    local.started("det", 2)
    assert local.lane_backlog("det", 1) == pytest.approx(1.5)  # its own 2 + 1 items only
    assert local.lane_backlog("seg", 1) == pytest.approx(8.0)  # seg's own 3 + 1 items; det's work is not ahead
