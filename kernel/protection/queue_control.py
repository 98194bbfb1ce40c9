"""Standing-queue control for the gateway batcher: under overload, admit only what the next runner call carries.

Why: a slot's batcher sends one call at a time (`gateway.batch_inflight`) and queues what arrives meanwhile. The part
of that queue the next call takes is a good queue: it waits at most for the call in flight and buys throughput
(bigger batches). Whatever the next call cannot take is a standing queue: the runner cannot go faster, so each extra
call's worth of waiting adds a full call time of latency to everyone behind it and no throughput. Without control the
queue grows until the item cap or the request deadline (docs/drills/overload.json, mode "off"). CoDel's insight
applies (a standing queue, not a long one, is the problem; let a burst shorter than an interval pass), and the batcher
knows exactly what CoDel has to infer from sojourn times: in a batch-while-busy queue the youngest request of a
departing call has waited ~0 unless the queue held more than the call could take, so "the sojourn stayed above target
for an interval" is "the queue held more than one round of calls for an interval".

The rule, per slot and API worker (no shared state; O(1) per request, a few attribute updates):
  - the batcher keeps `waiting` (items queued, not yet in a call) and reports each departure (`departed`: what it
    left behind) and each call's wall-clock time (`call_began` / `call_ended`);
  - a request that fits within `calls` rounds of calls (1: the next call; a round = max_batch_size x batch_inflight
    items) always joins, and so does any request to an empty queue (one larger than a batch goes alone); what waits
    counts across the slot's family (`ahead`): a deployment's primary and fallback share one runner, which serves one
    call at a time, so the overflow an 'auto' request spills to the fallback would otherwise double everyone's wait;
  - one that does not fit starts a standing queue; once the queue has stood for `interval_s` (no call has taken
    everything since), control is on and such requests are refused at once (503 overloaded, reason standing_queue,
    Retry-After) before they reach the runner; control stays on while it keeps refusing and ends `interval_s` after
    the last refusal;
  - admission also checks the deadline against the measured call times (`predicted_answer_s`: the rest of the call in
    flight + its own call), which see what the compute-time fit cannot (the hop, the runner serving other slots): a
    request that would be answered late is refused now (deadline_unattainable) instead of timing out (504), which
    would also count against the slot's circuit breaker. A call is predicted to take as long as the longest of the
    last CALL_WINDOW calls, not their average: under mixed load a slot's call time swings with what the runner
    computes before it (runners/merge.py), and the average admitted segmentation requests that then timed out
    (9 x 504 in a 3x burst of the soak drill, docs/bench/runner_order.md);
  - `shedding(task)`: when every slot of a task is full under control (a typical request would not fit), the
    request middleware may refuse that task's requests before reading their body. A refusal after parsing and
    preprocessing costs an API worker ~1 ms of CPU (an answer ~3 ms); at 3x capacity those refusals alone take most
    of a core; before the body they cost ~0.35 ms.
Accepted requests then wait at most for the call in flight plus their own call (~2 call times at full batches: the
latency of the service at capacity); the runner always has a full next call queued, so throughput holds. With the
queue bounded to what the next call takes, every waiting request leaves in that call, so the order of service (FIFO
vs LIFO under pressure) makes no difference. Unloaded or in a closed loop at capacity no queue stands and nothing
changes (docs/drills/overload.json measures both).

Adaptive concurrency limits (Envoy's gradient filter, Netflix's Vegas/Gradient2) compare sampled latency with the
minimum latency; with batching the latency at full throughput is inherently a full call, far above a lone request's,
so they would shrink batches (and throughput) rather than the standing queue. Here the limit follows the call size.
"""
from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

CALL_WINDOW = 8  # the calls whose longest wall time predicts the next one


@dataclass
class StandingQueue:
    """One slot's batcher queue as admission sees it (one per slot and API worker). Times are time.monotonic()."""

    slot: str = ""
    task: str = ""  # the slot's family ('' unknown): front-door shedding is per task
    round_items: int = 0  # items one round of calls carries (max_batch_size x batch_inflight); 0: never refuses
    waiting: int = 0  # items queued in the batcher, not yet in a call
    standing_since: float | None = None  # since when every departure has left items behind (None: the last one didn't)
    controlled_until: float = -math.inf  # control is on until then
    refused: int = 0  # requests refused (for /admin views and tests)
    limit_items: int = 0  # the limit of the last admission check
    request_items: float = 1.0  # moving average of the items per request checked (what a typical request needs)
    front_door: bool = True  # may `full` say so (admission.queue_front_door, passed at each check)
    call_s: float = 0.0  # moving average of the slot's runner calls, wall clock (hop, runner queue, other slots' calls)
    starts: list[float] = field(default_factory=list)  # start times of the calls in flight
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=CALL_WINDOW))  # wall times of the last calls

    def departed(self, now: float, left_behind: int) -> None:
        """A call left; `left_behind` items stayed queued (they wait for at least one more call)."""
        if left_behind > 0:
            if self.standing_since is None:
                self.standing_since = now
        else:
            self.standing_since = None

    def call_began(self, now: float) -> None:
        self.starts.append(now)

    def call_ended(self, started: float, now: float) -> None:
        """A call that began at `started` returned: its wall time joins the moving average (weight 0.3)."""
        self.starts.remove(started)
        seconds = now - started
        self.call_s = seconds if self.call_s <= 0 else self.call_s + 0.3 * (seconds - self.call_s)
        self.recent.append(seconds)

    def predicted_answer_s(self, now: float, items: int) -> float:
        """Seconds until a request of `items` items joining now is answered, from measured call times (each the
        longest of the last CALL_WINDOW): the rest of the call in flight, one call per full round queued ahead of
        it, and its own call (0 before any call)."""
        if not self.recent or self.round_items <= 0:
            return 0.0
        call = max(self.recent)
        rest = max(0.0, min(self.starts) + call - now) if self.starts else 0.0
        ahead = max(0, self.waiting + items - 1) // self.round_items
        return rest + (ahead + 1) * call

    def controlled(self, now: float, interval_s: float) -> bool:
        """Is control on? Switches on when the queue has stood for `interval_s`."""
        if self.standing_since is not None and now - self.standing_since >= interval_s:
            self.controlled_until = max(self.controlled_until, now + interval_s)
            return True
        return now < self.controlled_until

    def limit(self, calls: float) -> int:
        """Most items that may wait while control is on: what `calls` rounds of calls carry (at least one item)."""
        return max(1, math.ceil(calls * self.round_items))

    def admit(self, now: float, items: int, interval_s: float, calls: float, front_door: bool = True) -> bool:
        """May a request of `items` items join the queue now? False: refuse it. A request that fits within `calls`
        rounds of calls always joins; one that does not starts (or continues) a standing queue, tolerated as a burst
        until the queue has stood for `interval_s`, refused from then on. Each refusal keeps control on for another
        `interval_s`. `front_door`: whether `full` may report this queue full (the front door refuses for it)."""
        self.front_door, self.limit_items = front_door, self.limit(calls)
        self.request_items += 0.1 * (items - self.request_items)
        ahead = self.ahead()
        if self.round_items <= 0 or ahead == 0 or ahead + items <= self.limit_items:
            return True
        if self.standing_since is None:
            self.standing_since = now
        if not self.controlled(now, interval_s):
            return True
        self.controlled_until = now + interval_s
        self.refused += 1
        return False


    def ahead(self) -> int:
        """Items waiting for the runner in this slot's family: its own queue and those of the family's other slots
        in this API worker (a deployment's fallback, other deployments of the family). They share one runner, which
        serves one call at a time: a primary's call waits behind its fallback's, so under overload their queues share
        one budget (else the overflow spilled to the fallback doubles everyone's wait)."""
        if not self.task:
            return self.waiting
        return self.waiting + sum(q.waiting for q in _QUEUES.values() if q.task == self.task and q is not self)

    def full(self, now: float) -> bool:
        """Control is on and a typical request (the average size checked lately) would not fit: admission would
        refuse it now."""
        return (self.front_door and self.round_items > 0 and now < self.controlled_until
                and self.ahead() + math.ceil(self.request_items) > self.limit_items)


_QUEUES: dict[str, StandingQueue] = {}


def register(slot: str, round_items: int, task: str = "") -> StandingQueue:
    """A new batcher's queue view for `slot` (of family `task`) in this process (one event loop per API worker); it
    replaces any earlier one of the same slot (a batcher made again, e.g. in tests)."""
    queue = _QUEUES[slot] = StandingQueue(slot, task, round_items)
    return queue


def shedding(task: str, now: float | None = None) -> bool:
    """True when every gateway-batched slot of family `task` in this API worker is full under control: admission
    would refuse a request of this task whatever deployment and model it names, so the front door may refuse it
    before reading its body (a refusal after parsing and preprocessing costs an API worker about as much CPU as an
    answer, which at 3x capacity starves the answers). False while any slot of the task has room, or none is known."""
    at = time.monotonic() if now is None else now
    queues = [q for q in _QUEUES.values() if q.task == task]
    return bool(queues) and all(q.full(at) for q in queues)


def lookup(slot: str) -> StandingQueue | None:
    """The slot's queue view, None when no gateway batcher serves it (runner.batching=runner, or no call yet)."""
    return _QUEUES.get(slot)
