"""The product's import layers (pyproject.toml [tool.importlinter], ARCHITECTURE.md), checked as `make lint` does.

import-linter fails on an upward import that is not listed, and on a listed one that no longer exists; this test also
caps the list of known upward imports (the debt) so that it can only shrink.
"""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
KNOWN_DEBT = 0  # ignore_imports entries of the layers contract: none left; the list may not grow back


def test_layers_hold():
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in done.stdout, done.stdout[-2000:]


def test_known_upward_imports_only_shrink():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["id"] == "layers")
    assert len(layers["ignore_imports"]) <= KNOWN_DEBT, layers["ignore_imports"]
    # nothing below the families imports them: the registry is discovery by name in configs/families.py
    below = [i for i in layers["ignore_imports"] if i.startswith(("kernel", "models", "observability", "configs"))]
    assert below == [], below


def test_nothing_below_the_families_imports_upward():
    """Read from the code (not from the contract): no module of kernel/ names the families package (nor a family
    folder), services/ or runners/; no module of models/, observability/ or configs/ names the families package."""
    above = {"kernel": ("families", "services", "runners", "triserve", "scripts"),
             "models": ("families", "kernel", "services", "runners", "triserve", "scripts"),
             "observability": ("families", "kernel", "services", "runners", "triserve", "scripts"),
             "configs": ("families", "kernel", "models", "observability", "services", "runners", "triserve",
                         "scripts")}
    offenders = []
    for package, forbidden in above.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                text = line.strip()
                if any(text == f"import {p}" or text.startswith((f"import {p}.", f"import {p} ", f"from {p}.",
                                                                 f"from {p} ")) for p in forbidden):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {text}")
    assert not offenders, offenders
