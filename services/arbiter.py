"""A dead worker is started again within runner.respawn_check_s, not up to 10 s later.

Why: `bentoml serve` runs its workers under a circus arbiter created with check_delay=10 (BentoML's
create_standalone_arbiter), and circus looks for dead children only on that period (it handles no SIGCHLD). A
SIGKILLed runner therefore lay dead for 0-10 s, by the timer's phase, before its restart began: measured here as the
largest and most variable part of a runner's recovery (0.4 s in one run, 8.3 s in the next: every restart in the
benchmark began 11.2-11.8 s after the spawn, on the arbiter's tick, whenever the kill came). The Gateway's
on_deployment hook (in the arbiter, before the arbiter is made) calls `respawn_promptly`, which caps the check period
of every circus Arbiter made afterwards in this process (the arbiter's and its controller's, which runs the periodic
check). The check itself is cheap: a waitpid and a look at each watcher's processes.
"""
from __future__ import annotations

from typing import Any

_MARK = "__triserve_respawn_check_s__"


def respawn_promptly(check_s: float) -> None:
    """Arbiters made after this call check for dead workers at least every `check_s` seconds (idempotent; the last
    call's period counts)."""
    from circus.arbiter import Arbiter

    original = getattr(Arbiter.__init__, _MARK, None)
    init = Arbiter.__init__ if original is None else original[0]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.check_delay = min(float(self.check_delay), check_s)
        if getattr(self, "ctrl", None) is not None:  # made in __init__ with the old period (in ms), started later
            self.ctrl.check_delay = self.check_delay * 1000

    setattr(__init__, _MARK, (init, check_s))
    Arbiter.__init__ = __init__
