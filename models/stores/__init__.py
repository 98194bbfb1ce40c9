"""Registry stores behind one interface, selected by URI.

    open_store("models/store")                      # a plain path: the local directory layout (LocalRegistry)
    open_store("file:///srv/models")                # same
    open_store("oci://127.0.0.1:5000/triserve")     # OCI artifacts in an OCI registry, one repository per model
    open_store("https://models.example/triserve")   # read-only static HTTP tree with the local layout
    open_store("s3://bucket/prefix")                # S3 via boto3 (?endpoint_url=... or TRISERVE_S3_ENDPOINT_URL)

The interface (RegistryStore): models(), versions(name), aliases(name), resolve(name, ref), manifest(name, version),
pull(name, version, dest_dir, progress=True), publish(staging, manifest), set_alias(name, alias, version, by),
alias_log(name). Versions are immutable (publishing an existing one raises VersionExists), aliases are the only
mutable pointers and every move is logged; pulls verify every file (IntegrityError naming the file); an unreachable
store raises RegistryUnavailable; writes to a read-only store raise ReadOnlyStore.
"""
from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from .base import (
    IntegrityError,
    NotFound,
    ReadOnlyStore,
    RegistryError,
    RegistryStore,
    RegistryUnavailable,
    VersionExists,
)

__all__ = ["open_store", "RegistryStore", "RegistryError", "RegistryUnavailable", "ReadOnlyStore", "NotFound",
           "VersionExists", "IntegrityError"]


def open_store(uri: str | Path | RegistryStore, **options) -> RegistryStore:
    """The store a URI names (an already open store is returned as is)."""
    if isinstance(uri, RegistryStore):
        return uri
    if isinstance(uri, Path):
        uri = str(uri)
    if not uri:
        raise RegistryError("empty registry URI")
    scheme = urlsplit(uri).scheme.lower() if "://" in uri else ""
    if scheme in ("", "file"):
        from .local import LocalStore

        return LocalStore(Path(unquote(urlsplit(uri).path)) if scheme == "file" else Path(uri))
    if scheme == "oci":
        from .oci import OciStore

        return OciStore(uri, **options)
    if scheme in ("http", "https"):
        from .static_http import HttpStore

        return HttpStore(uri, **options)
    if scheme == "s3":
        from .s3 import S3Store

        return S3Store(uri, **options)
    raise RegistryError(f"unsupported registry URI {uri!r} (use a path, file://, oci://, http(s):// or s3://)")
