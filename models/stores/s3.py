"""s3://bucket/prefix: the local registry's layout as objects in an S3 (or S3-compatible) bucket, through boto3.

Endpoint: `?endpoint_url=http://127.0.0.1:9000` in the URI, else TRISERVE_S3_ENDPOINT_URL, else boto3's own
configuration (AWS_ENDPOINT_URL, ~/.aws/config); credentials and region come from boto3's usual chain.
Immutability: every object of a version is written with a conditional `If-None-Match: *` put, and the manifest last,
so a concurrent publisher of the same version fails instead of overwriting (an identical re-upload of a file after a
crash is accepted: its recorded sha256 matches). Alias updates are read-modify-write of aliases.json and
alias_log.jsonl (last writer wins between simultaneous promotions; serialise them, e.g. through CI).
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from triserve.models.manifest import NAME_PATTERN

from .base import CHUNK, NotFound, RegistryError, RegistryUnavailable, VersionExists, progress_bar
from .tree import TreeStore

try:  # optional extra: pip install 'triserve[s3]'
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, ReadTimeoutError
    from botocore.exceptions import ConnectionError as BotoConnectionError
except ImportError:  # pragma: no cover - exercised only without the extra
    boto3 = None

_MISSING = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}


class S3Store(TreeStore):
    def __init__(self, uri: str, endpoint_url: str | None = None, client=None, connect_timeout: float = 5.0):
        if boto3 is None:
            raise RegistryError("s3:// stores need boto3: pip install 'triserve[s3]'")
        parts = urlsplit(uri)
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/")
        query = parse_qs(parts.query)
        self.endpoint_url = (endpoint_url or (query.get("endpoint_url") or [""])[0]
                             or os.environ.get("TRISERVE_S3_ENDPOINT_URL") or None)
        self.uri = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self.client = client or boto3.client(
            "s3", endpoint_url=self.endpoint_url,
            config=Config(connect_timeout=connect_timeout, read_timeout=60,
                          retries={"max_attempts": 2, "mode": "standard"}))

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, fn, **kwargs):
        try:
            return fn(Bucket=self.bucket, **kwargs)
        except (EndpointConnectionError, BotoConnectionError, ReadTimeoutError) as exc:
            where = self.endpoint_url or "default endpoint"
            raise RegistryUnavailable(f"{self.uri} unreachable ({where}): {exc}") from exc
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if status >= 500:
                raise RegistryUnavailable(f"{self.uri}: {exc}") from exc
            raise
        except BotoCoreError as exc:
            raise RegistryError(f"{self.uri}: {exc}") from exc

    @staticmethod
    def _missing(exc: ClientError) -> bool:
        return exc.response.get("Error", {}).get("Code") in _MISSING

    def _get(self, key: str) -> bytes | None:
        try:
            return self._call(self.client.get_object, Key=self._key(key))["Body"].read()
        except ClientError as exc:
            if self._missing(exc):
                return None
            raise RegistryError(f"{self.uri}: {exc}") from exc

    def _exists(self, key: str) -> bool:
        try:
            self._call(self.client.head_object, Key=self._key(key))
            return True
        except ClientError as exc:
            if self._missing(exc):
                return False
            raise RegistryError(f"{self.uri}: {exc}") from exc

    def _stream(self, key: str) -> Iterator[bytes]:
        try:
            body = self._call(self.client.get_object, Key=self._key(key))["Body"]
        except ClientError as exc:
            if self._missing(exc):
                raise NotFound(f"{self.uri}: {key} not found") from exc
            raise RegistryError(f"{self.uri}: {exc}") from exc
        try:
            yield from body.iter_chunks(CHUNK)
        except (BotoConnectionError, ReadTimeoutError) as exc:
            raise RegistryUnavailable(f"{self.uri}: read of {key} failed: {exc}") from exc
        finally:
            body.close()

    def _put(self, key: str, data: bytes, if_absent: bool = False) -> None:
        extra = {"IfNoneMatch": "*"} if if_absent else {}
        try:
            self._call(self.client.put_object, Key=self._key(key), Body=data, **extra)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise VersionExists(f"{self.uri}: {key} already exists; versions are immutable") from exc
            raise RegistryError(f"{self.uri}: {exc}") from exc

    def _put_file(self, key: str, path: Path, sha256: str, progress: bool) -> None:
        size = path.stat().st_size
        with open(path, "rb") as fh, progress_bar(progress, size, f"upload {key}") as bar:
            body = _CountingReader(fh, bar)
            try:
                self._call(self.client.put_object, Key=self._key(key), Body=body, ContentLength=size,
                           Metadata={"sha256": sha256}, IfNoneMatch="*")
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if code not in ("PreconditionFailed", "ConditionalRequestConflict"):
                    raise RegistryError(f"{self.uri}: {exc}") from exc
                head = self._call(self.client.head_object, Key=self._key(key))
                if head.get("Metadata", {}).get("sha256") != sha256:  # someone else's bytes: not ours to overwrite
                    raise VersionExists(f"{self.uri}: {key} already exists with other content") from exc

    def _listing(self, **kwargs) -> list[dict]:
        """Every page of a list_objects_v2 listing (followed through its continuation tokens); none when the bucket
        is missing."""
        pages, token = [], None
        while True:
            if token:
                kwargs["ContinuationToken"] = token
            try:
                page = self._call(self.client.list_objects_v2, **kwargs)
            except ClientError as exc:
                if self._missing(exc):
                    return []
                raise RegistryError(f"{self.uri}: {exc}") from exc
            pages.append(page)
            if not page.get("IsTruncated"):
                return pages
            token = page["NextContinuationToken"]

    def _common_prefixes(self, prefix: str) -> list[str]:
        base = self._key(prefix)
        return [p["Prefix"][len(base):].rstrip("/") for page in self._listing(Prefix=base, Delimiter="/")
                for p in page.get("CommonPrefixes", [])]

    def models(self) -> list[str]:
        return sorted(n for n in self._common_prefixes("") if re.match(NAME_PATTERN, n) and self.versions(n))

    def versions(self, name: str) -> list[str]:
        """Versions with a manifest, oldest manifest first."""
        found = []
        base = self._key(f"{name}/versions/")
        for page in self._listing(Prefix=base):
            for obj in page.get("Contents", []):
                rest = obj["Key"][len(base):].split("/")
                if len(rest) == 2 and rest[1] == "manifest.json":
                    found.append((obj["LastModified"], rest[0]))
        return [v for _, v in sorted(found)]


class _CountingReader:
    """A file object that reports the read position to a progress bar (boto3 streams the body from it, and may
    seek back after computing a checksum: the bar follows the position)."""

    def __init__(self, fh, bar):
        self._fh, self._bar, self._pos = fh, bar, fh.tell()

    def _moved(self) -> None:
        pos = self._fh.tell()
        self._bar.update(pos - self._pos)
        self._pos = pos

    def read(self, n: int = -1) -> bytes:
        block = self._fh.read(n)
        self._moved()
        return block

    def seek(self, *args):
        out = self._fh.seek(*args)
        self._moved()
        return out

    def tell(self):
        return self._fh.tell()
