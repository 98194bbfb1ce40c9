"""The triserve distribution's own package: the `triserve` console script (triserve/cli.py) and the version.

The server itself lives in the project's top-level packages (services/, runners/, families/, models/, configs/,
observability/): see pyproject.toml [tool.setuptools.packages.find] for why those names stay as they are.
"""
from __future__ import annotations

import importlib.metadata

try:
    __version__ = importlib.metadata.version("triserve")
except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0+unknown"
