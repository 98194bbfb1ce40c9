"""`triserve`: one command for the project's tools (console script from pyproject.toml [project.scripts]).

    triserve import  [ARGS...]        python -m scripts.importer   (publish your own model: --help lists the kinds)
    triserve registry [ARGS...]       python -m models.cli         (list, show, copy, promote, rollback, pull)
    triserve rollout [ARGS...]        python -m scripts.rollout    (against a running service)
    triserve bench --list | NAME ...  python -m scripts.bench.NAME
    triserve drill --list | NAME ...  python -m scripts.drills.NAME

Everything after the subcommand (and after NAME for bench/drill) is passed on unchanged, so `triserve X --help` is
the module's own --help. The module runs with this interpreter (`sys.executable -m ...`, replacing this process):
the same environment the console script was installed into, whatever PATH says. `make serve` stays the BentoML
entry (`bentoml serve services.gateway:Gateway`).
"""
from __future__ import annotations

import ast
import importlib.util
import os
import pkgutil
import sys

PROG = "triserve"
# subcommand -> module run with `python -m`
COMMANDS = {
    "import": ("scripts.importer", "import a model made elsewhere into the registry"),
    "registry": ("models.cli", "the model registry: list, show, copy, promote, rollback, pull"),
    "rollout": ("scripts.rollout", "rollouts against a running service: status, promote, rollback, canary, shadow"),
}
# subcommand -> package whose runnable modules it lists and runs
GROUPS = {
    "bench": ("scripts.bench", "benchmarks (scripts/bench/)"),
    "drill": ("scripts.drills", "fault drills against a real bentoml serve (scripts/drills/)"),
}


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
    lines = [f"usage: {PROG} COMMAND [ARGS...]", "", "commands:"]
    for name, (module, help_) in COMMANDS.items():
        lines.append(f"  {name:<9} {help_} (python -m {module})")
    for name, (package, help_) in GROUPS.items():
        lines.append(f"  {name:<9} {help_}: {PROG} {name} --list | {PROG} {name} NAME [ARGS...] "
                     f"(python -m {package}.NAME)")
    lines += ["", (f"`{PROG} COMMAND --help` shows the command's own options. Serving: `make serve` "
                   "(bentoml serve services.gateway:Gateway).")]
    return "\n".join(lines)


def group_usage(group: str) -> str:
    package, help_ = GROUPS[group]
    lines = [f"usage: {PROG} {group} --list | {PROG} {group} NAME [ARGS...]", "", f"{help_}; NAME is one of:"]
    for name, summary in runnable(package).items():
        lines.append(f"  {name:<20} {summary[:96]}")
    lines += ["", f"`{PROG} {group} NAME --help` shows its options (python -m {package}.NAME --help)."]
    return "\n".join(lines)


def run_module(module: str, args: list[str]) -> int:
    """`sys.executable -m module args...`, replacing this process (exit status, signals and stdin pass through)."""
    argv = [sys.executable, "-m", module, *args]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
    return 0  # not reached


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    cmd, rest = args[0], args[1:]
    if cmd in COMMANDS:
        return run_module(COMMANDS[cmd][0], rest)
    if cmd in GROUPS:
        package = GROUPS[cmd][0]
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
