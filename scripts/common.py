"""Shared pieces of the model pipeline: the build context, recipe hashing, the pipeline's defaults.

Every task builder (scripts/<task>/build.py) exposes `ARTIFACTS` (the model names it publishes), `RECIPES`
(profile -> recipe dict) and `build(ctx, recipe) -> list[Artifact]`; scripts/pipeline.py drives them. What the
builders share with the importers (gates, artifacts, provenance hashes, ONNX Runtime sessions, the parity gate, drift
references) is the product's (models/importing/) and re-exported here for them.
"""
from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from triserve.models.importing.graphs import ort_session as ort_session
from triserve.models.importing.parity import parity_gate as parity_gate
from triserve.models.importing.provenance import data_fingerprint as data_fingerprint
from triserve.models.importing.provenance import git_commit as git_commit
from triserve.models.importing.provenance import package_versions as package_versions
from triserve.models.importing.provenance import source_digest as source_digest
from triserve.models.importing.provenance import stable_hash as stable_hash
from triserve.models.importing.references import histogram_reference as histogram_reference
from triserve.models.importing.result import Artifact as Artifact
from triserve.models.importing.result import GateFailed as GateFailed

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# where `python -m scripts.pipeline build` publishes and caches by default (scripts/pipeline.py, detection/build.py)
LOCAL_REGISTRY = PROJECT_ROOT / "models" / "store"
PIPELINE_CACHE = PROJECT_ROOT / ".cache" / "pipeline"
log = logging.getLogger("triserve.pipeline")


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


def recipe_hash(task: str, recipe: Mapping, code_paths: Iterable[Path]) -> str:
    return stable_hash({"task": task, "recipe": dict(recipe), "code": source_digest(code_paths)})


def default_deployment(family: str) -> str:
    """The deployment configs/models.yaml serves `family` with by default (what a request naming none reaches):
    the runner slot benchmarks and drills measure or slow down."""
    from triserve.configs.deployments import load_repository

    deployment = load_repository().default_for(family)
    if deployment is None:
        raise LookupError(f"configs/models.yaml has no {family} deployment")
    return deployment.name


def default_model(family: str) -> str:
    """The primary model's name of the family's default deployment (what benchmarks of 'the default' measure)."""
    from triserve.configs.deployments import load_repository

    deployment = load_repository().default_for(family)
    if deployment is None:
        raise LookupError(f"configs/models.yaml has no {family} deployment")
    return deployment.model.name


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
