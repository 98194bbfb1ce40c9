"""A served model version and one runner call's outcome: what a family preprocesses for and reads outputs with. Their
own module so that the family contract (kernel/family.py), the routing (kernel/routing/) and the lifecycle
(kernel/lifecycle.py) name them without importing each other."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from triserve.models.manifest import Manifest


@dataclass(frozen=True)
class ServedModel:
    """A concrete version the gateway preprocesses for: its files and manifest. Identity is (slot, version)."""

    slot: str
    version: str
    directory: Path = field(compare=False, hash=False)
    manifest: Manifest = field(compare=False, hash=False)


@dataclass
class RunnerResult:
    outputs: list[np.ndarray]  # one output row per item, in order
    model: str
    version: str
    infer_ms: float
    batch: int
    slot: str
    degraded: bool
    degraded_reason: str | None
    served: ServedModel  # the exact version whose manifest post-processing must use
    role: str = "stable"  # or "canary"
    facts: list[dict] | None = None  # per item, what the runner said of an output it cut (`keep`), else {}
