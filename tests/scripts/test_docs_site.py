"""The documentation site (mkdocs.yml, docs/) builds with --strict: no broken link or anchor, every page in the nav
or deliberately out of it (make docs; .ci/run builds it too)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
                    reason="mkdocs-material is not installed (the dev extra: make install)")
def test_site_builds_strict(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(site)], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    for page in ("index.html", "quickstart/index.html", "families/detection/index.html",
                 "reference/configuration/index.html", "benchmarks/index.html", "layers/index.html"):
        assert (site / page).is_file(), page
    assert (site / "assets" / "architecture.svg").is_file()
    assert "TRISERVE_RUNNER__WORKERS" in (site / "reference" / "configuration" / "index.html").read_text()
    # ARCHITECTURE.md is included, not copied (pymdownx.snippets)
    assert "How to add a family" in (site / "layers" / "index.html").read_text()


def test_make_docs_and_ci_build_it_strict():
    import re

    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^docs: .*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe and "scripts.docs_reference --check" in recipe.group(1), "make docs checks the generated pages"
    assert re.search(r"-m mkdocs build --strict", recipe.group(1)), "make docs builds with --strict"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert [line.split()[:2] for line in ci if line.startswith("make ")] == [
        ["make", "lint"], ["make", "docs"], ["make", "test"]]
