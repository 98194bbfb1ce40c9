"""The importers' boundaries, read from the code (import-linter's layers cover models/ below families/, not one family
beside another): a family's importers import triserve.models.importing, their own family, the shared bases
(families/vision/) and kernel, never another family, the transports, the runners, the CLI or scripts/ (checkout
tools); every module imports without the export extra."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from triserve import families

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("triserve.services", "triserve.runners", "triserve.observability", "triserve.cli", "triserve.importers",
             "triserve.rollout", "scripts")
# shared bases of the families (not families): any family's importers may use them
BASES = ("triserve.families.vision",)


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append(node.module)
    return out


def test_family_importers_stay_in_their_family():
    """...or in a family their importers package declares it builds on (`BUILDS_ON`: the pose importers reuse the
    detection family's checkpoint reader, export and INT8 node selection rather than copying them)."""
    import importlib

    offenders = []
    for name in families.names():
        package = families.FAMILIES[name]
        folder = ROOT / Path(*package.split(".")[1:]) / "importers"  # triserve.families.x: families/x/
        assert (folder / "__init__.py").is_file(), folder
        builds_on = tuple(getattr(importlib.import_module(f"{package}.importers"), "BUILDS_ON", ()))
        assert set(builds_on) <= set(families.FAMILIES.values()) - {package}, builds_on
        for path in sorted(folder.glob("*.py")):
            for module in _imports(path):
                own = any(module == p or module.startswith(f"{p}.") for p in (package, *builds_on, *BASES))
                other_family = module.startswith("triserve.families.") and not own
                forbidden = any(module == p or module.startswith(f"{p}.") for p in FORBIDDEN)
                if forbidden or other_family or module == "triserve.families":
                    offenders.append(f"{path.relative_to(ROOT)}: {module}")
    assert not offenders, offenders


def test_every_importer_module_imports_in_the_serving_environment():
    """torch, ultralytics, transformers, onnx, scikit-learn, onnxruntime.quantization are imported inside the
    functions that need them: importing any importer module (and triserve.models.importing) pulls none of them."""
    modules = sorted({".".join(("triserve", *p.relative_to(ROOT).with_suffix("").parts))
                      for p in [*ROOT.glob("families/*/importers/*.py"), *ROOT.glob("models/importing/*.py")]})
    probe = ("import importlib, sys\n"
             f"for m in {modules!r}:\n"
             "    importlib.import_module(m.removesuffix('.__init__'))\n"
             "heavy = ('torch', 'ultralytics', 'transformers', 'sentence_transformers', 'onnx', 'sklearn', 'joblib',\n"
             "         'onnxruntime.quantization', 'matplotlib', 'scripts')\n"
             "print([m for m in heavy if m in sys.modules])\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout
