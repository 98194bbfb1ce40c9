"""What an import produces: staged artifacts and a report, or a refusal that says why and publishes nothing."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from triserve.models.manifest import Manifest


class GateFailed(RuntimeError):
    """A parity or quality gate failed: the build or import stops and nothing is published."""


class ImportRefused(GateFailed):
    """The file is not something the family can serve; the message says why. Nothing is published."""


@dataclass(frozen=True)
class Artifact:
    """A built model waiting to be published: its files in `staging` and its manifest (files filled at publish)."""

    staging: Path
    manifest: Manifest


@dataclass
class ImportResult:
    primary: Artifact
    fallback: Artifact | None
    report: dict = field(default_factory=dict)  # every measured number, refusals of fallback attempts, timings

    @property
    def artifacts(self) -> list[Artifact]:
        return [self.primary] + ([self.fallback] if self.fallback else [])


class Laps:
    """Seconds per step of an import (the report's timings_s): `laps("step")` ends a step where the previous one
    ended."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self.timings: dict[str, float] = {}

    def __call__(self, key: str) -> None:
        self.timings[key] = round(time.monotonic() - self._t0 - sum(self.timings.values()), 2)
