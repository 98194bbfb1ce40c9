"""Model families: the one place that knows what a task is.

A family (detection, pose, segmentation, text classification, forecasting) is one folder that owns its request and
response schemas, request limits, preprocessing, output checks, postprocessing, tensor metadata (what the generic
transports adapt), drift signals, shadow agreement and importers. Everything else in triserve (runner, routing,
rollouts, protocols, metrics, admission, model cache) iterates over the deployments configured in configs/models.yaml
and asks the deployment's family.

`families/vision/` is not a family: it is the base the image families (detection, pose, segmentation,
classification) stand on, so that none of them imports another (tests/test_architecture.py).

Adding a family = one new folder `families/<name>/` (ARCHITECTURE.md has the checklist) and one line in
configs/families.py `FAMILIES` (the registry sits in the bottom layer so that configs, models and the kernel can name
families without importing this package; a third-party family registers through the `triserve.families` entry-point
group instead):
- `limits.py`  `Limits`: the typed request limits (pydantic; no project imports, so configs can validate them);
- `manifest.py` `Preprocess`: what its models record in their manifests (pydantic, `kind` = the family name);
- `runtime.py` `feeds()` and `warmup_sizes()`: how the runner turns items into ONNX feeds (numpy only: the runner
  tier imports it and nothing else of the family); optionally `numpy_session(manifest, path)` for models whose
  manifest says `engine: numpy` (a statistical method with no graph, e.g. the forecast family's Theta fallback);
  `RAGGED = True` when its items are sequences of their own length (the runner groups them by length; feeds() pads
  with kernel/ragged.pad_sequences);
- `family.py`  `FAMILY`: the contract (kernel/family.py): what it declares to the transports and the rollouts, and
  the hooks the kernel's request lifecycle (kernel/lifecycle.py) calls: validate -> items -> respond.

Public (the registry of configs/families.py, re-exported; `family()` typed here as the kernel's `Family`):
`FAMILIES`, `ENTRY_POINT_GROUP`, `registered()`, `names()`, `limits_model()`, `preprocess_model()`, `runtime()`,
`family()`, `rediscover()`. The family folders' other modules are theirs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from triserve.configs import families as _registry
from triserve.configs.families import (
    ENTRY_POINT_GROUP,
    FAMILIES,
    limits_model,
    names,
    preprocess_model,
    rediscover,
    registered,
    runtime,
)

if TYPE_CHECKING:  # pragma: no cover
    from triserve.kernel.family import Family

__all__ = ["ENTRY_POINT_GROUP", "FAMILIES", "family", "limits_model", "names", "preprocess_model", "rediscover",
           "registered", "runtime"]


def family(family_name: str) -> Family:
    """The gateway-side contract object of a family (configs/families.py loads it by name, once)."""
    return _registry.family(family_name)
