"""`triserve import`: bring a model made elsewhere into the registry (python -m triserve.importers).

    triserve import [--deployment NAME] KIND ...      KIND: detection-onnx, detection-pt, text-hf, ... (--help)

The subcommands are the families' own importers, found at run time: for every family of the registry in
families/__init__.py, `families/<name>/importers/__init__.py` lists its importer modules in IMPORTERS, and each module
registers its subcommands with `add_parser(subparsers)`, setting `func(args) -> exit code`. A new family's importers
join by being listed there; nothing here names a family. The optional last step, `--deployment NAME`, adds a
deployment serving what was published to the model repository file (models/importing/deploy.py).

This is the CLI's place because it is the top of the layers: it may ask the families registry, which models/ (the
generic import machinery, below the families) never does. It runs from the installed wheel as from a checkout.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
from pathlib import Path

from triserve import families


def importer_modules() -> list[str]:
    """Every family's importer modules, in the registry's family order."""
    out: list[str] = []
    for name in families.names():
        try:
            package = importlib.import_module(f"{families.registered()[name]}.importers")
        except ModuleNotFoundError as exc:  # a family without importers: nothing to register
            if exc.name != f"{families.registered()[name]}.importers":
                raise
            continue
        out += list(package.IMPORTERS)
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="triserve import",
                                 description="Import models made elsewhere into the triserve registry (also `python "
                                             "-m triserve.importers` in the project's environment).")
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    ap.add_argument("--deployment", metavar="NAME", default=None,
                    help="after publishing, add a deployment NAME serving the new version (and its fallback, when "
                         "one was published) to the model repository file (models/importing/deploy.py)")
    ap.add_argument("--models-file", type=Path, default=None,
                    help="the model repository file for --deployment (default $TRISERVE_MODELS_FILE or "
                         "configs/models.yaml)")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for module in importer_modules():
        importlib.import_module(module).add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    from triserve.models.importing.deploy import deploy_published

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    code = int(args.func(args))
    if code == 0 and args.deployment:
        return deploy_published(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
