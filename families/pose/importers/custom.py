"""`--custom-modules MODULE_OR_FILE`: user code a checkpoint's pickled classes need, imported while it loads.

The detection family's importer gains the same flag through models.importing.custom_modules (a context manager
`custom_modules(specs)`); until that module is present, the flag is refused with that reason rather than ignored.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
from collections.abc import Iterator, Sequence

from models.importing.result import ImportRefused

PROVIDER = "models.importing.custom_modules"


def available() -> bool:
    return importlib.util.find_spec(PROVIDER) is not None


@contextlib.contextmanager
def loaded(specs: Sequence[str] | None) -> Iterator[None]:
    """The user's modules importable (and imported) for the duration; a no-op without specs."""
    if not specs:
        yield
        return
    if not available():
        raise ImportRefused(f"--custom-modules {list(specs)}: this installation has no {PROVIDER} (the shared "
                            f"custom-module loader); import the checkpoint without custom modules")
    provider = importlib.import_module(PROVIDER)
    with provider.custom_modules(list(specs)):
        yield
