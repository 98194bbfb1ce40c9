"""The generated parts of the documentation site (scripts/docs_reference.py): docs/reference/configuration.md and the
marked blocks of docs/families/*.md are what the code says now, and the check notices when they are not."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from scripts import docs_reference

ROOT = Path(__file__).resolve().parents[2]


def _copy_docs(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    for rel in (docs_reference.REFERENCE, *(p.relative_to(ROOT / "docs")
                                             for p in (ROOT / "docs" / docs_reference.FAMILY_PAGES).glob("*.md"))):
        (docs / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "docs" / rel, docs / rel)
    return docs


def test_the_committed_reference_is_current():
    done = subprocess.run([sys.executable, "-m", "scripts.docs_reference", "--check"], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr + "\nrun: python -m scripts.docs_reference"


def test_every_setting_limit_and_family_is_in_it():
    import triserve.configs.families
    from triserve.configs.settings import Settings

    page = (ROOT / "docs" / docs_reference.REFERENCE).read_text()
    for name, field in Settings.model_fields.items():
        assert f"`{name}" in page, name
        section = docs_reference._model_of(field.annotation)
        for sub in (section.model_fields if section else ()):
            assert f"`{name}.{sub}`" in page and f"TRISERVE_{name.upper()}__{sub.upper()}" in page, (name, sub)
    for family in triserve.configs.families.names():
        for limit in triserve.configs.families.limits_model(family).model_fields:
            assert f"TRISERVE_LIMITS__{family.upper()}__{limit.upper()}" in page, (family, limit)
        blocks = (ROOT / "docs" / "families" / f"{family}.md").read_text()
        for kind in ("api", "limits", "importers"):
            assert f"<!-- generated: {kind} {family} -->" in blocks, (family, kind)


def test_check_fails_on_a_stale_page_and_passes_once_regenerated(tmp_path, capsys):
    docs = _copy_docs(tmp_path)
    assert docs_reference.main(["--check", "--docs-dir", str(docs)]) == 0
    reference = docs / docs_reference.REFERENCE
    lines = reference.read_text().splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("| `runner.workers`"))
    lines[row] = lines[row].replace("`1`", "`2`")
    reference.write_text("\n".join(lines) + "\n")
    assert docs_reference.main(["--check", "--docs-dir", str(docs)]) == 1
    assert "configuration.md" in capsys.readouterr().err
    assert docs_reference.main(["--docs-dir", str(docs)]) == 0  # regenerate
    assert docs_reference.main(["--check", "--docs-dir", str(docs)]) == 0


def test_check_fails_on_a_stale_family_block(tmp_path):
    docs = _copy_docs(tmp_path)
    page = docs / "families" / "text.md"
    text = page.read_text()
    assert "`TRISERVE_LIMITS__TEXT__MAX_TEXTS`" in text
    page.write_text(text.replace("| `max_texts` | integer | `64`", "| `max_texts` | integer | `32`"))
    assert docs_reference.main(["--check", "--docs-dir", str(docs)]) == 1
    # hand-written text around the blocks is the page's own: only the blocks are rewritten
    page.write_text(page.read_text().replace("# Text classification", "# Text classification, edited"))
    assert docs_reference.main(["--docs-dir", str(docs)]) == 0
    assert page.read_text().startswith("# Text classification, edited")
    assert "| `max_texts` | integer | `64`" in page.read_text()
