"""python -m scripts.importer {detection-onnx, coco-default, detection-pt} ... (see --help of each)."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from scripts.importer import IMPORTERS


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m scripts.importer",
                                 description="Import models made elsewhere into the triserve registry.")
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for module in IMPORTERS:
        importlib.import_module(module).add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
