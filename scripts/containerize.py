"""Build the Bento, turn it into an OCI image with buildah and push it to an OCI registry (`make image`).

    python -m scripts.containerize                                   # CPU: 127.0.0.1:5000/triserve:<bento version>
    python -m scripts.containerize --registry registry.internal:5000 --repository ml/triserve
    python -m scripts.containerize --bentofile bentofile.gpu.yaml --build-only   # GPU Bento (no image here)
    python -m scripts.containerize --check-tools        # where each tool comes from (installs nothing, builds nothing)
    python -m scripts.containerize --check-bentofiles   # every bentofile installs its variant's lock (locks/)

Tools: never looked up on the caller's PATH. bentoml and uv are the project environment's (next to sys.executable),
pip is `sys.executable -m pip`, system tools are resolved in /usr/local/sbin ... /bin (a missing one names its Debian
package), and child processes get PATH = project environment + system directories (see "tool resolution" below).

Steps (each printed with its time):
  1. tools: buildah, skopeo, debootstrap, docker-registry (+ chroot, git); missing ones are installed with apt-get
     (says so);
  2. base image: the public base the Bento asks for (python:3.11-slim for bentofile.yaml) when reachable; else
     (no public container registry here) a local stand-in `localhost/triserve-base:bookworm-py3.11` bootstrapped
     with debootstrap: Debian bookworm minbase + python3 (3.11), upgraded from bookworm-updates/-security, with what
     the generated Dockerfile apt-installs (ca-certificates gnupg2 bash build-essential git) and uv 0.13.4 (the uv
     release that Dockerfile pins, sha256-checked against those pins). The Bento is then built from a derived
     bentofile (.cache/containerize/) that sets `docker.base_image` to it, so the image records its real base;
  3. `bentoml build --label git_commit=<HEAD> [--label git_dirty=true]` into BENTOML_HOME (.cache/bentoml);
  4. check the Bento carries no weights (no *.onnx/*.pt/... file, nothing over 5 MiB, no BentoML models) and show
     `bentoml list`;
  5. `bentoml containerize --backend buildah` (vfs storage, chroot isolation) tagged with the Bento version. The
     host CA bundle is bind-mounted into the build's RUN steps only (`--opt volume=...:ro`): package traffic here
     goes through a TLS proxy whose CA is in that bundle, and the mount keeps it out of the image layers;
  6. the registry: the one answering on --registry, or Debian's docker-registry started on 127.0.0.1:5000;
  7. `buildah push` to docker://<registry>/<repository>:<version>;
  8. `skopeo inspect` of the pushed tag (digest, labels, layers).

Package index: pip/uv inside the build use PyPI. A host index (PIP_INDEX_URL / pip config index-url,
extra-index-url) is carried into the derived bentofile when it is http(s) without credentials; file:// indexes
(this machine's local wheel dirs) cannot be reached from a build and are skipped with a message. No credentials
are ever written into a Bento or an image.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from urllib.parse import urlparse

import yaml

from scripts.imagetools import (
    BENTOML_HOME,
    CACHE,
    HOST_CA_BUNDLE,
    PROJECT_ROOT,
    StepFailed,
    Steps,
    check_tools,
    container_env,
    die,
    ensure_registry,
    ensure_system_tools,
    git_commit,
    human,
    project_path,
    run,
    say,
    system_tool,
    use_project_path,
    venv_tool,
)

WORK = CACHE / "containerize"
LOCAL_BASE = "localhost/triserve-base:bookworm-py3.11"
UV_VERSION = "0.13.4"  # the uv the generated Dockerfile installs when the base has none (hash-pinned there)
WEIGHT_SUFFIXES = (".onnx", ".pt", ".pth", ".npz", ".safetensors", ".bin", ".ckpt", ".pb", ".tflite")
MAX_BENTO_FILE = 5 * 2**20

# ------------------------------------------------------------------------------------------------- tool resolution
# Every tool this script (and scripts/smoke_image.py) runs is resolved to an absolute path, never looked up by a bare
# name on the caller's PATH: scripts/imagetools.py "tool resolution" (project console scripts next to sys.executable,
# system tools in SYSTEM_BIN_DIRS, a missing one named with its Debian package; child processes and the third-party
# code that looks tools up by name, BentoML's buildah backend and its `uv pip compile`, see PATH = project
# environment + system directories only).
PYTHON_TOOLS = ("bentoml", "uv")  # console scripts of the project's environment (uv: `bentoml build` locks with it)
# binary -> Debian package
TOOLS = {"buildah": "buildah", "skopeo": "skopeo", "debootstrap": "debootstrap", "docker-registry": "docker-registry",
         "chroot": "coreutils", "git": "git"}


def tool(name: str) -> str:
    """The absolute path to run `name` by: a project console script or a system tool."""
    return venv_tool(name) if name in PYTHON_TOOLS else system_tool(name, TOOLS.get(name))


# ------------------------------------------------------------------------------------------- bentofiles and locks/
# The Bento installs exactly the lock the tests ran against (scripts/lock.py): a bentofile's python section is
# `requirements_txt: locks/serving-<variant>.txt` with BentoML's own resolution off (lock_packages: false). Checked
# by tests/configs/test_deploy.py and before every `make bento` / `make image`.
def project_license() -> str:
    """The SPDX licence expression of the code (pyproject.toml [project].license)."""
    import tomllib

    return str(tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["license"])


def bentofile_variant(data: dict) -> str:
    return str((data.get("labels") or {}).get("variant") or "cpu")


def bentofile_lock_problems(path: Path, root: Path | None = None) -> list[str]:
    """Why the bentofile at `path` does not install its variant's lock (empty: it does, and the locks are current)."""
    from scripts.lock import problems as lock_problems

    root = root or PROJECT_ROOT
    data = yaml.safe_load(path.read_text())
    python = data.get("python") or {}
    want = f"locks/serving-{bentofile_variant(data)}.txt"
    found = []
    if python.get("requirements_txt") != want:
        found.append(f"{path.name}: python.requirements_txt is {python.get('requirements_txt')!r}, not {want!r}")
    if python.get("packages"):
        found.append(f"{path.name}: python.packages lists packages beside the lock (put them in pyproject.toml, "
                     "then make lock)")
    if python.get("lock_packages") is not False:
        found.append(f"{path.name}: python.lock_packages must be false (BentoML would re-resolve the lock)")
    return found + lock_problems(root)


def public_base(bentofile: dict) -> str:
    """The base image BentoML's generated Dockerfile would use for this bentofile."""
    docker = bentofile.get("docker") or {}
    if docker.get("base_image"):
        return docker["base_image"]
    from bentoml._internal.container.frontend.dockerfile import (
        ALLOWED_CUDA_VERSION_ARGS,
        CONTAINER_METADATA,
        get_cuda_base_image,
    )
    distro = docker.get("distro") or "debian"
    if docker.get("cuda_version"):
        return get_cuda_base_image(distro, ALLOWED_CUDA_VERSION_ARGS[str(docker["cuda_version"])])
    py = str(docker.get("python_version") or "3.11")
    return CONTAINER_METADATA[distro]["python"]["image"].format(spec_version=py)


def image_reachable(ref: str, env: dict) -> bool:
    first = ref.split("/")[0]
    if "/" in ref and ("." in first or ":" in first or first == "localhost"):
        full = ref  # already names its registry
    else:
        full = f"docker.io/{ref if '/' in ref else 'library/' + ref}"
    try:
        res = run([tool("skopeo"), "inspect", "--raw", "--retry-times", "0", f"docker://{full}"], env=env, check=False,
                  timeout=45, tail=0, quiet=True)
    except StepFailed:
        return False
    ok = res.returncode == 0
    say(f"public base docker://{full}: {'reachable' if ok else 'UNREACHABLE'}"
        + ("" if ok else f" ({(res.stdout.strip().splitlines() or ['?'])[-1][:160]})"))
    return ok


def local_image_exists(ref: str, env: dict) -> bool:
    return subprocess.run([tool("buildah"), "inspect", "--type", "image", ref], env={**os.environ, **env},
                          capture_output=True).returncode == 0


def uv_pins() -> set[str]:
    """sha256 pins of uv in BentoML's Dockerfile macros."""
    import bentoml._internal.container.frontend.dockerfile.templates as tpl
    text = (Path(tpl.__path__[0]) / "_macros.j2").read_text()
    if f"uv=={UV_VERSION}" not in text:
        raise StepFailed(f"BentoML's Dockerfile no longer pins uv=={UV_VERSION}: update UV_VERSION")
    return set(re.findall(r"--hash=sha256:([0-9a-f]{64})", text))


def fetch_uv(dest: Path) -> Path:
    """The uv binary of the pinned manylinux wheel (pip download from the package index, sha256 checked)."""
    wheels = WORK / "uv-wheel"
    shutil.rmtree(wheels, ignore_errors=True)
    run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--platform",
         "manylinux_2_17_x86_64", "--python-version", "3.11", f"uv=={UV_VERSION}", "-d", str(wheels)], tail=2,
        timeout=300)
    whl = next(wheels.glob("uv-*.whl"))
    digest = hashlib.sha256(whl.read_bytes()).hexdigest()
    if digest not in uv_pins():
        raise StepFailed(f"{whl.name} sha256 {digest} is not one of BentoML's pinned hashes")
    say(f"{whl.name}: sha256 {digest[:16]}... matches BentoML's pin")
    with zipfile.ZipFile(whl) as zf:
        data = zf.read(f"uv-{UV_VERSION}.data/scripts/uv")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    dest.chmod(0o755)
    return dest


def build_local_base(env: dict, mirror: str) -> None:
    rootfs = WORK / "base-rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    run([tool("debootstrap"), "--variant=minbase", "--include=python3,ca-certificates", "bookworm", str(rootfs),
         mirror], log=WORK / "debootstrap.log", tail=2, timeout=1800)
    (rootfs / "etc/apt/sources.list").write_text(
        f"deb {mirror} bookworm main\ndeb {mirror} bookworm-updates main\n"
        f"deb {mirror.replace('/debian', '/debian-security')} bookworm-security main\n")
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for p in (rootfs / junk).glob("*"):
            if p.is_file():
                p.unlink()
    fetch_uv(rootfs / "usr/local/bin/uv")
    py = subprocess.run([tool("chroot"), str(rootfs), "python3", "-V"], capture_output=True, text=True).stdout.strip()
    say(f"rootfs {rootfs}: {py}, uv {UV_VERSION}")
    tar = WORK / "base-rootfs.tar"
    with tarfile.open(tar, "w") as tf:
        tf.add(rootfs, arcname=".")
    say(f"rootfs tarball {human(tar.stat().st_size)}")
    ctr = run([tool("buildah"), "from", "scratch"], env=env, tail=0, quiet=True).stdout.strip().splitlines()[-1]
    try:
        run([tool("buildah"), "add", ctr, str(tar), "/"], env=env, tail=0)
        cfg = [tool("buildah"), "config",
               "--env", "LANG=C.UTF-8",
               "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               # the OS trust store (Debian's ca-certificates): uv and pip verify TLS against it, not a vendored copy
               "--env", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
               "--env", "UV_PYTHON_DOWNLOADS=never",  # use Debian's python3.11, never download one
               "--label", "org.opencontainers.image.title=triserve-base",
               "--label", "org.opencontainers.image.description=Debian bookworm minbase (debootstrap, upgraded) + "
                          f"python3.11 + ca-certificates + build-essential + git + uv {UV_VERSION}: local stand-in "
                          "for python:3.11-slim",
               "--label", f"ai.triserve.base.built-by=scripts/containerize.py (debootstrap, mirror {mirror})",
               "--cmd", "/bin/bash", ctr]
        run(cfg, env=env, tail=0)
        # Bring the base up to date (bookworm-updates, bookworm-security) and pre-install what BentoML's generated
        # Dockerfile apt-installs (ca-certificates gnupg2 bash build-essential git), so that step is a no-op: an
        # upgraded ca-certificates would rewrite /etc/ssl/certs/ca-certificates.crt, which is the host bundle
        # bind-mounted read-only during the image build ("Device or resource busy").
        run([tool("buildah"), "run", "--isolation", "chroot", ctr, "--", "sh", "-c",
             "export DEBIAN_FRONTEND=noninteractive && apt-get update -q && apt-get upgrade -y -q && "
             "apt-get install -y -q --no-install-recommends ca-certificates gnupg2 bash build-essential git && "
             "apt-get clean && rm -rf /var/lib/apt/lists/*"], env=env, log=WORK / "base-apt.log", tail=2,
            timeout=1800)
        run([tool("buildah"), "commit", "--rm", "-q", ctr, LOCAL_BASE], env=env, tail=1)
    except BaseException:
        subprocess.run([tool("buildah"), "rm", ctr], env={**os.environ, **env}, capture_output=True)
        raise
    shutil.rmtree(rootfs, ignore_errors=True)
    tar.unlink()


def host_index_options() -> dict:
    """http(s) package indexes configured on this host (no credentials), for the Bento's python options."""
    urls: dict[str, list[str]] = {"index": [], "extra": []}
    env_idx = os.environ.get("PIP_INDEX_URL") or os.environ.get("UV_INDEX_URL")
    if env_idx:
        urls["index"].append(env_idx)
    res = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    for line in res.stdout.splitlines():
        key, _, val = line.partition("=")
        val = val.strip().strip("'\"")
        if key.endswith("index-url") and not key.endswith("extra-index-url"):
            urls["index"].extend(val.split())
        elif key.endswith("extra-index-url"):
            urls["extra"].extend(val.split())
    out: dict = {}
    for kind, vals in urls.items():
        for u in vals:
            p = urlparse(u)
            if p.scheme not in ("http", "https"):
                say(f"package index {u}: not reachable from a build ({p.scheme}://), skipped; PyPI is used")
            elif p.username or p.password:
                say(f"package index {p.hostname}: has credentials, NOT carried into the Bento (use a build secret)")
            elif kind == "index":
                out["index_url"] = u
            else:
                out.setdefault("extra_index_url", []).append(u)
    if not out:
        say("no http(s) package index configured on this host: the build uses PyPI (https://pypi.org/simple)")
    return out


def derived_bentofile(src: Path, base_image: str | None, index: dict) -> Path:
    """bentofile + docker.base_image (local stand-in) + host index options, under .cache/containerize/."""
    if base_image is None and not index:
        return src
    data = yaml.safe_load(src.read_text())
    if base_image is not None:
        # base_image replaces distro/python_version/cuda_version/system_packages (BentoML ignores them with it)
        data["docker"] = {"base_image": base_image}
    if index:
        data.setdefault("python", {}).update(index)
    out = WORK / f"{src.stem}.derived.yaml"
    out.write_text(f"# generated by scripts/containerize.py from {src.name}: base image / package index for this "
                   "machine\n" + yaml.safe_dump(data, sort_keys=False))
    say(f"derived bentofile {out.relative_to(PROJECT_ROOT)} (docker.base_image={base_image}, index={index or 'PyPI'})")
    return out


def verify_bento(tag: str, env: dict) -> tuple[Path, int]:
    name, version = tag.split(":")
    path = BENTOML_HOME / "bentos" / name / version
    files = [p for p in path.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    weights = [p for p in files if p.suffix.lower() in WEIGHT_SUFFIXES]
    big = [p for p in files if p.stat().st_size > MAX_BENTO_FILE]
    info = yaml.safe_load((path / "bento.yaml").read_text())
    largest = max(files, key=lambda p: p.stat().st_size)
    say(f"{path}: {len(files)} files, {human(total)}; largest {largest.relative_to(path)} "
        f"({human(largest.stat().st_size)}); BentoML models: {info.get('models') or 'none'}")
    say("weights in the Bento: " + (", ".join(str(p.relative_to(path)) for p in weights) or "none (no "
        + "/".join(WEIGHT_SUFFIXES) + " file)"))
    say(f"labels: {json.dumps(info.get('labels'), sort_keys=True)}")
    if weights or big or info.get("models"):
        raise StepFailed(f"the Bento carries weights: {weights or big or info.get('models')}")
    run([tool("bentoml"), "list", name], env=env, tail=8)
    return path, total


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bentofile", default="bentofile.yaml")
    ap.add_argument("--registry", default="127.0.0.1:5000", help="host:port of the OCI registry to push to")
    ap.add_argument("--repository", default="triserve", help="repository in the registry")
    ap.add_argument("--base-image", default="auto",
                    help="'auto' (public base if reachable, else the local debootstrap stand-in), 'local' (always the "
                         "stand-in), 'bentofile' (as the bentofile says), or an image reference")
    ap.add_argument("--debian-mirror", default="http://deb.debian.org/debian")
    ap.add_argument("--rebuild-base", action="store_true", help="bootstrap the local base again")
    ap.add_argument("--tls-verify", action="store_true", help="verify TLS when pushing (default: off for a "
                                                               "loopback registry)")
    ap.add_argument("--build-only", action="store_true", help="stop after the Bento checks (no image)")
    ap.add_argument("--no-push", action="store_true", help="build the image, do not push")
    ap.add_argument("--verbose", action="store_true", help="stream the image build log")
    ap.add_argument("--check-tools", action="store_true",
                    help="resolve every tool the steps run (project environment / system directories, never the "
                         "caller's PATH), print name, path and version, install nothing, exit 1 if one is missing")
    ap.add_argument("--check-bentofiles", action="store_true",
                    help="exit 1 unless every bentofile*.yaml installs its variant's lock and the locks are current")
    args = ap.parse_args(argv)
    use_project_path()
    if args.check_tools:
        sys.exit(check_tools(TOOLS, PYTHON_TOOLS))
    if args.check_bentofiles:
        found = sorted({line for path in sorted(PROJECT_ROOT.glob("bentofile*.yaml"))
                        for line in bentofile_lock_problems(path)})
        for line in found:
            print(line)
        if not found:
            print("bentofiles: each installs locks/serving-<variant>.txt; the locks satisfy pyproject.toml")
        sys.exit(1 if found else 0)

    bentofile = (PROJECT_ROOT / args.bentofile).resolve()
    bf = yaml.safe_load(bentofile.read_text())
    WORK.mkdir(parents=True, exist_ok=True)
    total = 4 if args.build_only else (6 if args.no_push else 8)
    steps = Steps(f"containerize {bentofile.name} -> {args.registry}/{args.repository}", total)
    env = container_env()
    os.environ.update({k: env[k] for k in ("BENTOML_HOME", "BENTOML_DO_NOT_TRACK")})

    with steps.step("tools (buildah, skopeo, debootstrap, docker-registry; bentoml and uv of the project)"):
        ensure_system_tools(TOOLS)
        for name in PYTHON_TOOLS:
            say(f"{name}: {venv_tool(name)}")
        say(f"PATH of the child processes: {project_path()}")
        run([tool("buildah"), "--version"], tail=1, quiet=False)
        say(f"storage: {env['CONTAINERS_STORAGE_CONF']} (driver vfs), isolation chroot, BENTOML_HOME {BENTOML_HOME}")

    with steps.step("base image"):
        wanted = public_base(bf)
        base: str | None = None
        if args.base_image == "bentofile":
            say(f"as the bentofile says: {wanted}")
        elif args.base_image not in ("auto", "local"):
            base = args.base_image
            say(f"given: {base}")
        elif args.base_image == "auto" and (args.build_only or image_reachable(wanted, env)):
            say(f"using the bentofile's base {wanted}" + (" (build only: not checked)" if args.build_only else ""))
        elif "cuda" in wanted and args.base_image == "auto":
            raise StepFailed(f"{wanted} is unreachable and there is no local CUDA stand-in: pass --base-image with "
                             "a mirror of it, or --build-only")
        else:
            base = LOCAL_BASE
            if local_image_exists(LOCAL_BASE, env) and not args.rebuild_base:
                say(f"local stand-in {LOCAL_BASE} already built (--rebuild-base to bootstrap it again)")
            else:
                say(f"bootstrapping the local stand-in {LOCAL_BASE} with debootstrap ({args.debian_mirror})")
                build_local_base(env, args.debian_mirror)
        index = host_index_options()
        bento_file = derived_bentofile(bentofile, base, index)

    with steps.step("bentoml build (label git_commit)"):
        found = bentofile_lock_problems(bentofile) if bentofile.parent == PROJECT_ROOT else []
        if found:
            raise StepFailed("; ".join(found))
        sha, dirty = git_commit()
        labels = ["--label", f"git_commit={sha}"] + (["--label", "git_dirty=true"] if dirty else [])
        res = run([tool("bentoml"), "build", "-f", str(bento_file), *labels, "-o", "tag", str(PROJECT_ROOT)], env=env,
                  tail=1, cwd=PROJECT_ROOT, timeout=900)
        tag = next(line.split("__tag__:", 1)[1].strip() for line in res.stdout.splitlines() if "__tag__:" in line)
        version = tag.split(":", 1)[1]
        say(f"Bento {tag} (git_commit={sha[:12]}{', dirty tree' if dirty else ''})")

    with steps.step("Bento checks: versioned, no weights inside; bentoml list"):
        bento_path, bento_size = verify_bento(tag, env)
    if args.build_only:
        dockerfile = bento_path / "env/docker/Dockerfile"
        say("Dockerfile base: " + next(line for line in dockerfile.read_text().splitlines() if line.startswith("FROM")))
        steps.summary()
        return

    image = f"{args.repository}:{version}"
    with steps.step(f"bentoml containerize --backend buildah -> {image}"):
        if not HOST_CA_BUNDLE.is_file():
            raise StepFailed(f"{HOST_CA_BUNDLE} missing")
        cmd = [tool("bentoml"), "containerize", tag, "--backend", "buildah", "-t", image,
               "--opt", f"volume={HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro",
               "--opt", "isolation=chroot",
               "--opt", f"label=org.opencontainers.image.revision={sha}",
               "--opt", f"label=org.opencontainers.image.version={version}",
               "--opt", f"label=ai.triserve.bento={tag}",
               "--opt", f"label=ai.triserve.base-image={base or wanted}",
               # the base image's own title/description would otherwise be inherited
               "--opt", "label=org.opencontainers.image.title=triserve",
               "--opt", f"label=org.opencontainers.image.description=triserve Bento {tag} (bentoml containerize)",
               # the code's licence; the weights are not in the image (pulled at startup, each model's licence in
               # its manifest, /v1/models and its OCI artefact's annotations)
               "--opt", f"label=org.opencontainers.image.licenses={project_license()}",
               "--opt", "label=ai.triserve.weights=pulled at startup from TRISERVE_REGISTRY_URI; licences per model "
                        "in /v1/models"]
        info_labels = yaml.safe_load((bento_path / "bento.yaml").read_text()).get("labels") or {}
        for key, value in sorted(info_labels.items()):  # the Bento's labels (git commit, model aliases, variant)
            cmd += ["--opt", f"label=ai.triserve.bento.{key}={value}"]
        log = WORK / f"containerize-{version}.log"
        res = run(cmd, env=env, cwd=PROJECT_ROOT, log=log, tail=0, timeout=3600, stream=args.verbose)
        if not args.verbose:  # the Dockerfile steps buildah ran (full output in the log)
            for line in res.stdout.splitlines():
                if re.search(r"\bSTEP \d+/\d+:|COMMIT|Successfully (built|tagged)", line):
                    print("      | " + line.replace("INFO: ", "").strip()[:160], flush=True)
        img = json.loads(run([tool("buildah"), "inspect", "--type", "image", f"localhost/{image}"], env=env, tail=0,
                             quiet=True).stdout)
        say(f"image localhost/{image} id {img['FromImageID'][:12]}; full build log {log.relative_to(PROJECT_ROOT)}")
        run([tool("buildah"), "images", f"localhost/{image}"], env=env, tail=3)

    with steps.step(f"registry {args.registry}"):
        ensure_registry(args.registry)

    if args.no_push:
        steps.summary()
        return
    dest = f"{args.registry}/{args.repository}:{version}"
    with steps.step(f"buildah push -> docker://{dest}"):
        digest_file = WORK / f"digest-{version}"
        run([tool("buildah"), "push", f"--tls-verify={'true' if args.tls_verify else 'false'}", "--digestfile",
             str(digest_file), f"localhost/{image}", f"docker://{dest}"], env=env, tail=3, timeout=1800)
        say(f"pushed {dest}@{digest_file.read_text().strip()}")

    with steps.step(f"skopeo inspect docker://{dest}"):
        tls = f"--tls-verify={'true' if args.tls_verify else 'false'}"
        res = run([tool("skopeo"), "inspect", tls, f"docker://{dest}"], env=env, tail=0)
        info = json.loads(res.stdout)
        shown = {k: info.get(k) for k in ("Name", "Digest", "RepoTags", "Created", "Architecture", "Os", "Labels")}
        shown["Env"] = [e for e in info.get("Env") or [] if e.startswith(("TRISERVE_", "BENTO"))]
        print(json.dumps(shown, indent=2), flush=True)
        raw = json.loads(run([tool("skopeo"), "inspect", "--raw", tls, f"docker://{dest}"], env=env, tail=0,
                             quiet=True).stdout)
        layer_bytes = sum(layer.get("size", 0) for layer in raw.get("layers", []))
        say(f"{len(raw.get('layers', []))} layers, {human(layer_bytes)} compressed; Bento {human(bento_size)}")
        (WORK / "last-image.json").write_text(json.dumps({"image": dest, "digest": info.get("Digest"),
                                                          "bento": tag, "version": version}, indent=2))
    steps.summary()
    print(f"\nimage: {dest}  ({info.get('Digest')})\nsmoke test it: python -m scripts.smoke_image --image {dest}")


if __name__ == "__main__":
    try:
        main()
    except StepFailed as exc:
        die(str(exc))
