"""What the sandbox tests run in the isolated child (models/importing/sandbox_child.py imports them by name)."""
from __future__ import annotations

import json
import os
import pickle
import socket
import time
from pathlib import Path

from triserve.models.importing.result import ImportRefused


def unpickle(work: Path, path: Path):
    """Plain pickle.loads, no allow-list: only the sandbox stands between the pickle and the host."""
    pickle.loads(Path(path).read_bytes())
    raise ImportRefused("the pickle loaded")


def environment(work: Path):
    raise ImportRefused(json.dumps({"env": dict(os.environ), "cwd": os.getcwd()}))


def hog_memory(work: Path, mib: int):
    block = bytearray(mib * 1024 * 1024)
    raise ImportRefused(f"allocated {len(block)} bytes")


def spin(work: Path):
    while True:
        pass


def sleep(work: Path, seconds: float):
    time.sleep(seconds)


def connect(work: Path, port: int):
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    raise ImportRefused("connected")


def write(work: Path, path: Path):
    """Writes inside its work folder (allowed) and then at `path` (outside: refused by the OS)."""
    (work / "inside.txt").write_text("ok")
    Path(path).write_text("escaped")
    raise ImportRefused("wrote outside")
