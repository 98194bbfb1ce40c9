"""`triserve import` (triserve/importers.py) offers every importer the model families declare in
families/<family>/importers/__init__.py (IMPORTERS), found through the families registry, and nothing else."""
from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

from triserve import families
from triserve.importers import build_parser, importer_modules

ROOT = Path(__file__).resolve().parents[2]
# each family's importers and the subcommands they register
EXPECTED = {
    "detection": {"detection-onnx", "coco-default", "detection-pt"},
    "text": {"text-hf", "text-onnx", "text-sklearn"},
    "forecast": {"forecast-onnx"},
    "pose": {"pose-pt", "pose-onnx", "pose-default"},
    "segmentation": {"segmentation-onnx", "segmentation-pt", "plates-default"},
    "classification": {"classification-onnx", "classification-pt"},
}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_family_importer_is_a_subcommand():
    assert set(families.names()) == set(EXPECTED)
    assert set(_subcommands(build_parser())) == set().union(*EXPECTED.values())
    for name in families.names():  # each family's subcommands come from its own importer modules
        modules = importlib.import_module(f"{families.registered()[name]}.importers").IMPORTERS
        assert modules and all(m.startswith(f"{families.registered()[name]}.importers.") for m in modules), modules
        ap = argparse.ArgumentParser()
        sub = ap.add_subparsers()
        for module in modules:
            importlib.import_module(module).add_parser(sub)
        assert set(sub.choices) == EXPECTED[name], name
    assert importer_modules() == [m for name in families.names() for m in
                                  importlib.import_module(f"{families.registered()[name]}.importers").IMPORTERS]


def test_the_cli_needs_no_export_extra():
    """Building the parser (--help) imports every importer module: none may pull torch, ultralytics, transformers,
    onnx or scikit-learn (the serving-only environment of an installed wheel runs `triserve import --help`), nor
    anything of scripts/ (a checkout tool)."""
    probe = ("import sys\n"
             "from triserve.importers import build_parser\n"
             "build_parser()\n"
             "heavy = ('torch', 'ultralytics', 'transformers', 'sentence_transformers', 'onnx', 'sklearn',\n"
             "         'onnxruntime.quantization', 'scripts')\n"
             "print([m for m in heavy if m in sys.modules])\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout
