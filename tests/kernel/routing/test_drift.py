import numpy as np
import pytest

from tests.models.test_manifest import make_manifest
from triserve.kernel.routing.drift import QualityMonitor, SignalWindow, psi


def test_psi_zero_for_identical_and_large_for_shifted():
    ref = np.array([0.25, 0.25, 0.25, 0.25])
    assert psi(ref, ref * 40) == pytest.approx(0.0, abs=1e-12)
    assert psi(ref, np.array([0, 0, 0, 100])) > 0.2


def test_out_of_range_values_fall_into_edge_bins():
    w = SignalWindow(edges=[0, 1, 2, 3], fractions=[1 / 3] * 3, window=10)
    w.add([-5, 0.5, 1.5, 2.5, 99])
    assert w.current().tolist() == [2, 1, 2]


def test_monitor_updates_only_after_enough_values():
    m = make_manifest(reference={"confidence": {"edges": [0.0, 0.5, 1.0], "fractions": [0.1, 0.9]}})
    mon = QualityMonitor([m], window=100, every=5, min_values=10)
    mon.observe("toy-model", "confidence", [0.9] * 5)
    assert mon.snapshot()["toy-model/confidence"]["psi"] is None
    mon.observe("toy-model", "confidence", [0.1] * 10)
    assert mon.snapshot()["toy-model/confidence"]["psi"] > 0.2
    mon.observe("unknown", "confidence", [1.0])  # models without a reference are ignored
