"""Model families: the one place that knows what a task is.

A family (detection, text classification, forecasting) is one folder that owns its request and response schemas,
request limits, preprocessing, output checks, postprocessing, Open Inference Protocol adapter, drift signals, shadow
agreement and importers. Everything else in triserve (runner, routing, rollouts, protocols, metrics, admission, model
cache) iterates over the deployments configured in configs/models.yaml and asks the deployment's family.

Adding a fourth family = one new folder `families/<name>/` with four modules and one line in FAMILIES:
- `limits.py`  `Limits`: the typed request limits (pydantic; no project imports, so configs can validate them);
- `manifest.py` `Preprocess`: what its models record in their manifests (pydantic, `kind` = the family name);
- `runtime.py` `feeds()` and `warmup_sizes()`: how the runner turns items into ONNX feeds (numpy only: the runner
  tier imports it and nothing else of the family); optionally `numpy_session(manifest, path)` for models whose
  manifest says `engine: numpy` (a statistical method with no graph, e.g. the forecast family's Theta fallback);
  `RAGGED = True` when its items are sequences of their own length (the runner groups them by length; feeds() pads
  with kernel/ragged.pad_sequences);
- `family.py`  `FAMILY`: the gateway-side contract (kernel/family.py), with its REST router.

Public: `names()`, `limits_model()`, `preprocess_model()`, `runtime()`, `family()`. The family folders' other modules
are theirs.
"""
from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pydantic import BaseModel

    from kernel.family import Family

# family name -> package. The registration.
FAMILIES: dict[str, str] = {
    "detection": "families.detection",
    "text": "families.text",
    "forecast": "families.forecast",
}


def names() -> tuple[str, ...]:
    return tuple(FAMILIES)


def _module(family_name: str, module: str) -> ModuleType:
    try:
        package = FAMILIES[family_name]
    except KeyError:
        raise KeyError(f"unknown model family {family_name!r}; known: {', '.join(FAMILIES)}") from None
    return importlib.import_module(f"{package}.{module}")


@cache
def limits_model(family_name: str) -> type[BaseModel]:
    """The family's typed request limits (configs validate `limits.<family>` against it)."""
    return _module(family_name, "limits").Limits


@cache
def preprocess_model(family_name: str) -> type[BaseModel]:
    """What the family records in a manifest (`preprocess`, discriminated by `kind` = the family name)."""
    return _module(family_name, "manifest").Preprocess


@cache
def runtime(family_name: str) -> ModuleType:
    """The runner-side hooks: feeds(manifest, input_names, xs) and warmup_sizes(manifest)."""
    return _module(family_name, "runtime")


@cache
def family(family_name: str) -> Family:
    """The gateway-side contract object of a family."""
    return _module(family_name, "family").FAMILY
