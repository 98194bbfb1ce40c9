"""The standard process_* and python_* metrics for a multiprocess server.

Why: BentoML's /metrics is prometheus_client's multiprocess mode, which reads only the metric files its processes
write, so the process and Python collectors a single-process exporter has are missing. Here they are read at scrape
time: process_* for every live process of the server (the `bentoml serve` arbiter and its workers: gateway and runner),
one series per process labelled `pid` (bounded by the live processes; prometheus_client's multiprocess gauges label
theirs the same way), and python_info and python_gc_* of the process that answers the scrape.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

PROC = Path("/proc")


def descendants(root: int, proc: Path = PROC) -> list[int]:
    """Every live process below `root` (children, their children, ...), from each /proc/<pid>/stat's parent field."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:  # gone meanwhile
            continue
        parent = int(stat.rsplit(b")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return sorted(found)


def _labelled(families: Iterable[Metric], labels: dict[str, str], into: dict[str, Metric]) -> None:
    """Copy each family's samples into `into` (one family per name) with `labels` added."""
    for family in families:
        out = into.setdefault(family.name, Metric(family.name, family.documentation, family.type, family.unit))
        for sample in family.samples:
            out.samples.append(sample._replace(labels={**sample.labels, **labels}))


class ServerProcessCollector(Collector):
    """process_* of the server's root process and all its descendants, one series per process (label pid)."""

    def __init__(self, root: Callable[[], int], proc: Path = PROC) -> None:
        self.root, self.proc = root, proc

    def collect(self) -> Iterable[Metric]:
        root = self.root()
        families: dict[str, Metric] = {}
        for pid in [root, *descendants(root, self.proc)]:
            reader = ProcessCollector(pid=functools.partial(int, pid), proc=str(self.proc), registry=None)
            _labelled(reader.collect(), {"pid": str(pid)}, families)
        return list(families.values())


class AnsweringProcessGC(Collector):
    """python_gc_* of the process answering the scrape, labelled with its pid (the other workers' differ)."""

    def __init__(self) -> None:
        self.gc = GCCollector(registry=CollectorRegistry())  # a throw-away registry: only this collector reads it

    def collect(self) -> Iterable[Metric]:
        families: dict[str, Metric] = {}
        _labelled(self.gc.collect(), {"pid": str(os.getpid())}, families)
        return list(families.values())


def server_registry(root: Callable[[], int]) -> CollectorRegistry:
    """A registry with the process collector of the server rooted at root(), python_info and this process's GC."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServerProcessCollector(root))
    registry.register(PlatformCollector(registry=None))
    registry.register(AnsweringProcessGC())
    return registry
