"""`triserve`: one command for the project's tools (console script from pyproject.toml [project.scripts]).

    triserve serve [--host H] [--port P] [--grpc-port P] [--registry PATH_OR_URL] [--config-dir DIR] [--build-missing]
                                      the server `make serve` starts (python -m bentoml serve
                                      triserve.services.gateway:Gateway)
    triserve --version                triserve's version (+ the git commit in a checkout) and the client's, BentoML's,
                                      ONNX Runtime's, numpy's and Python's: what a bug report needs
    triserve registry [ARGS...]       python -m triserve.models.cli         (list, show, copy, promote, rollback, pull)
    triserve import  [ARGS...]        python -m triserve.importers (publish your own model: --help lists the kinds)
    triserve rollout [ARGS...]        python -m triserve.rollout   (against a running service: its admin API)
    triserve bench --list | NAME ...  python -m scripts.bench.NAME
    triserve drill --list | NAME ...  python -m scripts.drills.NAME

`serve`, `registry`, `import`, `rollout`, `batch` and `--version` work from the installed wheel; bench and drill run
modules of scripts/, which only a checkout has (an editable install): from a wheel they say so instead of failing with
an import error.

Everything after the subcommand (and after NAME for bench/drill) is passed on unchanged, so `triserve X --help` is
the module's own --help. The module runs with this interpreter (`sys.executable -m ...`, replacing this process):
the same environment the console script was installed into, whatever PATH says. `triserve serve` is the one way to
serve: `make serve` runs it after `make models`; it works from any directory, for a checkout (editable install) and an
installed wheel alike.
"""
from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import os
import pkgutil
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from triserve.configs.settings import Settings

PROG = "triserve"
# subcommand -> module run with `python -m`
COMMANDS = {
    "batch": ("triserve.batch.cli",
              "offline batch inference over files and tables: detect, classify, forecast (resumable)"),
    "import": ("triserve.importers", "import a model made elsewhere into the registry"),
    "registry": ("triserve.models.cli", "the model registry: list, show, copy, promote, rollback, pull"),
    "rollout": ("triserve.rollout", "rollouts against a running service: status, promote, rollback, canary, shadow"),
}
# subcommand -> package whose runnable modules it lists and runs
GROUPS = {
    "bench": ("scripts.bench", "benchmarks (scripts/bench/)"),
    "drill": ("scripts.drills", "fault drills against a real bentoml serve (scripts/drills/)"),
}
# `triserve serve`: the BentoML service it serves
SERVICE = "triserve.services.gateway:Gateway"
# What the Makefile exports for `make serve` (and make exports them before running `triserve serve`): defaults here,
# the caller's environment wins.
# where `--version` looks for git (system directories only, like the Makefile: no PATH lookup)
GIT_DIRS = ("/usr/local/bin", "/usr/bin", "/bin")
SERVE_ENV = {"YOLO_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "BENTOML_DO_NOT_TRACK": "True"}


def _summary(origin: str) -> str:
    """First line of a module's docstring, read without importing it."""
    try:
        with open(origin, encoding="utf-8") as fh:
            doc = ast.get_docstring(ast.parse(fh.read())) or ""
    except (OSError, SyntaxError):
        return ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def runnable(package: str) -> dict[str, str]:
    """name -> summary of the modules of `package` that run as `python -m package.name` (have a __main__ block)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return {}
    out = {}
    for info in sorted(pkgutil.iter_modules(spec.submodule_search_locations), key=lambda m: m.name):
        if info.ispkg or info.name.startswith("_"):
            continue
        sub = importlib.util.find_spec(f"{package}.{info.name}")
        if sub is None or not sub.origin:
            continue
        with open(sub.origin, encoding="utf-8") as fh:
            source = fh.read()
        if 'if __name__ == "__main__":' in source or "if __name__ == '__main__':" in source:
            out[info.name] = _summary(sub.origin)
    return out


def usage() -> str:
    lines = [f"usage: {PROG} COMMAND [ARGS...] | {PROG} --version", "", "commands:",
             f"  {'serve':<9} serve the model repository: the server `make serve` starts (bentoml serve "
             f"{SERVICE}); {PROG} serve --help"]
    for name, (module, help_) in COMMANDS.items():
        lines.append(f"  {name:<9} {help_} (python -m {module})")
    for name, (package, help_) in GROUPS.items():
        lines.append(f"  {name:<9} {help_}: {PROG} {name} --list | {PROG} {name} NAME [ARGS...] "
                     f"(python -m {package}.NAME)")
    lines += ["", (f"`{PROG} COMMAND --help` shows the command's own options. `make serve` builds the default "
                   f"models, then runs `{PROG} serve`.")]
    return "\n".join(lines)


def group_usage(group: str) -> str:
    package, help_ = GROUPS[group]
    lines = [f"usage: {PROG} {group} --list | {PROG} {group} NAME [ARGS...]", "", f"{help_}; NAME is one of:"]
    for name, summary in runnable(package).items():
        lines.append(f"  {name:<20} {summary[:96]}")
    lines += ["", f"`{PROG} {group} NAME --help` shows its options (python -m {package}.NAME --help)."]
    return "\n".join(lines)


def checkout_only(module: str) -> str | None:
    """Why `module` cannot run here (a checkout tool, and this is an installed wheel), or None when it can."""
    top = module.split(".")[0]
    if importlib.util.find_spec(top) is None and not is_checkout(source_root()):
        return (f"{PROG}: `python -m {module}` is a tool of the project's checkout ({top}/ is not in the wheel): "
                f"clone the repository and `make install`, then run it there")
    return None


def run_module(module: str, args: list[str]) -> int:
    """`sys.executable -m module args...`, replacing this process (exit status, signals and stdin pass through). In a
    checkout the checkout's root leads PYTHONPATH: scripts/ is not part of the installed (editable) packages."""
    why = checkout_only(module)
    if why:
        print(why, file=sys.stderr)
        return 2
    env = dict(os.environ)
    root = source_root()
    if is_checkout(root):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    argv = [sys.executable, "-m", module, *args]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)
    return 0  # not reached


# -- triserve serve ---------------------------------------------------------------------------------------------------
SERVE_EPILOG = """\
The same server as `make serve` (which runs this after `make models`): `python -m bentoml serve
triserve.services.gateway:Gateway` with this interpreter, replacing this process (signals and exit status pass
through), in
the directory that holds the project's packages (--working-dir), with the Makefile's environment defaults
(YOLO_OFFLINE, HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE=1, BENTOML_DO_NOT_TRACK=True; in a checkout
BENTOML_HOME=<checkout>/.cache/bentoml). Every setting of configs/settings.py still reads its TRISERVE_* variable;
relative paths in TRISERVE_*_DIR / TRISERVE_*_FILE / TRISERVE_CONFIG / BENTOML_HOME are taken from the directory
this is run in. Arguments after `--` go to `bentoml serve` unchanged (e.g. -- --development)."""


def source_root() -> Path:
    """The directory that holds the `triserve` package: the checkout for an editable install, site-packages for a
    wheel. Found without importing the server."""
    return Path(__file__).resolve().parent.parent


def is_checkout(root: Path) -> bool:
    return (root / "pyproject.toml").is_file()


def _absolute_paths(env: dict[str, str], cwd: Path) -> None:
    for key, value in list(env.items()):
        path_like = key == "TRISERVE_CONFIG" or key == "BENTOML_HOME" or (
            key.startswith("TRISERVE_") and key.endswith(("_DIR", "_FILE")))
        if path_like and value and not os.path.isabs(os.path.expanduser(value)):
            env[key] = str((cwd / value).resolve())


def serve_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=f"{PROG} serve", description="Serve the model repository (REST, gRPC, OIP).",
                                 epilog=SERVE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s)")
    ap.add_argument("--port", type=int, default=3000, help="HTTP port (default: %(default)s)")
    ap.add_argument("--grpc-port", type=int, metavar="PORT",
                    help="gRPC port: the setting grpc.port (TRISERVE_GRPC__PORT), whose default is 3001")
    ap.add_argument("--registry", metavar="PATH_OR_URL",
                    help="the model registry: a local directory (TRISERVE_REGISTRY_DIR, served as is) or a store URL "
                         "oci:// s3:// http(s):// file:// (TRISERVE_REGISTRY_URI: pulled and verified into "
                         "TRISERVE_MODEL_CACHE_DIR). Default: the settings' registry: <checkout>/models/store run "
                         "from a checkout, <TRISERVE_HOME or ~/.triserve>/models from an installed wheel")
    ap.add_argument("--config-dir", type=Path, metavar="DIR",
                    help="a directory with serving.yaml and/or models.yaml, used instead of the packaged configs/ "
                         "ones (TRISERVE_CONFIG, TRISERVE_MODELS_FILE); a deployments state file written by runtime "
                         "changes (TRISERVE_DEPLOYMENTS_STATE_FILE) is still served instead of models.yaml")
    ap.add_argument("--build-missing", action="store_true",
                    help="before serving, build the default models (python -m scripts.pipeline build: needs the "
                         "export extra) when the local registry lacks a model the repository serves, as `make serve` "
                         "does through `make models`")
    return ap


def serve_env(opts: argparse.Namespace, base: dict[str, str], root: Path, cwd: Path) -> dict[str, str]:
    """The server's environment: `base` (the caller's), the Makefile's defaults, then the options."""
    env = dict(base)
    for key, value in SERVE_ENV.items():
        env.setdefault(key, value)
    if is_checkout(root):  # BentoML wipes its prometheus files under BENTOML_HOME at start: one home per checkout
        env.setdefault("BENTOML_HOME", str(root / ".cache" / "bentoml"))
    _absolute_paths(env, cwd)
    if opts.grpc_port is not None:
        env["TRISERVE_GRPC__PORT"] = str(opts.grpc_port)
    if opts.registry:
        if "://" in opts.registry:
            env["TRISERVE_REGISTRY_URI"] = opts.registry
        else:
            env["TRISERVE_REGISTRY_DIR"] = str((cwd / Path(opts.registry).expanduser()).resolve())
            env.pop("TRISERVE_REGISTRY_URI", None)  # a directory is served as is, never pulled into
    if opts.config_dir is not None:
        directory = (cwd / opts.config_dir.expanduser()).resolve()
        files = {"TRISERVE_CONFIG": directory / "serving.yaml", "TRISERVE_MODELS_FILE": directory / "models.yaml"}
        found = {key: path for key, path in files.items() if path.is_file()}
        if not found:
            raise ValueError(f"--config-dir {directory}: neither serving.yaml nor models.yaml there")
        env.update({key: str(path) for key, path in found.items()})
    return env


def server_settings(env: dict[str, str]) -> Settings:
    """The settings the server will read: configs/settings.py under `env`."""
    from unittest import mock

    from triserve.configs.settings import Settings

    with mock.patch.dict(os.environ, env, clear=True):
        return Settings()


def missing_models(env: dict[str, str]) -> tuple[Path, list[str]]:
    """(local registry directory, 'name:ref' of the served models it lacks), read as the server will read them:
    settings and the model repository under `env`."""
    from unittest import mock

    with mock.patch.dict(os.environ, env, clear=True):
        from triserve.configs.deployments import load_repository
        from triserve.configs.settings import Settings
        from triserve.models.registry import LocalRegistry, RegistryError

        settings = Settings()
        if settings.registry_uri:
            raise ValueError(f"--build-missing builds into a local registry directory, not the store "
                             f"{settings.registry_uri} (TRISERVE_REGISTRY_URI / --registry URL)")
        repo = load_repository(state_file=settings.deployments_state_file, overrides=settings.slots)
        registry = LocalRegistry(settings.registry_dir)
        missing = []
        for slot in repo.slots.values():
            try:
                registry.resolve(slot.name, slot.ref)
            except RegistryError:
                missing.append(f"{slot.name}:{slot.ref}")
        return Path(settings.registry_dir), sorted(set(missing))


def serve(args: list[str]) -> int:
    from triserve.services.ports import ensure_free, ensure_grpc_free  # the server's package: imported by `serve` alone

    extra: list[str] = []
    if "--" in args:
        args, extra = args[:args.index("--")], args[args.index("--") + 1:]
    ap = serve_parser()
    opts = ap.parse_args(args)
    root = source_root()
    try:
        env = serve_env(opts, dict(os.environ), root, Path.cwd())
        if opts.build_missing:
            registry, missing = missing_models(env)
            if missing:
                build = [sys.executable, "-m", "scripts.pipeline", "build", "--registry", str(registry)]
                print(f"{PROG} serve: {registry} lacks {', '.join(missing)}: {' '.join(build[1:])}", file=sys.stderr)
                done = subprocess.run(build, env=env, cwd=root if is_checkout(root) else None)
                if done.returncode != 0:
                    print(f"{PROG} serve: the model build failed ({done.returncode}); it needs the export extra "
                          "(pip install -e '.[cpu,export]')", file=sys.stderr)
                    return done.returncode
                still = missing_models(env)[1]
                if still:
                    print(f"{PROG} serve: still missing after the build (not default models?): {', '.join(still)}",
                          file=sys.stderr)
        # before BentoML, which would wipe the metrics files under a BENTOML_HOME it shares with the server on the
        # port, then die of a traceback that does not name the port (HTTP; the arbiter checks gRPC again)
        ensure_free(opts.host, opts.port, "HTTP", "give this server another one: --port")
        ensure_grpc_free(server_settings(env).grpc)
    except (ValueError, OSError) as exc:  # PortInUse is an OSError
        ap.error(str(exc))
    argv = [sys.executable, "-m", "bentoml", "serve", SERVICE, "--host", opts.host, "--port", str(opts.port),
            "--working-dir", str(root), *extra]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)
    return 0  # not reached


# -- triserve --version -----------------------------------------------------------------------------------------------
def version() -> str:
    """What a bug report needs: 'triserve X.Y.Z' (plus '(git <sha>[-dirty])' when the code runs from a git checkout),
    then the client, BentoML, ONNX Runtime (CPU or GPU build), numpy and Python, one per line. Read from the installed
    distributions' metadata: nothing is imported."""
    lines = [_own_version()]
    for label, distributions in (("triserve-client", ("triserve-client",)), ("bentoml", ("bentoml",)),
                                 ("onnxruntime", ("onnxruntime", "onnxruntime-gpu")), ("numpy", ("numpy",))):
        found = [(name, v) for name in distributions if (v := _distribution_version(name))]
        text = ", ".join(f"{v}" if name == label else f"{v} ({name})" for name, v in found)
        lines.append(f"{label} {text or 'not installed'}")
    lines.append(f"python {platform.python_version()} ({platform.python_implementation()}, {sys.platform}, "
                 f"{platform.machine()})")
    return "\n".join(lines)


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _own_version() -> str:
    """'triserve X.Y.Z', plus '(git <sha>[-dirty])' when the code runs from a git checkout."""
    text = f"{PROG} {_distribution_version('triserve') or '(not installed)'}"
    root = source_root()
    if not (root / ".git").exists():
        return text
    git = shutil.which("git", path=os.pathsep.join(GIT_DIRS))
    if git is None:
        return text
    try:
        sha = subprocess.run([git, "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=5)
        if sha.returncode != 0:
            return text
        dirty = subprocess.run([git, "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return text
    return f"{text} (git {sha.stdout.strip()}{'-dirty' if dirty else ''})"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    root = source_root()
    if is_checkout(root) and str(root) not in sys.path:  # scripts/ (bench, drill listings) of an editable checkout
        sys.path.append(str(root))
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    if args[0] in ("--version", "-V"):
        print(version())
        return 0
    cmd, rest = args[0], args[1:]
    if cmd == "serve":
        return serve(rest)
    if cmd in COMMANDS:
        return run_module(COMMANDS[cmd][0], rest)
    if cmd in GROUPS:
        package = GROUPS[cmd][0]
        why = checkout_only(package)
        if why:
            print(why, file=sys.stderr)
            return 2
        if not rest or rest[0] in ("-h", "--help"):
            print(group_usage(cmd), file=sys.stdout if rest else sys.stderr)
            return 0 if rest else 2
        if rest[0] == "--list":
            for name, summary in runnable(package).items():
                print(f"{name:<20} {summary}")
            return 0
        names = runnable(package)
        if rest[0] not in names:
            print(f"{PROG} {cmd}: unknown {cmd} {rest[0]!r}; one of: {', '.join(names)}", file=sys.stderr)
            return 2
        return run_module(f"{package}.{rest[0]}", rest[1:])
    print(f"{PROG}: unknown command {cmd!r}\n\n{usage()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
