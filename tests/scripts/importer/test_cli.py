"""The importer CLI offers every importer the model families declare (families/<family>/family.py: importers)."""
from __future__ import annotations

import argparse

import families
from scripts.importer.__main__ import build_parser


def test_every_family_importer_is_a_subcommand():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    declared = {name for fam in families.names() for name in families.family(fam).importers}
    assert declared and declared <= set(sub.choices), sorted(declared - set(sub.choices))
