"""custom_modules: a user's layer code visible where a pickle looks for it (`__main__`, or the module name the pickle
recorded) for the duration of the context, and nothing left behind; missing_globals: what a checkpoint's pickle
needs that is not here, read without unpickling."""
from __future__ import annotations

import pickle
import sys
import zipfile
from pathlib import Path

import pytest

from triserve.models.importing.custom_modules import (
    custom_modules,
    describe_missing,
    missing_globals,
    parse_spec,
    pickled_globals,
)
from triserve.models.importing.result import ImportRefused

LAYERS = '''
import json  # an imported module: not exported
from collections import OrderedDict  # an imported class: not exported

class Block:
    def __init__(self, width):
        self.width = width

def scale(x):
    return 2 * x

class _Private:
    pass
'''


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def pickled_as(module_name: str, source: Path, obj_args=(3,), protocol: int = 2) -> bytes:
    """A Block pickled as `module_name`.Block, the way a training script's own class is (then forgotten)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_train_script", source)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cls = mod.Block
    cls.__module__ = module_name
    parts = module_name.split(".")
    created = [".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) not in sys.modules]
    for name in created:
        sys.modules[name] = type(sys)(name)
    holder = sys.modules[module_name]
    holder.Block = cls
    try:
        return pickle.dumps(cls(*obj_args), protocol=protocol)
    finally:
        del holder.Block
        for name in created:
            del sys.modules[name]


@pytest.fixture
def layers(tmp_path) -> Path:
    return write(tmp_path / "train" / "layers.py", LAYERS)


def _custom_left() -> list[str]:
    return [m for m in sys.modules if m.startswith("triserve_custom_") or m.split(".")[0] == "mytrain"]


def test_a_main_class_loads_only_inside_the_context(layers):
    blob = pickled_as("__main__", layers)
    main = sys.modules["__main__"]
    with pytest.raises(AttributeError, match="Can't get attribute 'Block'"):
        pickle.loads(blob)
    with custom_modules([str(layers)]) as loaded:
        obj = pickle.loads(blob)
        assert type(obj).__name__ == "Block" and obj.width == 3
        assert main.scale(2) == 4  # functions too
        assert sorted(loaded[0].exported) == ["Block", "scale"]  # not the imports, not the private class
        assert not hasattr(main, "_Private")
        assert loaded[0].file == str(layers) and len(loaded[0].sha256 or "") == 64
        assert str(layers.parent) in sys.path
    assert not hasattr(main, "Block") and not hasattr(main, "scale")
    assert _custom_left() == [] and str(layers.parent) not in sys.path
    with pytest.raises(AttributeError):
        pickle.loads(blob)


def test_previous_main_attributes_come_back(layers):
    main = sys.modules["__main__"]
    sentinel = object()
    main.Block = sentinel
    try:
        with custom_modules([str(layers)]):
            assert main.Block is not sentinel
        assert main.Block is sentinel
    finally:
        del main.Block


def test_the_pickled_module_name_is_registered_when_asked(layers):
    blob = pickled_as("mytrain.layers", layers)
    with pytest.raises(ModuleNotFoundError, match="mytrain"):
        pickle.loads(blob)
    with custom_modules([f"mytrain.layers={layers}"]) as loaded:
        obj = pickle.loads(blob)
        assert type(obj).__module__ == "mytrain.layers" and obj.width == 3
        assert sys.modules["mytrain"].layers is sys.modules["mytrain.layers"]
        assert loaded[0].alias == "mytrain.layers"
        assert pickle.loads(pickle.dumps(obj)).width == 3  # re-pickled under the same name, and read back
    assert _custom_left() == []


def test_an_importable_module_by_name(tmp_path, monkeypatch):
    write(tmp_path / "pkgx" / "__init__.py", "")
    write(tmp_path / "pkgx" / "blocks.py", "__all__ = ['Gate']\nclass Gate:\n    pass\nclass Other:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    main = sys.modules["__main__"]
    with custom_modules(["pkgx.blocks", "renamed.blocks=pkgx.blocks"]) as loaded:
        assert main.Gate is sys.modules["pkgx.blocks"].Gate and not hasattr(main, "Other")  # __all__ decides
        assert sys.modules["renamed.blocks"] is sys.modules["pkgx.blocks"]
        assert [c.exported for c in loaded] == [["Gate"], ["Gate"]]  # the same object twice is no conflict
    assert not hasattr(main, "Gate") and "renamed.blocks" not in sys.modules and "renamed" not in sys.modules
    assert "pkgx.blocks" in sys.modules  # an ordinary import stays imported


@pytest.mark.parametrize("spec, match", [
    ("{tmp}/nope.py", "no such file"),
    ("{tmp}/broken.py", "broken.py failed to import: SyntaxError"),
    ("not a module!", "neither a .py file nor a module name"),
    ("no_such_module_xyz", "cannot import no_such_module_xyz"),
    ("9bad={tmp}/ok.py", "not a module name"),
    ("=", "no module or file given"),
    ("{tmp}/bad_all.py", r"__all__ names what it does not define: Missing"),
])
def test_bad_specs_are_refused_with_the_spec_named(tmp_path, spec, match):
    write(tmp_path / "broken.py", "class X(:\n")
    write(tmp_path / "ok.py", "class Fine:\n    pass\n")
    write(tmp_path / "bad_all.py", "__all__ = ['Missing']\n")
    with pytest.raises(ImportRefused, match=match), custom_modules([spec.format(tmp=tmp_path)]):
        pass


def test_a_name_from_two_specs_is_refused_and_nothing_is_left(tmp_path, layers):
    other = write(tmp_path / "other.py", "class Block:\n    pass\n")
    with pytest.raises(ImportRefused, match="'Block' is defined by both"), custom_modules([str(layers), str(other)]):
        pass
    assert not hasattr(sys.modules["__main__"], "Block") and _custom_left() == []


def test_parse_spec():
    assert parse_spec("layers.py") == (None, "layers.py")
    assert parse_spec("__main__=layers.py") == (None, "layers.py")
    assert parse_spec(" a.b = c/d.py ") == ("a.b", "c/d.py")


def _archive(path: Path, blob: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as z:  # laid out as torch.save lays it out
        z.writestr("archive/data.pkl", blob)
        z.writestr("archive/version", "3\n")
    return path


@pytest.mark.parametrize("protocol", [2, 4])  # GLOBAL (torch.save's protocol 2) and STACK_GLOBAL (memoized strings)
def test_missing_globals_names_what_a_checkpoint_needs(tmp_path, layers, protocol):
    blob = pickled_as("__main__", layers, protocol=protocol)
    blob2 = pickled_as("mytrain.layers", layers, protocol=protocol)
    main_ckpt = _archive(tmp_path / "main.pt", blob)
    pkg_ckpt = _archive(tmp_path / "pkg.pt", blob2)
    assert ("__main__", "Block") in pickled_globals(main_ckpt)
    assert missing_globals(main_ckpt) == {"__main__": ["Block"]}
    assert missing_globals(pkg_ckpt) == {"mytrain.layers": ["Block"]}
    assert missing_globals(pkg_ckpt, ignore_packages=("mytrain",)) == {}
    with custom_modules([str(layers)]):
        assert missing_globals(main_ckpt) == {}
    with custom_modules([f"mytrain.layers={layers}"]):
        assert missing_globals(pkg_ckpt) == {}
    text = describe_missing({"__main__": ["Block"], "mytrain.layers": ["Block"]})
    assert "__main__.Block" in text and "--custom-modules FILE.py" in text
    assert "--custom-modules mytrain.layers=FILE.py" in text


def test_pickled_globals_of_a_file_that_is_not_an_archive(tmp_path):
    assert pickled_globals(write(tmp_path / "x.pt", "not a zip")) == set()
