"""Shared pieces of the model pipeline: recipe hashing, the build context, ONNX Runtime sessions, the parity gate.

Every task builder (scripts/<task>/build.py) exposes `ARTIFACTS` (the model names it publishes), `RECIPES`
(profile -> recipe dict) and `build(ctx, recipe) -> list[Artifact]`; scripts/pipeline.py drives them.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from models.manifest import Manifest, ParityCheck
from scripts.imagetools import StepFailed, system_tool

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# where `python -m scripts.pipeline build` publishes and caches by default (scripts/pipeline.py, detection/build.py)
LOCAL_REGISTRY = PROJECT_ROOT / "models" / "store"
PIPELINE_CACHE = PROJECT_ROOT / ".cache" / "pipeline"
log = logging.getLogger("triserve.pipeline")


class GateFailed(RuntimeError):
    """A parity or quality gate failed: the build stops and nothing is published."""


@dataclass(frozen=True)
class Artifact:
    """A built model waiting to be published: its files in `staging` and its manifest (files filled at publish)."""

    staging: Path
    manifest: Manifest


@dataclass
class BuildContext:
    """What a task builder gets: where to work, which version it is building, and shared run facts."""

    task: str
    profile: str
    recipe_hash: str
    version: str
    work_dir: Path  # scratch space for this build (cleaned by the caller)
    cache_dir: Path  # persistent cache for expensive intermediates (e.g. trained weights), keyed by the builder
    git_commit: str
    extra: dict = field(default_factory=dict)

    def staging(self, name: str) -> Path:
        path = self.work_dir / "staging" / name
        path.mkdir(parents=True, exist_ok=True)
        return path


def stable_hash(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def source_digest(paths: Iterable[Path]) -> str:
    """Hash of the code that builds a model, so a code change invalidates the build cache."""
    h = hashlib.sha256()
    for root in paths:
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for f in files:
            h.update(f.relative_to(PROJECT_ROOT).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def recipe_hash(task: str, recipe: Mapping, code_paths: Iterable[Path]) -> str:
    return stable_hash({"task": task, "recipe": dict(recipe), "code": source_digest(code_paths)})


def data_fingerprint(*arrays_or_files: object) -> str:
    """sha256 over arrays (their bytes) and files (their contents): the data version in the manifest."""
    h = hashlib.sha256()
    for item in arrays_or_files:
        if isinstance(item, np.ndarray):
            h.update(np.ascontiguousarray(item).tobytes())
        elif isinstance(item, (str, Path)) and Path(item).is_file():
            h.update(Path(item).read_bytes())
        else:
            h.update(json.dumps(item, sort_keys=True, default=str).encode())
    return h.hexdigest()


def git_commit() -> str:
    """HEAD's sha (+ "-dirty"), with the system git (scripts/imagetools.py "tool resolution"); "unknown" without."""
    try:
        git = system_tool("git")
        out = subprocess.run([git, "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run([git, "status", "--porcelain"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                               timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError, StepFailed):
        return "unknown"


def default_deployment(family: str) -> str:
    """The deployment configs/models.yaml serves `family` with by default (what a request naming none reaches):
    the runner slot benchmarks and drills measure or slow down."""
    from configs.deployments import load_repository

    deployment = load_repository().default_for(family)
    if deployment is None:
        raise LookupError(f"configs/models.yaml has no {family} deployment")
    return deployment.name


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    try:
        import torch

        torch.manual_seed(seed)
        torch.use_deterministic_algorithms(True, warn_only=True)
    except ImportError:
        pass


def package_versions(*names: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            out[n] = "missing"
    return out


def ort_session(model_path: Path, threads: int = 0):
    """A CPU ONNX Runtime session with full graph optimisation (the same settings the runner uses)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    return ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])


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


def histogram_reference(values: np.ndarray, bins: np.ndarray) -> dict[str, list[float]]:
    """A reference distribution for drift monitoring: bin edges and normalised counts."""
    counts, edges = np.histogram(np.asarray(values, dtype=np.float64), bins=bins)
    total = max(int(counts.sum()), 1)
    return {"edges": [float(e) for e in edges], "fractions": [float(c) / total for c in counts]}
