"""The model families this server knows: plugin discovery at the bottom layer (like Django's INSTALLED_APPS).

A family is a package: `families/<name>/` for the built-in ones (families/__init__.py says what its modules hold).
This module names them by string and loads their modules with importlib on first use. That is a lookup by name, not
a static import, so every layer asks here without importing a family folder: configs validating `limits.<family>`,
models/manifest.py assembling the manifest's preprocess union, kernel/context.py resolving a deployment's family,
the runner loading a family's runtime. Nothing here imports the project.

The built-in families are the table below, one line each. Third-party ones are discovered from the
`triserve.families` entry-point group of the installed distributions, each `name = "package"` (a module path, no
`:attr`), e.g. in the distribution's pyproject.toml:

    [project.entry-points."triserve.families"]
    sentiment = "acme_triserve.sentiment"

Built-ins come first, then the discovered ones by name; a name claimed twice (a built-in, or two distributions) is
refused when the registry is first read (ValueError naming both packages).

Public: `FAMILIES`, `ENTRY_POINT_GROUP`, `registered()`, `names()`, `limits_model()`, `preprocess_model()`,
`runtime()`, `family()`, `batch_adapter()`, `batch_adapters()`, `rediscover()`.
"""
from __future__ import annotations

import importlib
from functools import cache
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

from pydantic import BaseModel

# The built-in families: name -> package. A new family in this repository is one line here.
FAMILIES: dict[str, str] = {
    "detection": "triserve.families.detection",
    "text": "triserve.families.text",
    "forecast": "triserve.families.forecast",
    "pose": "triserve.families.pose",
    "segmentation": "triserve.families.segmentation",
    "classification": "triserve.families.classification",
}
ENTRY_POINT_GROUP = "triserve.families"


def _origin(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return f"distribution {dist.name} {dist.version}" if dist is not None else "an installed distribution"


@cache
def _discover() -> dict[str, str]:
    found = dict(FAMILIES)
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.attr or not ep.module:
            raise ValueError(f"entry point {ENTRY_POINT_GROUP}:{ep.name} of {_origin(ep)} names {ep.value!r}; "
                             f"it must name the family's package (a module path, no ':attr')")
        if ep.name in found:
            claimed = "a built-in family" if ep.name in FAMILIES else "another distribution"
            raise ValueError(f"model family {ep.name!r} is claimed twice: by {claimed} ({found[ep.name]}) and by "
                             f"{_origin(ep)} ({ep.module}); uninstall one of them")
        found[ep.name] = ep.module
    return found


def registered() -> dict[str, str]:
    """Every family: name -> package, the built-ins first, then the `triserve.families` entry points by name (read
    once per process; a copy)."""
    return dict(_discover())


def names() -> tuple[str, ...]:
    return tuple(_discover())


def rediscover() -> None:
    """Forget what was discovered and loaded: the next call reads the entry points again (tests, after installing a
    distribution in a running process). Modules already imported stay imported."""
    for cached in (_discover, limits_model, preprocess_model, runtime, family, batch_adapter):
        cached.cache_clear()


def _module(family_name: str, module: str) -> ModuleType:
    known = _discover()
    try:
        package = known[family_name]
    except KeyError:
        raise KeyError(f"unknown model family {family_name!r}; known: {', '.join(known)}") from None
    return importlib.import_module(f"{package}.{module}")


@cache
def limits_model(family_name: str) -> type[BaseModel]:
    """The family's typed request limits (`<package>.limits.Limits`; configs validate `limits.<family>` with it)."""
    return _module(family_name, "limits").Limits


@cache
def preprocess_model(family_name: str) -> type[BaseModel]:
    """What the family records in a manifest (`<package>.manifest.Preprocess`, discriminated by `kind` = the family
    name)."""
    return _module(family_name, "manifest").Preprocess


@cache
def runtime(family_name: str) -> ModuleType:
    """The runner-side hooks (`<package>.runtime`): feeds(manifest, input_names, xs) and warmup_sizes(manifest)."""
    return _module(family_name, "runtime")


@cache
def family(family_name: str) -> Any:
    """The gateway-side contract object of a family (`<package>.family.FAMILY`, a triserve.kernel.family.Family: typed
    as
    such by families.family() and kernel/context.py; this layer does not import the kernel)."""
    return _module(family_name, "family").FAMILY


def batch_adapters(family_name: str) -> tuple[Any, ...]:
    """Every offline adapter class of the family, one per `triserve batch` command: `<package>.batch.ADAPTERS` when
    the module lists several (the forecast family: forecast, forecast-panel, forecast-backtest), else its Adapter;
    none without a batch module."""
    adapter = batch_adapter(family_name)
    if adapter is None:
        return ()
    return tuple(getattr(importlib.import_module(adapter.__module__), "ADAPTERS", (adapter,)))


@cache
def batch_adapter(family_name: str) -> Any | None:
    """The family's offline adapter class (`<package>.batch.Adapter`, kernel/batch.Adapter), None when the family has
    no batch module (it then has no `triserve batch` command)."""
    package = _discover().get(family_name)
    if package is None:
        raise KeyError(f"unknown model family {family_name!r}; known: {', '.join(_discover())}")
    try:
        return _module(family_name, "batch").Adapter
    except ModuleNotFoundError as exc:
        if exc.name != f"{package}.batch":
            raise
        return None
