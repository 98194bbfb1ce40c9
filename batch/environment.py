"""The environment a cluster's processes start with: they inherit the caller's, and must import this project.

Why a context manager: Ray's local node and Spark's JVM (and through it the Python workers) are started once and keep
the environment they were started with, so the project's root only has to lead PYTHONPATH while they start; the
caller's own process environment is left exactly as it was (a library must not change its caller's environment:
a later subprocess of the caller would otherwise see this checkout first).
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import triserve

PROJECT_ROOT = str(Path(triserve.__file__).resolve().parent.parent)
"""The directory that holds the `triserve` package: the checkout, a Bento's src/ or site-packages."""


@contextmanager
def started_with(**variables: str) -> Iterator[dict[str, str]]:
    """PYTHONPATH with the project's root first (plus `variables`) while the block runs, restored after."""
    before = {name: os.environ.get(name) for name in ("PYTHONPATH", *variables)}
    parts = [p for p in (before["PYTHONPATH"] or "").split(os.pathsep) if p and p != PROJECT_ROOT]
    values = {"PYTHONPATH": os.pathsep.join([PROJECT_ROOT, *parts]), **variables}
    os.environ.update(values)
    try:
        yield values
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
