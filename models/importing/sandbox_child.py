"""The isolated import process (started by models/importing/sandbox.py): fence itself, run one importer, write back
files only.

    python -m triserve.models.importing.sandbox_child REQUEST.json

Before anything else, while the process is still single-threaded: resource limits (address space, CPU seconds, file
size, open files, no core dumps), a user + network namespace where the OS allows one (no network at all: not even
loopback), Landlock (changes only beneath the work folder and the writable folders the request names; no TCP; no
signals out), and an audit hook that refuses to start processes or open internet sockets. Then the request's
`target(work=..., **kwargs)` runs and its ImportResult (or (Artifact, report)) is written as result.json: each
artifact's staging folder (relative to the work folder) and manifest as JSON, and the report. A refusal is written
the same way with its class and reason. Nothing comes back as a pickle.
"""
from __future__ import annotations

import ctypes
import importlib
import json
import os
import resource
import sys
import traceback
from pathlib import Path

_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_REFUSED_EVENTS = {"os.system": "run a shell command", "subprocess.Popen": "start a process",
                   "os.exec": "replace itself with another program", "os.posix_spawn": "start a process",
                   "os.spawn": "start a process", "os.fork": "fork a process", "os.forkpty": "fork a process"}
_INTERNET = {2, 10}  # AF_INET, AF_INET6


class SandboxViolation(RuntimeError):
    """Code run by the import (a pickle's __reduce__, a custom module) tried what an import never needs."""


def _limits(limits: dict) -> None:
    mib = 1024 * 1024
    for what, value in ((resource.RLIMIT_AS, limits["memory_mb"] * mib), (resource.RLIMIT_CPU, limits["cpu_s"]),
                        (resource.RLIMIT_FSIZE, limits["file_mb"] * mib),
                        (resource.RLIMIT_NOFILE, limits["open_files"]), (resource.RLIMIT_CORE, 0)):
        soft, hard = resource.getrlimit(what)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(what, (value, hard if what == resource.RLIMIT_CPU else value))


def _no_network() -> str:
    """A fresh user + network namespace (only a down loopback in it), the uid/gid mapped to themselves."""
    uid, gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        return f"not isolated (unshare: {os.strerror(ctypes.get_errno())})"
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)
    return "none (own network namespace)"


def _audit(event: str, args: tuple) -> None:
    what = _REFUSED_EVENTS.get(event)
    if what is None and event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"):
        family = getattr(args[0], "family", None) if args else None
        if family in _INTERNET:
            what = f"open a network connection ({event} {args[1] if len(args) > 1 else ''})"
    if what is not None:
        detail = repr(args[0])[:200] if event in ("os.system", "subprocess.Popen", "os.exec") and args else ""
        traceback.print_stack(file=sys.stderr)  # in the relayed log: who tried
        raise SandboxViolation(f"refused by the import sandbox: the checkpoint or its code tried to {what}"
                               f"{' ' + detail if detail else ''}")


def _decode(value, tuples: bool = False):
    """sandbox._encode's JSON back to Paths and dataclasses (whose sequence fields are tuples)."""
    if isinstance(value, dict):
        if set(value) == {"$path"}:
            return Path(value["$path"])
        if set(value) == {"$dataclass", "fields"}:
            module, _, name = value["$dataclass"].partition(":")
            cls = getattr(importlib.import_module(module), name)
            return cls(**{k: _decode(v, True) for k, v in value["fields"].items()})
        return {k: _decode(v, tuples) for k, v in value.items()}
    if isinstance(value, list):
        items = [_decode(v, tuples) for v in value]
        return tuple(items) if tuples else items
    return value


def _answer(out, work: Path) -> dict:
    from triserve.models.importing.result import Artifact, ImportResult

    result = ImportResult(out[0], None, out[1]) if isinstance(out, tuple) and isinstance(out[0], Artifact) else out
    arts = [{"staging": str(Path(a.staging).resolve().relative_to(work.resolve())),
             "manifest": a.manifest.model_dump(mode="json")} for a in result.artifacts]
    return {"ok": True, "primary": arts[0], "fallback": arts[1] if len(arts) > 1 else None,
            "report": result.report}


def _failure(exc: BaseException, limits: dict) -> dict:
    from triserve.models.importing.result import GateFailed

    if isinstance(exc, MemoryError):
        return {"ok": False, "error": "LimitExceeded",
                "message": f"the import ran out of its memory limit ({limits['memory_mb']} MiB of address space)"}
    cause: BaseException | None = exc
    while cause is not None:  # a violation wrapped by the checkpoint reader's own refusal keeps its reason
        if isinstance(cause, SandboxViolation):
            return {"ok": False, "error": "ImportRefused", "message": str(exc) if cause is not exc else str(cause)}
        if isinstance(cause, PermissionError) and cause.filename:  # Landlock's answer to a write outside
            return {"ok": False, "error": "ImportRefused",
                    "message": f"refused by the import sandbox: the checkpoint or its code tried to change "
                               f"{cause.filename}, outside its work folder ({cause.strerror})"}
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, GateFailed):
        return {"ok": False, "error": type(exc).__name__, "message": str(exc)}
    return {"ok": False, "error": "Failed", "message": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc()[-4000:]}


def main(request_path: str) -> int:
    request = json.loads(Path(request_path).read_text())
    limits, work = request["limits"], Path(request["work"])
    result_path = Path(request["result"])
    _limits(limits)
    network = _no_network() if request.get("network_namespace", True) else "not isolated (disabled)"
    from triserve.models.importing import landlock

    writable = [Path(p) for p in request["writable"] if Path(p).exists()]
    abi = landlock.restrict_writes([work, result_path.parent, *writable, Path(os.devnull)])
    fence = {"network": network, "landlock_abi": abi,
             "filesystem": "writes only beneath the work folder" if abi else "not fenced (no Landlock here)"}
    for name in request.get("preload", []):  # heavy, trusted imports before the audit hook watches
        importlib.import_module(name)
    if request.get("git_commit"):  # the parent's answer: the child starts no git
        from triserve.models.importing import provenance

        provenance.KNOWN_COMMIT = request["git_commit"]
    sys.addaudithook(_audit)
    try:
        module, _, func = request["target"].partition(":")
        target = getattr(importlib.import_module(module), func)
        answer = _answer(target(work=work, **_decode(request["kwargs"])), work)
    except BaseException as exc:  # noqa: BLE001 - every end is a written answer: the parent reads files, no pickle
        answer = _failure(exc, limits)
    answer["sandbox"] = fence
    result_path.write_text(json.dumps(answer, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
