"""python -m scripts.importer [--deployment NAME] SUBCOMMAND ... (see --help of each; --help lists them)."""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from pathlib import Path

from scripts.importer import IMPORTERS


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m scripts.importer",
                                 description="Import models made elsewhere into the triserve registry.")
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    ap.add_argument("--deployment", metavar="NAME", default=None,
                    help="after publishing, add a deployment NAME serving the new version (and its fallback, when "
                         "one was published) to the model repository file (scripts/importer/deploy.py)")
    ap.add_argument("--models-file", type=Path, default=None,
                    help="the model repository file for --deployment (default $TRISERVE_MODELS_FILE or "
                         "configs/models.yaml)")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for module in IMPORTERS:
        importlib.import_module(module).add_parser(sub)
    return ap


def deploy(args) -> int:
    """The optional last step: a deployment entry for the version just published (same registry, same name)."""
    from models.registry import LocalRegistry
    from scripts.importer.deploy import DeploymentRefused, add_deployment, entry

    registry = LocalRegistry(args.registry)
    version = getattr(args, "version", None) or registry.resolve(args.name, "stable")
    manifest = registry.manifest(args.name, version)
    fallback = getattr(args, "fallback_name", None)
    if fallback and not registry.has(fallback, version):
        fallback = None
    try:
        path = add_deployment(entry(args.deployment, manifest.task, args.name, version, fallback), args.models_file)
    except DeploymentRefused as exc:
        logging.getLogger("triserve.importer").error("published, but no deployment added: %s", exc)
        return 2
    print(json.dumps({"deployment": args.deployment, "models_file": str(path)}), file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    code = int(args.func(args))
    if code == 0 and args.deployment:
        return deploy(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
