from triserve.configs.settings import Breaker
from triserve.kernel.protection.breaker import CircuitBreaker


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def make(**kw):
    clock = Clock()
    cfg = Breaker(**{"window": 4, "min_calls": 4, "failure_rate": 0.5, "open_seconds": 10, "half_open_probes": 2, **kw})
    return CircuitBreaker("text", cfg, clock=clock), clock


def test_opens_on_failure_rate_only_after_min_calls():
    b, _ = make()
    for ok in (False, False, True):
        assert b.allow()
        b.record(ok)
    assert b.state == "closed"  # 3 calls < min_calls
    b.allow()
    b.record(False)
    assert b.state == "open" and not b.allow()


def test_half_open_probes_close_on_success_and_reopen_on_failure():
    b, clock = make()
    for _ in range(4):
        b.allow()
        b.record(False)
    assert b.state == "open"
    clock.t = 10.5
    assert b.allow() and b.state == "half_open"
    assert b.allow()
    assert not b.allow()  # only half_open_probes in flight
    b.record(True)
    b.record(True)
    assert b.state == "closed"
    for _ in range(4):
        b.allow()
        b.record(False)
    clock.t = 21
    assert b.allow()
    b.record(False)
    assert b.state == "open" and not b.allow()


def test_release_frees_a_probe_without_judging():
    b, clock = make()
    for _ in range(4):
        b.allow()
        b.record(False)
    clock.t = 11
    assert b.allow() and b.allow() and not b.allow()
    b.release()
    assert b.allow() and b.state == "half_open"


def _opened():
    b, clock = make()
    for _ in range(4):
        b.allow()
        b.record(False)
    assert b.state == "open" and not b.allow()
    return b, clock


def test_a_restarted_runner_is_probed_at_once():
    b, clock = _opened()
    clock.t = 1.0  # long before open_seconds
    b.reprobe()
    assert b.state == "half_open" and b.allow() and b.allow() and not b.allow()
    b.record(True)
    b.record(True)
    assert b.state == "closed"


def test_reprobe_leaves_closed_and_half_open_breakers_alone():
    b, _ = make()
    b.reprobe()
    assert b.state == "closed"
    b, clock = _opened()
    clock.t = 10.5
    assert b.allow() and b.state == "half_open"  # one probe in flight
    b.reprobe()
    assert b.state == "half_open" and b.allow() and not b.allow()  # its probe count kept


def test_protection_reprobes_only_when_the_runner_process_changes():
    from triserve.configs.settings import Settings
    from triserve.kernel.routing.inference import Protection

    prot = Protection(Settings(), slot_batch=lambda slot: 8)
    prot.runner_seen("100@1.0")  # the first runner seen: nothing to reprobe
    b = prot.breaker("text")
    for _ in range(20):
        b.allow()
        b.record(False)
    assert b.state == "open"
    prot.runner_seen("100@1.0")
    prot.runner_seen(None)  # a routing answer without a boot (an older runner) changes nothing
    assert b.state == "open"
    prot.runner_seen("200@9.0")  # the runner was restarted
    assert b.state == "half_open"


def test_runner_workers_answering_in_turn_are_not_restarts():
    from triserve.configs.settings import Settings
    from triserve.kernel.routing.inference import Protection

    prot = Protection(Settings(), slot_batch=lambda slot: 8)
    prot.runner_seen("100@1.0")
    prot.runner_seen("101@1.0")  # the second runner worker, first seen: counts as new once
    b = prot.breaker("text")
    for _ in range(20):
        b.allow()
        b.record(False)
    for boot in ("100@1.0", "101@1.0", "100@1.0"):  # the routing table refreshed from either worker
        prot.runner_seen(boot)
    assert b.state == "open"
    prot.runner_seen("102@5.0")  # one of them restarted
    assert b.state == "half_open"
