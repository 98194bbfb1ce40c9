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
    top = ("triserve.cli", "triserve.importers", "triserve.rollout")  # the distribution's own commands
    above = {"kernel": ("triserve.families", "triserve.services", "triserve.runners", *top, "scripts"),
             "models": ("triserve.families", "triserve.kernel", "triserve.services", "triserve.runners", *top,
                        "scripts"),
             "observability": ("triserve.families", "triserve.kernel", "triserve.services", "triserve.runners", *top,
                               "scripts"),
             "configs": ("triserve.families", "triserve.kernel", "triserve.models", "triserve.observability",
                         "triserve.services", "triserve.runners", *top, "scripts")}
    offenders = []
    for package, forbidden in above.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for number, module in _imports(path):
                if any(module == p or module.startswith(p + ".") for p in forbidden):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {module}")
    assert not offenders, offenders


WEB_FRAMEWORKS = ("starlette", "fastapi", "bentoml", "_bentoml_impl", "uvicorn", "grpc")


def test_the_kernel_and_the_families_know_no_web_framework():
    """A request's lifecycle, its protection and a family's hooks are the same for REST, typed gRPC and OIP: the HTTP
    edge (services/http_edge.py, http_errors.py) and the servicers translate; nothing in kernel/ or families/ (nor
    below: models/, configs/) imports Starlette, FastAPI, BentoML, uvicorn or gRPC."""
    offenders = []
    for package in ("kernel", "families", "models", "configs"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                text = line.strip()
                if any(text.startswith((f"import {p}", f"from {p}.", f"from {p} ")) for p in WEB_FRAMEWORKS):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {text}")
    assert not offenders, offenders


PRODUCT = ("triserve",)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative): each is an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_product_has_no_import_circle():
    """The import graph of the product (every module, imports under TYPE_CHECKING included: a circle of annotations
    is still two modules that cannot be understood apart) has no circle, inside a layer included."""
    import grimp

    graph = grimp.build_graph(*PRODUCT, exclude_type_checking_imports=False)
    edges = {m: {d for d in graph.find_modules_directly_imported_by(m) if d.split(".")[0] in PRODUCT}
             for m in graph.modules}
    assert cycles(edges) == []


# The shared bases of families/: libraries a family stands on, not families (configs/families.py lists none of them).
FAMILY_BASES = ("vision",)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every absolute import of a file; `from triserve import families` names triserve.families."""
    import ast

    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out += [(node.lineno, node.module)]
            if node.module == "triserve":
                out += [(node.lineno, f"triserve.{a.name}") for a in node.names]
    return out


def _family_imports(path: Path) -> list[tuple[int, str]]:
    return [(line, n) for line, n in _imports(path) if n.startswith("triserve.families.")]


def test_no_family_imports_another_family():
    """Read from the code: a family's modules (its importers aside: tests/families/test_importer_boundaries.py lets
    those reuse the families their BUILDS_ON names) import their own folder and the shared bases (families/vision/:
    decoding, letterbox, capped NMS, the image families' limits, manifest, schemas, runtime and hooks), never another
    family; a base imports no family."""
    offenders = []
    for folder in sorted(p for p in (ROOT / "families").iterdir() if (p / "__init__.py").is_file()):
        allowed = {folder.name} if folder.name in FAMILY_BASES else {folder.name, *FAMILY_BASES}
        for path in sorted(folder.rglob("*.py")):
            if "importers" in path.relative_to(folder).parts:
                continue
            for line, module in _family_imports(path):
                if module.split(".")[2] not in allowed:
                    offenders.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    assert not offenders, offenders


def test_the_image_families_stand_on_the_vision_base():
    """The bar it keeps: detection, pose, segmentation and classification each import triserve.families.vision (one
    decoding, one letterbox, one set of runtime feeds/warm-up sizes), and the base's runtime is theirs."""
    from triserve import families

    for name in ("detection", "pose", "segmentation", "classification"):
        modules = {m for p in (ROOT / "families" / name).glob("*.py") for _, m in _family_imports(p)}
        assert any(m.startswith("triserve.families.vision.") for m in modules), name
        assert families.runtime(name).warmup_sizes.__module__ == "triserve.families.vision.runtime", name
    assert {families.runtime(n).feeds.__module__ for n in ("detection", "pose", "segmentation")} == {
        "triserve.families.vision.runtime"}


FOLDERS = ("kernel", "services", "families", "observability", "runners", "models", "configs", "batch")


def test_every_import_uses_the_one_name():
    """The product imports as `triserve.<folder>` (what the wheel installs): an import of a folder's bare name
    (`from services.gateway import ...`) would load a second copy of the module from a checkout and fail from the
    wheel. Read from every Python file of the repository (client/ is its own distribution)."""
    tracked = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=ROOT, capture_output=True,
                             text=True, check=True, timeout=60).stdout.split()
    offenders = [f"{name}:{line}: {module}" for name in tracked if not name.startswith(("client/", "triserve/"))
                 or name.count("/") == 1
                 for line, module in _imports(ROOT / name) if module.split(".")[0] in FOLDERS]
    assert not offenders, offenders
