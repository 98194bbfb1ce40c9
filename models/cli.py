"""Registry CLI: inspect, publish, copy between stores, promote, roll back and pull models.

    python -m triserve.models.cli list
    python -m triserve.models.cli show minilm-intent:stable
    python -m triserve.models.cli publish STAGING_DIR --manifest manifest.json [--alias stable]
    python -m triserve.models.cli copy --all --aliases --from models/store --to oci://127.0.0.1:5000/triserve
    python -m triserve.models.cli copy yolo-shapes:stable --from models/store --to s3://bucket/triserve
    python -m triserve.models.cli promote minilm-intent 1.0.1-abcdef12 --alias stable --by alice
    python -m triserve.models.cli rollback minilm-intent --alias stable
    python -m triserve.models.cli pull minilm-intent:stable --cache .cache/models

--registry URI (default: $TRISERVE_REGISTRY_URI, else $TRISERVE_REGISTRY_DIR, else models/store) picks the store:
a path or file://, oci://host:port/prefix, http(s):// (read-only), s3://bucket/prefix. Transfers draw tqdm bars.
Exit codes: 0 ok, 1 registry error, 3 integrity failure (tampered artifact), 4 registry unreachable / not ready.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from triserve.models.manifest import Manifest
from triserve.models.registry import IntegrityError, RegistryError
from triserve.models.stores import RegistryStore, RegistryUnavailable, VersionExists, open_store


def default_registry() -> str:
    """The registry the server would serve: TRISERVE_REGISTRY_URI, TRISERVE_REGISTRY_DIR, else the settings' default
    local registry (the checkout's models/store; ~/.triserve/models for an installed wheel)."""
    from triserve.configs.settings import registry_root

    return (os.environ.get("TRISERVE_REGISTRY_URI") or os.environ.get("TRISERVE_REGISTRY_DIR")
            or str(registry_root()))


def split_ref(spec: str, default: str = "stable") -> tuple[str, str]:
    name, _, ref = spec.partition(":")
    return name, ref or default


def previous_target(log: list[dict], alias: str, current: str) -> str | None:
    """Where a rollback of `alias` (now at `current`) goes: the target before the current one in the alias's
    promotion history. The log is replayed as a stack: a move to the target just below the top is a step back
    (a rollback or a manual revert) and pops; any other move pushes. So A -> B -> C rolls back to B, then to A,
    never forward again to a target that was rolled away from."""
    stack: list[str] = []
    for entry in log:
        if entry.get("alias") != alias:
            continue
        if not stack and entry.get("from"):
            stack.append(entry["from"])  # the log starts after the alias was first set
        if len(stack) >= 2 and entry.get("to") == stack[-2]:
            stack.pop()
        elif not stack or stack[-1] != entry.get("to"):
            stack.append(entry["to"])
    if stack and stack[-1] == current:
        return stack[-2] if len(stack) >= 2 else None
    for entry in reversed(log):  # the log disagrees with the alias (edited by hand): the latest move into it
        if entry.get("alias") == alias and entry.get("to") == current:
            return entry.get("from")
    return None


# -- commands ------------------------------------------------------------------------------------------------------
def cmd_list(store: RegistryStore, args) -> None:
    rows = []
    for name in store.models():
        versions = store.versions(name)
        aliases = store.aliases(name)
        rows.append((name, str(len(versions)), versions[-1] if versions else "-",
                     store.manifest(name, versions[-1]).source.license if versions else "-",
                     ", ".join(f"{a}={v}" for a, v in sorted(aliases.items())) or "-"))
    if not rows:
        print(f"(no models in {store.uri})")
        return
    header = ("model", "versions", "latest", "license (latest)", "aliases")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    for row in [header] + rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def cmd_show(store: RegistryStore, args) -> None:
    name, ref = split_ref(args.model)
    version = store.resolve(name, ref)
    manifest = store.manifest(name, version)
    if args.json:
        print(manifest.dumps())
        return
    aliases = [a for a, v in sorted(store.aliases(name).items()) if v == version]
    print(f"{name}:{version}" + (f"  (aliases: {', '.join(aliases)})" if aliases else ""))
    print(f"  store      {store.uri}")
    print(f"  task       {manifest.task} / {manifest.variant}"
          + (f" for {manifest.fallback_for}" if manifest.fallback_for else ""))
    print(f"  created    {manifest.created_at.isoformat()}  commit {manifest.git_commit}  "
          f"recipe {manifest.recipe_hash[:12]}")
    print(f"  license    {manifest.source.license}")
    print(f"  source     {manifest.source.kind}: {manifest.source.description}"
          + (f" ({manifest.source.url})" if manifest.source.url else ""))
    print(f"  metrics    {json.dumps(manifest.metrics, sort_keys=True)}")
    print("  files")
    for f in manifest.files:
        print(f"    {f.path:<24} {f.size:>12,d} B  sha256 {f.sha256[:16]}…")
    log = [e for e in store.alias_log(name)][-5:]
    if log:
        print("  alias log (latest 5)")
        for e in log:
            print(f"    {e['when']}  {e['alias']}: {e['from']} -> {e['to']}  by {e['by']}")


def cmd_publish(store: RegistryStore, args) -> None:
    manifest = Manifest.load(args.manifest)
    published = store.publish(Path(args.staging), manifest, progress=not args.quiet)
    print(f"published {published.name}:{published.version} ({len(published.files)} files) to {store.uri}")
    if args.alias:
        store.set_alias(published.name, args.alias, published.version, by=args.by)
        print(f"{published.name}: {args.alias} -> {published.version}")


def copy_version(src: RegistryStore, dst: RegistryStore, name: str, version: str, progress: bool) -> str:
    """Copy one version (pull from src into a temp dir, verified, then publish to dst). Idempotent."""
    if dst.has(name, version):
        if [f.model_dump() for f in dst.manifest(name, version).files] == \
                [f.model_dump() for f in src.manifest(name, version).files]:
            return "present"
        raise VersionExists(f"{name}:{version} exists in {dst.uri} with different files")
    tmp = Path(tempfile.mkdtemp(prefix="triserve-copy-"))
    try:
        manifest = src.pull(name, version, tmp / "v", progress=progress)
        dst.publish(tmp / "v", manifest, progress=progress)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return "copied"


def cmd_copy(store: RegistryStore, args) -> None:
    src = open_store(args.source) if args.source else store
    dst = open_store(args.dest)
    todo: list[tuple[str, str]] = []
    if args.all:
        todo = [(name, v) for name in src.models() for v in src.versions(name)]
    for spec in args.refs:
        name, ref = split_ref(spec)
        todo.append((name, src.resolve(name, ref)))
    if not todo:
        raise RegistryError("nothing to copy: name the versions (NAME:REF ...) or pass --all")
    for name, version in dict.fromkeys(todo):
        started = time.monotonic()
        status = copy_version(src, dst, name, version, progress=not args.quiet)
        print(f"{name}:{version}: {status} ({time.monotonic() - started:.2f}s)")
        if args.aliases:
            for alias, target in sorted(src.aliases(name).items()):
                if target == version and dst.aliases(name).get(alias) != version:
                    dst.set_alias(name, alias, version, by=args.by or f"copy from {src.uri}")
                    print(f"{name}: {alias} -> {version}")


def cmd_promote(store: RegistryStore, args) -> None:
    started = time.perf_counter()
    previous = store.aliases(args.name).get(args.alias)
    store.set_alias(args.name, args.alias, args.version, by=args.by)
    print(f"{args.name}: {args.alias} {previous} -> {args.version} "
          f"({(time.perf_counter() - started) * 1000:.1f} ms)")


def cmd_rollback(store: RegistryStore, args) -> None:
    started = time.perf_counter()
    current = store.aliases(args.name).get(args.alias)
    if current is None:
        raise RegistryError(f"{args.name}: alias {args.alias!r} is not set")
    target = previous_target(store.alias_log(args.name), args.alias, current)
    if target is None:
        raise RegistryError(f"{args.name}: the alias log has no earlier target for {args.alias!r} (now {current})")
    store.set_alias(args.name, args.alias, target, by=args.by or f"rollback by {_user()}")
    print(f"{args.name}: rolled back {args.alias} {current} -> {target} in "
          f"{(time.perf_counter() - started) * 1000:.1f} ms")


def cmd_pull(store: RegistryStore, args) -> None:
    from triserve.models.cache import fetch_verified

    name, ref = split_ref(args.model)
    started = time.monotonic()
    directory, manifest = fetch_verified(store, name, ref, Path(args.cache), retries=args.retries,
                                         backoff=args.backoff, progress=not args.quiet)
    print(f"{name}:{ref} -> {manifest.version}: verified in {directory} ({time.monotonic() - started:.2f}s)")


def _user() -> str:
    from triserve.models.stores.base import whoami

    return whoami()


# -- entry point ---------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m triserve.models.cli", description=__doc__.split("\n\n")[0])
    p.add_argument("--registry", default=None, help="store URI or path (default: $TRISERVE_REGISTRY_URI, "
                                                    "$TRISERVE_REGISTRY_DIR, models/store)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="models, version counts, aliases").set_defaults(fn=cmd_list)

    s = sub.add_parser("show", help="one version's manifest summary and the alias log")
    s.add_argument("model", metavar="NAME[:REF]")
    s.add_argument("--json", action="store_true", help="print the whole manifest.json")
    s.set_defaults(fn=cmd_show)

    s = sub.add_parser("publish", help="publish a staging directory as a new immutable version")
    s.add_argument("staging", metavar="STAGING_DIR")
    s.add_argument("--manifest", required=True, help="manifest JSON (files are hashed and filled in)")
    s.add_argument("--alias", help="also point this alias at the new version")
    s.add_argument("--by", help="who (alias log); default the current user")
    s.set_defaults(fn=cmd_publish)

    s = sub.add_parser("copy", help="copy versions from one store to another (verified; existing ones skipped)")
    s.add_argument("refs", nargs="*", metavar="NAME[:REF]")
    s.add_argument("--from", dest="source", help="source store (default --registry)")
    s.add_argument("--to", dest="dest", required=True, help="destination store")
    s.add_argument("--all", action="store_true", help="every version of every model")
    s.add_argument("--aliases", action="store_true", help="also point the source's aliases at the copies")
    s.add_argument("--by", help="who (alias log)")
    s.set_defaults(fn=cmd_copy)

    s = sub.add_parser("promote", help="point an alias at a version (logged)")
    s.add_argument("name")
    s.add_argument("version")
    s.add_argument("--alias", default="stable")
    s.add_argument("--by", help="who (alias log); default the current user")
    s.set_defaults(fn=cmd_promote)

    s = sub.add_parser("rollback", help="move an alias back to its previous target from the alias log")
    s.add_argument("name")
    s.add_argument("--alias", default="stable")
    s.add_argument("--by", help="who (alias log); default 'rollback by <user>'")
    s.set_defaults(fn=cmd_rollback)

    s = sub.add_parser("pull", help="pull and verify into a local cache (alias recorded for offline use)")
    s.add_argument("model", metavar="NAME[:REF]")
    s.add_argument("--cache", required=True, help="cache directory (local registry layout)")
    s.add_argument("--retries", type=int, default=4)
    s.add_argument("--backoff", type=float, default=0.5, help="first retry delay in seconds, doubled per retry")
    s.set_defaults(fn=cmd_pull)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from triserve.models.cache import NotReady

    store = None
    try:
        store = open_store(args.registry or default_registry())
        args.fn(store, args)
        return 0
    except IntegrityError as exc:
        print(f"integrity error: {exc}", file=sys.stderr)
        return 3
    except (RegistryUnavailable, NotReady) as exc:
        print(f"not ready: {exc}", file=sys.stderr)
        return 4
    except RegistryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if store is not None:
            store.close()


if __name__ == "__main__":
    sys.exit(main())
