"""The family registry (configs/families.py): built-ins, unknown names, lazy loading by name, entry-point discovery."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import triserve.configs.families as registry
from triserve import families
from triserve.families.detection.manifest import DetectionPreprocess

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Install fake distributions (dist-info + package) on sys.path; the registry reads them afresh, then forgets."""
    monkeypatch.syspath_prepend(str(tmp_path))
    packages: list[str] = []

    def install(dist: str, entry_points: dict[str, str], package: str | None = None) -> None:
        info = tmp_path / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
        (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n{lines}")
        if package is not None:
            folder = tmp_path / package
            folder.mkdir()
            (folder / "__init__.py").write_text("")
            (folder / "limits.py").write_text("from pydantic import BaseModel\n\n\nclass Limits(BaseModel):\n"
                                              "    max_items: int = 4\n")
            (folder / "runtime.py").write_text("RAGGED = False\n")
            packages.append(package)
        importlib.invalidate_caches()
        registry.rediscover()

    yield install
    registry.rediscover()
    for name in [m for m in sys.modules if m.split(".")[0] in packages]:
        del sys.modules[name]


def test_builtin_families_come_first():
    builtin = tuple(registry.FAMILIES)
    assert builtin[:3] == ("detection", "text", "forecast") and {"pose", "segmentation"} <= set(builtin)
    assert registry.names()[:len(builtin)] == builtin
    assert families.names() == registry.names()  # the families package re-exports the registry


def test_registered_is_a_copy():
    table = registry.registered()
    table["nope"] = "nowhere"
    assert "nope" not in registry.names()


@pytest.mark.parametrize("loader", [registry.limits_model, registry.preprocess_model, registry.runtime,
                                    registry.family, families.family])
def test_unknown_family_names_the_known_ones(loader):
    with pytest.raises(KeyError, match=r"unknown model family 'sentiment'; known: detection, text, forecast"):
        loader("sentiment")


def test_loaders_return_the_family_modules_by_name():
    from triserve.families.forecast import runtime as forecast_runtime
    from triserve.families.text.family import FAMILY as TEXT
    from triserve.families.text.limits import Limits as TextLimits

    assert registry.limits_model("text") is TextLimits
    assert registry.preprocess_model("detection") is DetectionPreprocess
    assert registry.runtime("forecast") is forecast_runtime
    assert registry.family("text") is TEXT is families.family("text")


@pytest.mark.parametrize("module", ["triserve.configs.families", "triserve.configs.settings",
                                    "triserve.configs.deployments"])
def test_the_bottom_layer_loads_no_family_at_import(module):
    """Discovery is by name: importing the registry (or the configs that use it) imports no family module."""
    code = (f"import sys, {module}; loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'families'); "
            "assert not loaded, loaded")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_entry_point_families_are_discovered_after_the_builtins(installed):
    installed("acme-triserve", {"zeta": "acme_zeta", "acme": "acme_family"}, package="acme_family")
    assert registry.names() == (*registry.FAMILIES, "acme", "zeta")
    assert registry.registered()["acme"] == "acme_family"
    limits = registry.limits_model("acme")
    assert limits.__module__ == "acme_family.limits" and limits().model_dump() == {"max_items": 4}
    assert registry.runtime("acme").RAGGED is False


def test_a_builtin_name_claimed_by_a_distribution_is_refused(installed):
    installed("acme-triserve", {"text": "acme_text"})
    with pytest.raises(ValueError,
    match=r"'text' is claimed twice: by a built-in family \(triserve.families.text\) and by "
                                         r"distribution acme-triserve 1.0 \(acme_text\)"):
        registry.names()


def test_a_name_claimed_by_two_distributions_is_refused(installed):
    installed("acme-one", {"sentiment": "acme_one"})
    installed("acme-two", {"sentiment": "acme_two"})
    with pytest.raises(ValueError, match=r"'sentiment' is claimed twice: by another distribution"):
        registry.names()


def test_an_entry_point_must_name_a_package(installed):
    installed("acme-triserve", {"acme": "acme_family:FAMILY"})
    with pytest.raises(ValueError, match=r"must name the family's package"):
        registry.names()
