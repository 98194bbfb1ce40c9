"""A user's own layer code, made visible where a pickled checkpoint looks for it; and what a pickle needs that is not.

Why: a model trained by a script that defined its own layers (`class C2fX(C2f)` in train.py) is pickled with those
classes as `__main__.C2fX`; loading it anywhere else fails with "Can't get attribute 'C2fX' on <module '__main__'>".
The package that ships such a model injects its layer module into `__main__` before `torch.load`; `custom_modules`
lets a user do the same for an import, and `missing_globals` names what is missing before anything is unpickled.

    with custom_modules(["path/to/layers.py", "mytrain.layers=path/to/layers.py", "mypkg.blocks"]) as loaded:
        torch.load(...)

A spec is `[PICKLED_NAME=]MODULE_OR_FILE`: an importable module name or a path to a .py file; with `PICKLED_NAME=`
the module is also registered in sys.modules under the name the pickle recorded (`mytrain.layers.C2fX` was pickled
by code imported as `mytrain.layers`), with empty parent packages where none exist. Every spec's public classes and
functions (its `__all__`, else those defined in it) are set on `sys.modules['__main__']`. Everything is put back on
exit: `__main__`'s attributes, the sys.modules entries added (a file's module and the aliases) and sys.path. A module
given by name stays imported, as any import does (other code may already hold it).

SECURITY: loading a pickle runs code, and a custom module is code: both run with the importer's rights. Use only
checkpoints and modules from sources you trust.

Not thread-safe by nature (it changes process-wide state): a process-wide lock serialises the contexts.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
import threading
import types
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from triserve.models.importing.result import ImportRefused

_LOCK = threading.RLock()
_ABSENT = object()
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass(frozen=True)
class CustomModule:
    """One loaded spec, as a manifest records it (the code that ran to read the checkpoint)."""

    spec: str
    module: str  # its name in sys.modules during the context
    file: str | None  # the .py file it came from
    sha256: str | None  # of that file
    alias: str | None  # the name the pickle recorded, when given
    exported: list[str] = field(default_factory=list)  # names set on __main__

    def describe(self) -> dict:
        return {"spec": self.spec, "module": self.module, "file": Path(self.file).name if self.file else None,
                "sha256": self.sha256, "alias": self.alias, "exported": list(self.exported)}


def parse_spec(spec: str) -> tuple[str | None, str]:
    """'[PICKLED_NAME=]MODULE_OR_FILE' -> (alias or None, source). `__main__=` is the default, i.e. no alias."""
    alias, sep, source = spec.partition("=")
    if not sep:
        alias, source = "", spec
    alias, source = alias.strip(), source.strip()
    if not source:
        raise ImportRefused(f"--custom-modules {spec!r}: no module or file given")
    if alias and not _NAME.match(alias):
        raise ImportRefused(f"--custom-modules {spec!r}: {alias!r} is not a module name (PICKLED_NAME=FILE_OR_MODULE)")
    return (alias if alias and alias != "__main__" else None), source


def _is_file(source: str) -> bool:
    return source.endswith(".py") or "/" in source or "\\" in source or Path(source).is_file()


def _public(module: types.ModuleType) -> dict[str, object]:
    """Its `__all__`, else the classes and functions defined in it (what a pickle can have recorded as its own)."""
    names = getattr(module, "__all__", None)
    if names is not None:
        absent = [n for n in names if not hasattr(module, n)]
        if absent:
            raise ImportRefused(f"--custom-modules: {module.__name__}.__all__ names what it does not define: "
                                f"{', '.join(absent)}")
        return {n: getattr(module, n) for n in names}
    return {n: v for n, v in vars(module).items()
            if not n.startswith("_") and (inspect.isclass(v) or inspect.isfunction(v))
            and getattr(v, "__module__", None) == module.__name__}


class _Restore:
    """Records every process-wide change so that exit undoes it, last change first."""

    def __init__(self) -> None:
        self.undo: list = []

    def set_module(self, name: str, module: types.ModuleType) -> None:
        previous = sys.modules.get(name)

        def undo() -> None:
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous

        sys.modules[name] = module
        self.undo.append(undo)

    def set_attr(self, owner: object, name: str, value: object) -> None:
        previous = vars(owner).get(name, _ABSENT)
        setattr(owner, name, value)
        self.undo.append(lambda: delattr(owner, name) if previous is _ABSENT else setattr(owner, name, previous))

    def add_path(self, folder: str) -> None:
        if folder not in sys.path:
            sys.path.append(folder)  # appended: the user's folder never shadows an installed module
            self.undo.append(lambda: sys.path.remove(folder) if folder in sys.path else None)

    def run(self) -> None:
        while self.undo:
            self.undo.pop()()


def _register(name: str, module: types.ModuleType, restore: _Restore) -> None:
    """`name` -> module in sys.modules, with empty parent packages where none is importable (pickle imports the
    top-level package of a dotted name before it reads sys.modules) and the module set on its parent."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        if parent not in sys.modules and importlib.util.find_spec(parent) is None:
            package = types.ModuleType(parent)
            package.__path__ = []
            restore.set_module(parent, package)
    restore.set_module(name, module)
    if len(parts) > 1 and ".".join(parts[:-1]) in sys.modules:
        restore.set_attr(sys.modules[".".join(parts[:-1])], parts[-1], module)


def _load_file(path: Path, name: str, restore: _Restore) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportRefused(f"--custom-modules {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    _register(name, module, restore)  # before exec, as an import does: dataclasses and pickling look it up
    restore.add_path(str(path.resolve().parent))  # its own helpers next to it import
    spec.loader.exec_module(module)
    return module


def _load(spec: str, index: int, restore: _Restore) -> tuple[types.ModuleType, CustomModule]:
    alias, source = parse_spec(spec)
    if _is_file(source):
        path = Path(source).expanduser()
        if not path.is_file():
            raise ImportRefused(f"--custom-modules {spec!r}: no such file {path}")
        name = alias or f"triserve_custom_{index}_{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}"
        try:
            module = _load_file(path, name, restore)
        except ImportRefused:
            raise
        except Exception as exc:  # the user's code: any error it raises is a refusal that names the file
            raise ImportRefused(f"--custom-modules {spec!r}: {path.name} failed to import: {type(exc).__name__}: "
                                f"{exc}") from exc
        return module, CustomModule(spec, name, str(path), hashlib.sha256(path.read_bytes()).hexdigest(), alias)
    if not _NAME.match(source):
        raise ImportRefused(f"--custom-modules {spec!r}: {source!r} is neither a .py file nor a module name")
    try:
        module = importlib.import_module(source)
    except Exception as exc:
        raise ImportRefused(f"--custom-modules {spec!r}: cannot import {source}: {type(exc).__name__}: "
                            f"{exc}") from exc
    file = getattr(module, "__file__", None)
    digest = hashlib.sha256(Path(file).read_bytes()).hexdigest() if file and Path(file).is_file() else None
    if alias and alias != source:
        _register(alias, module, restore)
    return module, CustomModule(spec, source, file, digest, alias)


@contextlib.contextmanager
def custom_modules(specs: Sequence[str]) -> Iterator[list[CustomModule]]:
    """Load every spec, expose its public names in `__main__` (and under its alias); undo all of it on exit.

    Two specs exporting different objects under one name are refused: which one a pickle would get would depend on
    their order.
    """
    if not specs:
        yield []
        return
    with _LOCK:
        restore = _Restore()
        try:
            loaded: list[CustomModule] = []
            owner: dict[str, tuple[str, object]] = {}
            for i, spec in enumerate(specs):
                module, record = _load(spec, i, restore)
                public = _public(module)
                for name, value in public.items():
                    if name in owner and owner[name][1] is not value:
                        raise ImportRefused(f"--custom-modules: {name!r} is defined by both {owner[name][0]!r} and "
                                            f"{spec!r}")
                    owner[name] = (spec, value)
                    restore.set_attr(sys.modules["__main__"], name, value)
                loaded.append(dataclasses.replace(record, exported=sorted(public)))
            yield loaded
        finally:
            restore.run()


# -- what a pickle needs ----------------------------------------------------------------------------------------------
def pickled_globals(path: Path) -> set[tuple[str, str]]:
    """(module, qualified name) of every class/function a torch checkpoint's pickle refers to, read with pickletools
    (nothing is unpickled, no code runs). Empty for files that are not torch zip archives."""
    import _compat_pickle
    import pickletools

    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith("data.pkl")]
            data = [archive.read(n) for n in names]
    except (zipfile.BadZipFile, OSError):
        return set()
    found: set[tuple[str, str]] = set()
    for blob in data:
        memo: dict[int, object] = {}
        pushed: list[object] = []  # what the last ops pushed (strings, or None for anything else)
        try:
            for op, arg, _ in pickletools.genops(blob):
                if op.name == "GLOBAL" or op.name == "INST":  # protocols 0-2: Python 2 names, mapped as pickle does
                    module, _, name = str(arg).partition(" ")
                    if (module, name) in _compat_pickle.NAME_MAPPING:
                        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
                    found.add((_compat_pickle.IMPORT_MAPPING.get(module, module), name))
                    pushed.append(None)
                elif op.name == "STACK_GLOBAL":
                    if len(pushed) >= 2 and isinstance(pushed[-2], str) and isinstance(pushed[-1], str):
                        found.add((str(pushed[-2]), str(pushed[-1])))
                    pushed.append(None)
                elif op.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING",
                                 "BINSTRING", "STRING"):
                    pushed.append(arg)
                elif op.name in ("BINGET", "LONG_BINGET", "GET"):
                    pushed.append(memo.get(arg) if isinstance(arg, int) else None)
                elif op.name in ("BINPUT", "LONG_BINPUT", "PUT") and isinstance(arg, int):
                    memo[arg] = pushed[-1] if pushed else None
                elif op.name == "MEMOIZE":
                    memo[len(memo)] = pushed[-1] if pushed else None
                elif op.name not in ("FRAME", "PROTO"):
                    pushed.append(None)
                del pushed[:-4]
        except ValueError:  # a truncated or odd pickle: what was read is what is known
            continue
    return found


def _resolves(module: str, name: str) -> bool:
    target: object = sys.modules.get(module)
    if target is None:
        return True  # not imported yet: the load imports it (or fails with its own message)
    for part in name.split("."):
        target = getattr(target, part, _ABSENT)
        if target is _ABSENT:
            return False
    return True


def missing_globals(path: Path, ignore_packages: Sequence[str] = ()) -> dict[str, list[str]]:
    """{module: [names]} a checkpoint refers to that cannot be found here: classes of `__main__` (a training
    script's own) that `__main__` lacks, and names of modules whose top-level package is not installed (a training
    project's own code). `ignore_packages`: top-level packages another mechanism supplies (stand-ins, renames)."""
    out: dict[str, list[str]] = {}
    for module, name in sorted(pickled_globals(Path(path))):
        top = module.split(".")[0]
        if top in ignore_packages:
            continue
        if module == "__main__":
            missing = not _resolves(module, name)
        else:
            missing = module not in sys.modules and importlib.util.find_spec(top) is None
        if missing:
            out.setdefault(module, []).append(name)
    return out


def describe_missing(missing: dict[str, list[str]]) -> str:
    """A refusal's text: what is missing and the --custom-modules spec that would supply it."""
    parts = []
    for module, names in sorted(missing.items()):
        classes = ", ".join(f"{module}.{n}" for n in names)
        if module == "__main__":
            parts.append(f"{classes} (defined by the training script itself): pass --custom-modules FILE.py (or "
                         f"an importable MODULE) that defines {', '.join(names)}")
        else:
            parts.append(f"{classes} (module {module!r} is not installed): install it, or pass --custom-modules "
                         f"{module}=FILE.py with the file that defines {', '.join(names)}")
    return "; ".join(parts)
