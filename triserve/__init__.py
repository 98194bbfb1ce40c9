"""triserve: the one importable name of the server (triserve.services, triserve.families, ...), its console script
(triserve/cli.py) and the version.

The repository keeps the design's top-level folders (services/, runners/, families/, kernel/, models/, configs/,
observability/, batch/); in a checkout triserve/<folder> is a symlink to each, and the wheel holds them under
triserve/ (pyproject.toml [tool.setuptools.packages.find]). A tree that has the folders but not the links (a Bento's
src/: BentoML copies files, not links to folders) finds them through this package's path.
"""
from __future__ import annotations

import importlib.metadata
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if not (_HERE / "services").exists() and (_HERE.parent / "services" / "__init__.py").is_file():
    __path__.append(str(_HERE.parent))

try:
    __version__ = importlib.metadata.version("triserve")
except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0+unknown"
