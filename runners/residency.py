"""On-demand residency: deployments loaded on their first request and evicted least-recently-used for memory.

Why: a model repository can list more deployments than one device holds (the seed articles: many models on one card,
one model's memory starving its neighbours). Anchors: Triton's explicit model control and MLServer's load/unload
APIs. Deployments marked `residency: on_demand` (configs/deployments.py) are not loaded at startup; the service is
ready without them. Their life:

    unloaded --request or admin load--> loading --warmed, reserved--> resident --evicted--> unloaded
                                          \\--does not fit / broken--> refused (tried again after retry_s)

Loads run one at a time on their own thread, never on the thread that runs batches (BentoML runs the runner's sync
APIs one at a time): the other deployments keep being served while one loads. Requests for a deployment that is not
resident are answered "loading" and the gateway resends them until their deadline (kernel/runner_call/runner_client.py).
A model is warmed before it is routed to (runners/pool.py). When its memory does not fit, the idle on-demand
deployments used least recently are evicted until it does (`make_room`); deployments marked `always` are never
evicted. Batches already running on an evicted model finish on it: the pool only forgets it.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from triserve.configs.deployments import Deployment, ModelRepository

log = logging.getLogger("triserve.residency")

UNLOADED, LOADING, RESIDENT, REFUSED = "unloaded", "loading", "resident", "refused"


@dataclass
class Entry:
    """One on-demand deployment's residency."""

    state: str = UNLOADED
    last_used: float = 0.0  # monotonic; 0 = never
    error: str | None = None
    failed_at: float = 0.0
    loaded_at: float = 0.0


# load(dep, make_room) -> None: loads and installs every slot of the deployment (raises when refused)
Loader = Callable[[Deployment, Callable[[float], None]], None]


class Residency:
    """The on-demand deployments of one runner process, and the policy that loads and evicts them.

    `loader` does the work (the runner service: pool loads under its control lock, pair check, gauges); `free_mb`
    reads the budget left; `unload(dep)` forgets a deployment's models; `observe(event, slot_or_dep, **info)` feeds
    the metrics. Everything here is thread-safe: requests touch and request from the batch thread, loads finish on
    the loader thread, the admin API asks from another.
    """

    def __init__(self, loader: Loader, unload: Callable[[Deployment], None], free_mb: Callable[[], float],
                 observe: Callable[..., None] = lambda *a, **k: None, retry_s: float = 10.0,
                 min_resident_s: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self._loader, self._unload, self._free_mb, self._observe = loader, unload, free_mb, observe
        self.retry_s, self.min_resident_s, self._clock, self._sleep = retry_s, min_resident_s, clock, sleep
        self.entries: dict[str, Entry] = {}
        self._deployments: dict[str, Deployment] = {}
        self._lock = threading.RLock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="triserve-load")

    def sync(self, repository: ModelRepository) -> list[Deployment]:
        """Follow the repository: new on-demand deployments start unloaded, removed ones are forgotten (their models
        are dropped by whoever removed them). Returns the on-demand deployments no longer listed."""
        with self._lock:
            wanted = {d.name: d for d in repository.deployments if d.residency == "on_demand"}
            gone = [d for name, d in self._deployments.items() if name not in wanted]
            for dep in gone:
                self.entries.pop(dep.name, None)
            for name, dep in wanted.items():
                if self._deployments.get(name) != dep:  # new or changed: its next request loads what is configured
                    self.entries[name] = Entry()
            self._deployments = wanted
            return gone

    def refuse(self, name: str, error: str) -> None:
        """Record that a deployment cannot be loaded (e.g. its model is missing from the registry)."""
        with self._lock:
            entry = self.entries.get(name)
            if entry is not None:
                entry.state, entry.error, entry.failed_at = REFUSED, error, self._clock()

    def knows(self, name: str) -> bool:
        return name in self._deployments

    def state(self, name: str) -> str | None:
        entry = self.entries.get(name)
        return entry.state if entry else None

    def touch(self, name: str) -> None:
        entry = self.entries.get(name)
        if entry is not None:
            entry.last_used = self._clock()

    def request(self, name: str, trigger: str = "on_demand") -> Entry:
        """The deployment is wanted now: start loading it unless it is resident or loading (or refused less than
        retry_s ago). Returns its entry (state and, when refused, why)."""
        with self._lock:
            entry = self.entries[name]
            entry.last_used = self._clock()
            retry = entry.state == REFUSED and (trigger == "admin" or self._clock() - entry.failed_at >= self.retry_s)
            if entry.state == UNLOADED or retry:
                entry.state, entry.error = LOADING, None
                self._executor.submit(self._load, self._deployments[name], trigger)
            return entry

    def _load(self, dep: Deployment, trigger: str) -> None:
        started = time.perf_counter()
        try:
            self._loader(dep, self.make_room(dep.name))
        except Exception as exc:  # noqa: BLE001 - refused with the reason; requests get it, the next one retries
            with self._lock:
                entry = self.entries.get(dep.name)
                if entry is not None and self._deployments.get(dep.name) == dep:
                    entry.state, entry.error, entry.failed_at = REFUSED, f"{type(exc).__name__}: {exc}", self._clock()
            log.error("on-demand load of %s refused: %s: %s", dep.name, type(exc).__name__, exc)
            self._observe("load", dep.name, trigger=trigger, outcome="refused", seconds=time.perf_counter() - started)
            return
        with self._lock:
            entry = self.entries.get(dep.name)
            if entry is not None and self._deployments.get(dep.name) == dep:
                entry.state, entry.loaded_at = RESIDENT, self._clock()
        seconds = time.perf_counter() - started
        log.info("on-demand deployment %s loaded in %.2fs (%s)", dep.name, seconds, trigger)
        self._observe("load", dep.name, trigger=trigger, outcome="ok", seconds=seconds)

    def make_room(self, loading: str) -> Callable[[float], None]:
        """A callback for the loader: evict the least recently used resident on-demand deployments (never `loading`)
        until `mb` of the budget is free or none is left to evict. A deployment loaded less than min_resident_s ago
        is waited for, not evicted: without that, two deployments used at once that the budget cannot hold together
        evict each other before the requests that waited for their load are answered (seen in the drill)."""

        def room(mb: float) -> None:
            while self._free_mb() < mb:
                victim, wait_s = self.victim(exclude=loading)
                if victim is None and wait_s is None:
                    return
                if victim is None:
                    self._sleep(wait_s or 0.0)
                    continue
                self.evict(victim, reason=f"room for {loading}")

        return room

    def victim(self, exclude: str) -> tuple[str | None, float | None]:
        """(the least recently used resident deployment old enough to evict, None) or, when every candidate was loaded
        less than min_resident_s ago, (None, seconds until the first one may go); (None, None): no candidate."""
        now = self._clock()
        with self._lock:
            resident = [(e.last_used, e.loaded_at, name) for name, e in self.entries.items()
                        if e.state == RESIDENT and name != exclude]
        ripe = [(used, name) for used, loaded, name in resident if now - loaded >= self.min_resident_s]
        if ripe:
            return min(ripe)[1], None
        if resident:
            return None, max(0.01, min(loaded for _, loaded, _ in resident) + self.min_resident_s - now)
        return None, None

    def evict(self, name: str, reason: str) -> bool:
        """Unload a resident on-demand deployment (the caller holds the runner's control lock)."""
        with self._lock:
            entry = self.entries.get(name)
            if entry is None or entry.state != RESIDENT:
                return False
            entry.state = UNLOADED
            dep = self._deployments[name]
        self._unload(dep)
        log.info("evicted on-demand deployment %s (%s)", name, reason)
        self._observe("evict", name, reason=reason)
        return True

    def wait_idle(self, timeout_s: float) -> None:
        """Wait (bounded) until the loads queued so far have finished."""
        done = threading.Event()
        self._executor.submit(done.set)
        done.wait(timeout_s)

    def describe(self) -> dict[str, dict]:
        now = self._clock()
        with self._lock:
            return {name: {"state": e.state, "error": e.error,
                           "last_used_s": round(now - e.last_used, 1) if e.last_used else None}
                    for name, e in self.entries.items()}
