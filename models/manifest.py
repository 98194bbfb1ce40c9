"""The manifest: the one record that travels with every model artifact.

Why: serving must never guess how a graph was built. Every preprocessing parameter, the hash of every file, where the
weights came from, what data they saw and how well they did are written once at export time and read by the service.
"""
from __future__ import annotations

import functools
import hashlib
import json
import operator
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final, Literal, TypeAlias, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator

import triserve.configs.families

SCHEMA_VERSION: Final = 1
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"  # also a valid OCI tag
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FileEntry(_Strict):
    """One file of the artifact, relative to the version directory."""

    path: str = Field(description="Path relative to the artifact directory (posix separators).")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="Hex sha256 of the file's bytes.")
    size: int = Field(ge=0, description="Size in bytes.")


class TensorSpec(_Strict):
    """A graph input or output; string dimensions are dynamic axes."""

    name: str
    dtype: str = Field(description="numpy dtype name, e.g. float32, int64.")
    shape: list[int | str] = Field(description="Static sizes as ints, dynamic axes by name (e.g. 'batch').")


# Every family's preprocessing record (families/<family>/manifest.py `Preprocess`), told apart by its `kind` (the family
# name). The registry (configs/families.py) loads them by name: this layer imports no family.
_PREPROCESS = {cls.__name__: cls for cls in (triserve.configs.families.preprocess_model(n) for n in
triserve.configs.families.names())}
if TYPE_CHECKING:
    # The type checker sees a pydantic model: a family's code narrows it to its own record with preprocess_as().
    Preprocess: TypeAlias = BaseModel
else:
    Preprocess = Annotated[functools.reduce(operator.or_, _PREPROCESS.values()), Field(discriminator="kind")]
P = TypeVar("P", bound=BaseModel)


def preprocess_as(manifest: Manifest, record: type[P]) -> P:
    """`manifest.preprocess` typed as the record of the family asking (families/<family>/manifest.py). A family's
    code is only reached through its own models (families.runtime(manifest.task), deployments of its family), so
    this narrows the record for the type checker and checks nothing at run time."""
    return cast(P, manifest.preprocess)


def __getattr__(name: str) -> type[BaseModel]:
    """`from triserve.models.manifest import DetectionPreprocess` keeps working at run time (found through the
    registry, by
    name): the classes live in their families, and the project imports them from there
    (`from triserve.families.detection.manifest import DetectionPreprocess`; the type checker sees only that
    spelling)."""
    try:
        return _PREPROCESS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


NOASSERTION: Final = "NOASSERTION"  # SPDX: the licence was not determined (manifests written before `license`)
# Weights made here (the forecasters, test models) are under the project's own licence (LICENSE, pyproject `license`).
PROJECT_LICENSE: Final = "Apache-2.0"
# An SPDX license expression, checked loosely: ids (MIT, AGPL-3.0-only, LicenseRef-...) joined by AND/OR/WITH with
# parentheses; free text ("AGPL-3.0 License (https://...)") is refused. The SPDX list itself is not consulted.
SPDX_PATTERN = r"^[A-Za-z0-9(][A-Za-z0-9.+:() -]{0,254}$"
_SPDX_ID = re.compile(r"^(?:(?:LicenseRef|DocumentRef)-[A-Za-z0-9.-]+(?::LicenseRef-[A-Za-z0-9.-]+)?|"
                      r"[A-Za-z0-9][A-Za-z0-9.-]*\+?)$")


def check_spdx(expression: str) -> str:
    """`expression` when it looks like an SPDX license expression; ValueError naming the offending token otherwise."""
    tokens = [t for t in re.split(r"[\s()]+", expression) if t]
    if not tokens or expression.count("(") != expression.count(")"):
        raise ValueError(f"not an SPDX license expression: {expression!r}")
    for i, tok in enumerate(tokens):
        operator_slot = i % 2 == 1
        if operator_slot != (tok in ("AND", "OR", "WITH")) or (not operator_slot and not _SPDX_ID.match(tok)):
            raise ValueError(f"not an SPDX license expression: {expression!r} (at {tok!r}); use SPDX ids such as "
                             f"MIT, Apache-2.0, AGPL-3.0-only, LicenseRef-<name>, or {NOASSERTION}")
    if len(tokens) % 2 == 0:
        raise ValueError(f"not an SPDX license expression: {expression!r} (ends with an operator)")
    return expression


class Source(_Strict):
    """Where the weights came from, and under which licence they are served."""

    kind: Literal["package", "recipe", "user"]
    description: str
    license: str = Field(
        NOASSERTION, pattern=SPDX_PATTERN,
        description="SPDX license expression of the weights (e.g. 'AGPL-3.0-only', 'Apache-2.0 AND MIT', "
                    "'LicenseRef-<name>'); 'NOASSERTION' when unknown (and in manifests written before this field).")
    url: str | None = Field(None, description="Where the weights (or the package holding them) are published.")
    packages: dict[str, str] = Field(default_factory=dict, description="Package name -> version used to build.")
    recipe: dict = Field(default_factory=dict, description="The recipe parameters (for kind=recipe).")
    seed: int | None = None

    @field_validator("license")
    @classmethod
    def _spdx(cls, value: str) -> str:
        return check_spdx(value)


class ParityCheck(_Strict):
    """ONNX Runtime vs the framework model on one input case."""

    case: str = Field(description="Which input, e.g. 'batch4/seq128' or 'batch1/640x480'.")
    max_abs_diff: float
    tolerance: float
    passed: bool


class Manifest(_Strict):
    """Everything the service needs to serve an artifact and everything an auditor needs to trust it."""

    schema_version: Literal[1] = SCHEMA_VERSION
    name: str = Field(pattern=NAME_PATTERN, description="Model name in the registry, e.g. 'yolo-shapes'.")
    version: str = Field(pattern=VERSION_PATTERN, description="Immutable version, e.g. '1.0.0-3fa2b1c9'.")
    task: str = Field(description="Model family (configs/families.py), e.g. 'detection'.")
    variant: Literal["primary", "fallback"] = Field(description="Fallbacks are cheaper, degraded siblings.")
    fallback_for: str | None = Field(None, description="For a fallback: the primary model name it backs up.")
    model_file: str = Field(description="The ONNX graph inside the artifact (engine numpy: the method's JSON).")
    engine: Literal["onnxruntime", "numpy"] = Field(
        "onnxruntime", description="What runs it: an ONNX Runtime session, or a numpy method of the model's family "
                                   "(families/<family>/runtime.numpy_session; statistical fallbacks with no graph).")
    files: list[FileEntry] = Field(description="Every file of the artifact with its hash (filled at publish).")
    opset: int = Field(gt=0)
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    preprocess: Preprocess
    labels: list[str] = Field(default_factory=list, description="Class names by output index.")
    source: Source
    data_fingerprint: str = Field(description="sha256 of the training/eval data (or of the package files).")
    metrics: dict[str, float] = Field(default_factory=dict, description="Task metrics on held-out data.")
    parity: list[ParityCheck] = Field(default_factory=list, description="FP32 parity checks (empty for quantised).")
    gates: dict[str, bool] = Field(default_factory=dict, description="Quality gates applied and their outcome.")
    reference: dict[str, dict[str, list[float]]] = Field(
        default_factory=dict,
        description="Reference distributions for drift, by signal (e.g. 'top1_prob'): "
                    "{'edges': [...], 'fractions': [...]}.",
    )
    recipe_hash: str = Field(description="sha256 of the recipe that produced it; the build cache key.")
    created_at: datetime
    git_commit: str

    @field_validator("task")
    @classmethod
    def _known_family(cls, task: str) -> str:
        if task not in triserve.configs.families.names():
            raise ValueError(f"unknown model family {task!r}; known: {', '.join(triserve.configs.families.names())}")
        return task

    @field_validator("files")
    @classmethod
    def _unique_paths(cls, files: list[FileEntry]) -> list[FileEntry]:
        paths = [f.path for f in files]
        if len(paths) != len(set(paths)):
            raise ValueError("duplicate file paths in manifest")
        for p in paths:
            if p.startswith("/") or ".." in Path(p).parts:
                raise ValueError(f"file path escapes the artifact: {p}")
        return files

    def file(self, path: str) -> FileEntry:
        for f in self.files:
            if f.path == path:
                return f
        raise KeyError(path)

    def dumps(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True)

    @classmethod
    def load(cls, path: Path) -> Manifest:
        return cls.model_validate_json(Path(path).read_text())


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def describe_files(directory: Path) -> list[FileEntry]:
    """Hash every file under `directory` except the manifest itself."""
    entries = []
    for p in sorted(Path(directory).rglob("*")):
        if p.is_file() and p.name != "manifest.json":
            entries.append(FileEntry(path=p.relative_to(directory).as_posix(), sha256=sha256_file(p),
                                     size=p.stat().st_size))
    return entries


def utcnow() -> datetime:
    return datetime.now(UTC)


def json_schema() -> dict:
    """The JSON schema every manifest.json validates against (written to models/manifest.schema.json)."""
    return Manifest.model_json_schema()


if __name__ == "__main__":  # python -m triserve.models.manifest > models/manifest.schema.json
    print(json.dumps(json_schema(), indent=2, sort_keys=True))
