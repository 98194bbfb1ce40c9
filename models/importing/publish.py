"""The last mile of every import, and what every importer's CLI shares.

publish() puts the staged artifacts the registry does not hold yet into it and moves an alias; staged_publish() is
the one staged publish every importer runs (build in a scratch folder, publish, alias, clean up); import_and_publish()
refuses an existing version before any work, then runs it; a default build asks already_published() first.
run_cli() answers JSON on stdout and turns a refusal into exit status 2 with the reason logged.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from triserve.models.importing.licenses import add_license_option
from triserve.models.importing.result import Artifact, GateFailed, ImportResult
from triserve.models.manifest import Manifest

log = logging.getLogger("triserve.importer")

BY = "triserve import"  # who moved an alias, as the registry's alias log records it


def default_registry() -> Path:
    """The local registry an import publishes into: $TRISERVE_REGISTRY_DIR, else the settings' default (the
    checkout's models/store; ~/.triserve/models for an installed wheel)."""
    from triserve.configs.settings import registry_root

    return Path(os.environ.get("TRISERVE_REGISTRY_DIR") or registry_root())


def default_cache() -> Path:
    """Where importers keep downloaded wheels, extracted photos and ultralytics' config: <state root>/.cache/importer
    (the checkout, or ~/.triserve for an installed wheel)."""
    from triserve.configs.settings import state_root

    return state_root() / ".cache" / "importer"


def publish(registry, result: ImportResult, alias: str | None = None, by: str = BY) -> list[Manifest]:
    """Publish the staged artifacts that the registry does not hold yet, then move `alias` on each."""
    out = []
    for art in result.artifacts:
        m = art.manifest
        if not registry.has(m.name, m.version):
            out.append(registry.publish(art.staging, m))
    if alias:
        for art in result.artifacts:
            m = art.manifest
            if registry.aliases(m.name).get(alias) != m.version:
                registry.set_alias(m.name, alias, m.version, by=by)
    return out


def refuse_existing(registry, name: str, version: str) -> None:
    """Versions are immutable: an existing name:version is refused before any work."""
    from triserve.models.registry import VersionExists

    if registry.has(name, version):
        raise VersionExists(f"{name}:{version} already exists; versions are immutable")


@contextlib.contextmanager
def scratch(importer: str) -> Iterator[Path]:
    """The scratch folder one import builds in (triserve-<importer>-*), removed however the import ends."""
    work = Path(tempfile.mkdtemp(prefix=f"triserve-{importer}-"))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def staged_publish(registry, importer: str, build: Callable[[Path], ImportResult],
                   alias: str | None = None) -> tuple[list[Manifest], dict]:
    """Build in a scratch folder (build(work) -> ImportResult), publish what the registry lacks, move `alias`;
    (published manifests, report). The alias log names `triserve import <importer>`; a refusal publishes nothing."""
    with scratch(importer) as work:
        result = build(work)
        return publish(registry, result, alias, by=f"{BY} {importer}"), result.report


def import_and_publish(registry, name: str, version: str, alias: str | None, importer: str,
                       build: Callable[[Path], ImportResult],
                       fallback_name: str | None = None) -> tuple[list[Manifest], dict]:
    """A user's import: an existing name:version (the fallback's too) is refused before any work, then
    staged_publish. Nothing is published on refusal; the scratch folder is always removed."""
    for n in [name] + ([fallback_name] if fallback_name else []):
        refuse_existing(registry, n, version)
    return staged_publish(registry, importer, build, alias)


def import_one_and_publish(registry, name: str, version: str, alias: str | None, importer: str,
                           build: Callable[[Path], tuple[Artifact, dict]]) -> tuple[Manifest, dict]:
    """import_and_publish for an importer that stages one artifact (build(work) -> (artifact, report)); (the
    published manifest, report)."""
    def staged(work: Path) -> ImportResult:
        artifact, report = build(work)
        return ImportResult(artifact, None, report)

    published, report = import_and_publish(registry, name, version, alias, importer, staged)
    return published[0], report


def already_published(registry, names: Sequence[str], version: str) -> bool:
    """A default build's short cut: every name already holds this version (logged), so there is nothing to do."""
    if not all(registry.has(n, version) for n in names):
        return False
    log.info("%s %s %s already in %s: nothing to do", " and ".join(names), version,
             "are" if len(names) > 1 else "is", registry.root)
    return True


def quiet_stdout():
    """stdout is the command's JSON answer: ultralytics' console output (its logger binds stdout at import) goes to
    stderr while the work runs."""
    return contextlib.redirect_stdout(sys.stderr)


def print_result(published: list[Manifest], report: dict | None = None) -> None:
    out = [{"name": m.name, "version": m.version, "variant": m.variant, "inputs": [i.model_dump() for i in m.inputs],
            "gates": m.gates, "metrics": {k: round(v, 4) for k, v in m.metrics.items()}} for m in published]
    print(json.dumps({"published": out, **({"report": report} if report else {})}, indent=2, default=str))


def print_default_build(published: list[Manifest], aliases: dict | None = None) -> None:
    """A default build's answer: what it published, else a note that the registry already holds it (and the
    aliases, when given)."""
    if published:
        print_result(published)
    else:
        print(json.dumps({"published": [], "note": "already in the registry",
                          **({"aliases": aliases} if aliases is not None else {})}, indent=2))


def run_cli(fn: Callable[[], Any], answer: Callable[[Any], None] | None = None,
            refused: tuple[type[Exception], ...] = ()) -> int:
    """Run an import with stdout kept for its JSON answer: `answer(fn())` (default: print_result of (published,
    report)) and 0; refusals (GateFailed, RegistryError, and `refused`) exit 2 with the reason logged."""
    from triserve.models.registry import RegistryError

    caught: tuple[type[Exception], ...] = (GateFailed, RegistryError, *refused)
    try:
        with quiet_stdout():
            out = fn()
    except caught as exc:
        log.error("nothing published: %s", exc)
        return 2
    if answer is None:
        print_result(*out)
    else:
        answer(out)
    return 0


def importer_parser(subparsers, command: str, help: str, doc: str | None, source: tuple[str, str] | None = None,
                    name_help: str = "registry model name",
                    version_help: str = "immutable version") -> argparse.ArgumentParser:
    """`triserve import <command>` with its help and its module docstring as the description; with `source` (flag,
    help) it first takes that file, then --name and --version, as the user importers do; --registry, as every
    importer takes it."""
    p = subparsers.add_parser(command, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if source is not None:
        p.add_argument(source[0], type=Path, required=True, help=source[1])
        p.add_argument("--name", required=True, help=name_help)
        p.add_argument("--version", required=True, help=version_help)
    add_registry_option(p)
    return p


def add_import_options(p, func: Callable[[Any], int], *, fallback: bool = False, verify: bool = False) -> None:
    """The options the user image importers share after their own, in one order with one meaning: --alias,
    --fallback-name (with `fallback`), --images, --cache, --no-verify (with `verify`), --license; `func` runs it."""
    p.add_argument("--alias", default=None, help="also point this alias at the new version")
    if fallback:
        p.add_argument("--fallback-name", default=None, help="also build, gate and publish an INT8 sibling")
    p.add_argument("--images", type=Path, default=None,
                   help="photos of the model's own domain for the checks (default: the package photos)")
    p.add_argument("--cache", type=Path, default=default_cache(), help="wheel and photo cache")
    if verify:
        p.add_argument("--no-verify", action="store_true", help="skip the ultralytics cross-check (recorded as absent)")
    add_license_option(p)
    p.set_defaults(func=func)


def default_build_parser(subparsers, command: str, help: str, doc: str | None, name: str, fallback_name: str,
                         func: Callable[[Any], int]) -> argparse.ArgumentParser:
    """`triserve import <command>` for a default build (a package's model and its INT8 sibling): --registry, --cache,
    --name and --fallback-name."""
    p = importer_parser(subparsers, command, help, doc)
    p.add_argument("--cache", type=Path, default=default_cache(), help="wheel and photo cache")
    p.add_argument("--name", default=name, help="registry model name")
    p.add_argument("--fallback-name", default=fallback_name, help="registry name of the INT8 sibling")
    p.set_defaults(func=func)
    return p


def run_default_build(fn: Callable[[], list[Manifest]], aliases: Callable[[], dict] | None = None,
                      refused: tuple[type[Exception], ...] = ()) -> int:
    """run_cli for a default build: answers print_default_build (with `aliases()` when given)."""
    return run_cli(fn, lambda published: print_default_build(published, aliases() if aliases else None), refused)


def add_registry_option(p) -> None:
    """--registry, as every importer takes it."""
    p.add_argument("--registry", type=Path, default=default_registry(),
                   help="registry root (default: $TRISERVE_REGISTRY_DIR, else the local registry the server serves: "
                        "the checkout's models/store, ~/.triserve/models for an installed wheel)")
