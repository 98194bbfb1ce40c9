"""The importers' last, optional step: a deployment entry for what was just published (`--deployment NAME`).

The entry is appended to the model repository file (`--models-file`, default $TRISERVE_MODELS_FILE or
configs/models.yaml) as a YAML block, so the file's comments and layout stay as they are; the whole file is then
validated as the service would (configs/deployments.ModelRepository) and left untouched if it would not load. An
existing deployment of that name is refused: changing what serves is the admin API's job (PUT /admin/deployments),
where the swap is staged and checked against the running service.
"""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import yaml

from triserve.configs.deployments import ModelRepository, models_file

log = logging.getLogger("triserve.importer")


class DeploymentRefused(ValueError):
    pass


def entry(name: str, family: str, model: str, version: str, fallback: str | None = None,
          description: str = "") -> dict:
    """A deployment serving `model:version` (and its fallback at the same version, when one was published)."""
    out: dict = {"name": name, "family": family, "model": {"name": model, "ref": version}}
    if fallback:
        out["fallback"] = {"name": fallback, "ref": version}
    if description:
        out["description"] = description
    return out


def add_deployment(new: dict, path: Path | None = None) -> Path:
    """Append `new` to the repository file after checking that the result loads; returns the file."""
    path = Path(path or models_file())
    text = path.read_text() if path.is_file() else "deployments:\n"
    current = yaml.safe_load(text) or {}
    if any(d.get("name") == new["name"] for d in current.get("deployments") or []):
        raise DeploymentRefused(f"{path} already has a deployment {new['name']!r}; change it there or with PUT "
                                f"/admin/deployments/{new['name']} on the running service")
    block = yaml.safe_dump([new], sort_keys=False, default_flow_style=None)
    updated = text.rstrip("\n") + "\n" + "".join(f"  {line}\n" for line in block.splitlines())
    try:
        ModelRepository.model_validate(yaml.safe_load(updated))
    except Exception as exc:  # any reason the service would not start: refused, file unchanged
        raise DeploymentRefused(f"the entry would make {path} invalid: {exc}") from exc
    path.write_text(updated)
    log.info("deployment %s added to %s (served from the next start; or PUT /admin/deployments/%s now)",
             new["name"], path, new["name"])
    return path


def deploy_published(args) -> int:
    """The CLI's optional last step (`--deployment NAME`): a deployment entry for the version just published (same
    registry, same name; its fallback too when one was published). 0, or 2 when the entry is refused."""
    from triserve.models.registry import LocalRegistry

    registry = LocalRegistry(args.registry)
    version = getattr(args, "version", None) or registry.resolve(args.name, "stable")
    manifest = registry.manifest(args.name, version)
    fallback = getattr(args, "fallback_name", None)
    if fallback and not registry.has(fallback, version):
        fallback = None
    try:
        path = add_deployment(entry(args.deployment, manifest.task, args.name, version, fallback), args.models_file)
    except DeploymentRefused as exc:
        log.error("published, but no deployment added: %s", exc)
        return 2
    print(json.dumps({"deployment": args.deployment, "models_file": str(path)}), file=sys.stderr)
    return 0
