"""Verified stamps: a file hashed once and unchanged since is not hashed again at the next start.

Why: every start verified every served file by sha256 in the runner and again in the gateway (hundreds of MB here,
GBs for larger models) although nothing had changed since the last start. A stamp records, after a full hash matched
the manifest, the file's identity as the kernel reports it: size, mtime and ctime in nanoseconds, inode and device.
Any write to the file changes its mtime and ctime (and a rename or copy its inode); ctime cannot be set back from user
space (`touch -d` or os.utime set mtime and move ctime to now), so a file changed after its stamp never matches it
and is hashed again: a corrupted or tampered file is still refused. What a stamp cannot see is a change below the
filesystem (a disk's bit rot that leaves the inode alone); `registry verify` (a full hash) is the check for that.

Stamps live in one directory (by default under the model cache), one small JSON file per verified file, written
atomically, so the runner and the gateway share them and a stamp is either whole or absent. The first stamp a
process writes also removes the stamps of files that no longer exist (removed versions, a test's temporary registry).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger("triserve.models.stamps")


def identity(path: Path) -> dict[str, int]:
    """What the kernel says about the file now (any change of its content changes one of these)."""
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino,
            "dev": st.st_dev}


class Stamps:
    """sha256 verdicts by file identity, in `directory` (created on first write; unwritable: nothing is stamped)."""

    def __init__(self, directory: Path | str):
        self.directory = Path(directory)
        self._pruned = False

    def _file(self, path: Path) -> Path:
        key = hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:32]
        return self.directory / f"{key}.json"

    def matches(self, path: Path, sha256: str) -> bool:
        """The file was hashed to `sha256` and has not changed since (False when unsure: it is hashed)."""
        try:
            stamp = json.loads(self._file(path).read_text())
            return bool(stamp.get("sha256") == sha256 and stamp.get("path") == str(Path(path).resolve())
                        and stamp.get("identity") == identity(path))
        except (OSError, ValueError, AttributeError):
            return False

    def record(self, path: Path, sha256: str, before: dict[str, int]) -> None:
        """Remember a verdict: `before` is the identity taken before hashing; a file that changed while it was hashed
        gets no stamp. Best effort: a stamp that cannot be written only means hashing again next time."""
        try:
            if identity(path) != before:
                return
            self.directory.mkdir(parents=True, exist_ok=True)
            if not self._pruned:
                self.prune()
            body = json.dumps({"path": str(Path(path).resolve()), "sha256": sha256, "identity": before})
            fd, tmp = tempfile.mkstemp(prefix=".stamp-", dir=self.directory)
            with os.fdopen(fd, "w") as fh:
                fh.write(body)
            os.replace(tmp, self._file(path))
        except OSError as exc:
            log.debug("no verified stamp for %s: %s", path, exc)

    def prune(self) -> int:
        """Remove the stamps of files that are gone; returns how many."""
        self._pruned = True
        removed = 0
        for stamp in self.directory.glob("*.json"):
            try:
                if not Path(json.loads(stamp.read_text())["path"]).exists():
                    stamp.unlink()
                    removed += 1
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return removed

    def forget(self, path: Path) -> None:
        try:
            self._file(path).unlink()
        except OSError:
            pass
