"""Model-quality monitoring: PSI of live output/input distributions against the reference stored in the manifest.

Why: a detector whose mean confidence slides from 0.85 to 0.6 over a month returns 200s the whole time; only the
distribution shows it. Each (model, signal) keeps a sliding window of recent values; its histogram over the
reference's bin edges (values outside the range fall into the edge bins, so a shifted series is counted, not lost) is
compared with the reference fractions by the Population Stability Index, exported as triserve_drift_psi.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np

from triserve.models.manifest import Manifest
from triserve.observability.metrics import DRIFT_PSI

EPS = 1e-4


def psi(expected: np.ndarray, actual: np.ndarray) -> float:
    """PSI between two discrete distributions over the same bins."""
    e = np.clip(np.asarray(expected, dtype=np.float64), EPS, None)
    a = np.clip(np.asarray(actual, dtype=np.float64), EPS, None)
    e, a = e / e.sum(), a / a.sum()
    return float(np.sum((a - e) * np.log(a / e)))


class SignalWindow:
    def __init__(self, edges: list[float], fractions: list[float], window: int):
        self.edges = np.asarray(edges, dtype=np.float64)
        self.reference = np.asarray(fractions, dtype=np.float64)
        self.values: deque[float] = deque(maxlen=window)

    def add(self, values: Iterable[float]) -> None:
        self.values.extend(float(v) for v in values)

    def current(self) -> np.ndarray:
        inner = self.edges[1:-1]
        idx = np.searchsorted(inner, np.asarray(self.values), side="right")  # out-of-range -> edge bins
        return np.bincount(idx, minlength=len(self.reference)).astype(np.float64)

    def psi(self) -> float | None:
        return psi(self.reference, self.current()) if self.values else None


class QualityMonitor:
    """Windows for every (model, signal) that has a reference; PSI recomputed every `every` observations."""

    def __init__(self, manifests: Iterable[Manifest], window: int = 2000, every: int = 50, min_values: int = 100):
        self.windows: dict[tuple[str, str], SignalWindow] = {}
        self.tasks: dict[str, str] = {}
        self.every, self.min_values = every, min_values
        self._since: dict[tuple[str, str], int] = {}
        self.window = window
        for m in manifests:
            self.track(m)

    def track(self, m: Manifest) -> None:
        """Watch a model's signals against its manifest's references (models of deployments added at run time)."""
        if m.name in self.tasks:
            return
        self.tasks[m.name] = m.task
        for signal, ref in m.reference.items():
            self.windows[(m.name, signal)] = SignalWindow(ref["edges"], ref["fractions"], self.window)

    def observe(self, model: str, signal: str, values: Iterable[float]) -> None:
        key = (model, signal)
        win = self.windows.get(key)
        if win is None:
            return
        values = list(values)
        win.add(values)
        self._since[key] = self._since.get(key, 0) + len(values)
        if self._since[key] >= self.every and len(win.values) >= self.min_values:
            self._since[key] = 0
            value = win.psi()
            if value is not None:  # None only for an empty window
                DRIFT_PSI.labels(self.tasks[model], model, signal).set(value)

    def snapshot(self) -> dict:
        return {f"{m}/{s}": {"values": len(w.values), "psi": self._shown_psi(w)} for (m, s), w in self.windows.items()}

    def _shown_psi(self, window: SignalWindow) -> float | None:
        value = window.psi() if len(window.values) >= self.min_values else None
        return None if value is None else round(value, 4)
