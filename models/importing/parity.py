"""The parity gate: ONNX Runtime against the framework a model came from, case by case, within a tolerance."""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from triserve.models.importing.result import GateFailed
from triserve.models.manifest import ParityCheck


def parity_gate(cases: Iterable[tuple[str, dict[str, np.ndarray], np.ndarray]], session, tolerance: float = 1e-4,
                output_name: str | None = None) -> list[ParityCheck]:
    """Run ORT on each (case, inputs, reference output) and fail the build if any max abs diff exceeds `tolerance`."""
    checks = []
    for case, feeds, expected in cases:
        names = [output_name] if output_name else None
        got = session.run(names, feeds)[0]
        if got.shape != expected.shape:
            raise GateFailed(f"parity {case}: shape {got.shape} != reference {expected.shape}")
        diff = float(np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64)))) if got.size else 0.0
        if not np.isfinite(diff):
            diff = float("inf")
        checks.append(ParityCheck(case=case, max_abs_diff=diff, tolerance=tolerance, passed=diff <= tolerance))
    failed = [c for c in checks if not c.passed]
    if failed:
        worst = max(failed, key=lambda c: c.max_abs_diff)
        raise GateFailed(f"parity gate failed on {len(failed)} case(s); worst {worst.case}: "
                         f"max abs diff {worst.max_abs_diff:.3g} > {tolerance:g}")
    return checks
