"""End-to-end smoke test of the pushed image (too heavy for CI; run after `make image`): `make smoke-image`.

    python -m scripts.smoke_image                                    # the image the last `make image` pushed
    python -m scripts.smoke_image --image 127.0.0.1:5000/triserve:<version>

Steps (each printed with its time):
  1. tools: podman + runc + skopeo + docker-registry (apt-get installs missing ones, and says so);
  2. the OCI registry on 127.0.0.1:5000 (started if not answering, as in scripts/containerize.py);
  3. publish the default models into the same registry as OCI artifacts:
     `python -m triserve.models.cli copy --all --aliases --from models/store --to oci://127.0.0.1:5000/triserve-models`;
  4. `podman pull` the image from the registry into a separate, empty containers-storage (so what runs is what was
     pushed, not the builder's local copy) and compare its digest with the registry's (skopeo inspect);
  5. `podman run` it (host network; HTTP and gRPC bound to 127.0.0.1 on free ports) with
     TRISERVE_REGISTRY_URI=oci://127.0.0.1:5000/triserve-models: the container pulls and verifies the weights into
     its cache, loads and warms the models;
  6. wait for /readyz (prints the pull lines of the container log);
  7. one request per task: /v1/detect, /v1/classify, /v1/forecast (+ /v1/models), and on the gRPC port
     grpc.health.v1 Check + one triserve.v1 Classify;
  8. the image's Python packages (name==version of every distribution the server's interpreter sees) equal the lock
     the tests ran against, locks/serving-<cpu|gpu>.txt (installer tools pip/setuptools/wheel/uv apart);
  9. stop and remove the container (podman stop of the container id this script started) and the pulled image,
     unless --keep.

Why podman: there is no Docker engine here. Rootful podman works on this VM with runc (crun refuses the host's
hybrid cgroup layout) and a containers.conf without default ulimits (root here lacks CAP_SYS_RESOURCE, so raising
RLIMIT_NOFILE/NPROC fails); scripts/imagetools.py writes that config under .cache/containers.
"""
from __future__ import annotations

import argparse
import base64
import io
import json
import math
import re
import sys
import time
from typing import Any

import httpx

from scripts.drills.ports import held_port
from scripts.imagetools import (
    CACHE,
    PROJECT_ROOT,
    StepFailed,
    Steps,
    check_tools,
    container_env,
    die,
    ensure_registry,
    ensure_system_tools,
    human,
    run,
    say,
    system_tool,
    use_project_path,
)

# binary -> Debian package; resolved to absolute paths in the system directories, never on the caller's PATH
# (scripts/imagetools.py "tool resolution"); triserve.models.cli runs as `sys.executable -m triserve.models.cli`
TOOLS = {"podman": "podman", "runc": "runc", "skopeo": "skopeo", "docker-registry": "docker-registry"}


def tool(name: str) -> str:
    return system_tool(name, TOOLS.get(name))


def shapes_png() -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (320, 240), (30, 30, 30))
    d = ImageDraw.Draw(img)
    d.rectangle([40, 30, 140, 120], fill=(220, 40, 40))
    d.ellipse([180, 100, 280, 200], fill=(40, 200, 60))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def requests(base: str) -> list[dict]:
    out = []
    series = [round(350 + 0.13 * i + 3 * math.sin(i * math.pi / 6), 2) for i in range(48)]
    calls: list[tuple[str, dict[str, Any]]] = [
        ("/v1/detect", {"images": [{"data": base64.b64encode(shapes_png()).decode()}], "conf_threshold": 0.3}),
        ("/v1/classify", {"texts": ["what is my account balance", "book a flight to paris"], "top_k": 3}),
        ("/v1/forecast", {"values": series, "start": "1996-01-01T00:00:00", "frequency": "MS", "horizon": 12}),
    ]
    with httpx.Client(base_url=base, timeout=60) as client:
        for path, body in calls:
            t0 = time.perf_counter()
            r = client.post(path, json=body, headers={"X-Request-ID": f"smoke-{path.rsplit('/', 1)[-1]}"})
            ms = (time.perf_counter() - t0) * 1000
            data = r.json()
            if r.status_code != 200:
                raise StepFailed(f"POST {path}: {r.status_code} {json.dumps(data)[:400]}")
            model = data.get("model", {})
            if path == "/v1/detect":
                dets = data["results"][0]["detections"]
                summary = f"{len(dets)} detections: " + ", ".join(
                    f"{d['label']} {d['score']:.2f} {[round(v) for v in d['box']]}" for d in dets[:4])
            elif path == "/v1/classify":
                summary = "; ".join(f"{t!r} -> {res['label']} ({res['score']:.3f})"
                                    for t, res in zip(body["texts"], data["results"]))
            else:
                pts = data["forecast"]
                first = ", ".join(f"{p['timestamp'][:7]} {p['point']:.2f}" for p in pts[:3])
                summary = f"{len(pts)} points: {first} ..."
            say(f"POST {path} -> {r.status_code} in {ms:.0f} ms, model {model.get('name')}:{model.get('version')}, "
                f"degraded={data.get('degraded')}, request_id={data.get('request_id')}")
            say(f"  {summary}")
            out.append({"path": path, "status": r.status_code, "ms": round(ms, 1), "model": model,
                        "degraded": data.get("degraded"), "summary": summary})
        models = client.get("/v1/models").json()
        say("GET /v1/models -> " + ", ".join(
            f"{slot}={m['name']}:{m['version']} ({m['provider']})" for slot, m in models["models"].items()))
    return out


def grpc_checks(port: int) -> dict:
    """grpc.health.v1 and one typed Classify call on the container's gRPC port."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from triserve.services.protocols.generated import triserve_pb2, triserve_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        status = health_pb2.HealthCheckResponse.ServingStatus.Name(health.status)
        t0 = time.perf_counter()
        reply = triserve_pb2_grpc.TriserveStub(channel).Classify(
            triserve_pb2.ClassifyRequest(texts=["cancel my reservation"], top_k=2),
            metadata=[("x-request-id", "smoke-grpc")], timeout=30)
        ms = (time.perf_counter() - t0) * 1000
    say(f"gRPC 127.0.0.1:{port}: grpc.health.v1 {status}; triserve.v1.Triserve/Classify -> "
        f"{reply.results[0].label} ({reply.results[0].score:.3f}) from {reply.model.name}:{reply.model.version} "
        f"in {ms:.0f} ms")
    if status != "SERVING":
        raise StepFailed(f"gRPC health {status}")
    return {"health": status, "label": reply.results[0].label, "ms": round(ms, 1)}


# name -> version of every distribution the container's server interpreter sees (its `pip freeze`, without pip)
FREEZE = ("import importlib.metadata as m, json; "
          "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))")
INSTALLER_TOOLS = {"pip", "setuptools", "wheel", "uv"}


def compare_with_lock(installed: dict[str, str]) -> dict:
    """The image's distributions against its variant's lock (the variant: which ONNX Runtime it has). Dies unless
    they are the same set at the same versions (installer tools apart)."""
    from packaging.utils import canonicalize_name

    from scripts.lock import LOCK_DIR, read_pins

    have = {str(canonicalize_name(name)): version for name, version in installed.items()}
    variant = "gpu" if "onnxruntime-gpu" in have else "cpu"
    lock = LOCK_DIR / f"serving-{variant}.txt"
    want = read_pins(lock)
    wrong = {name: (version, have.get(name)) for name, version in want.items() if have.get(name) != version}
    extra = sorted(set(have) - set(want) - INSTALLER_TOOLS)
    say(f"{len(have)} distributions in the image; {lock.relative_to(PROJECT_ROOT)}: {len(want)} pins; "
        f"differing {wrong or 'none'}; not in the lock {extra or 'none'} (installer tools "
        f"{sorted(set(have) & INSTALLER_TOOLS) or 'none'})")
    if wrong or extra:
        die(f"the image's packages differ from {lock.name}: (locked, in image) {wrong}; unlocked {extra}")
    return {"lock": lock.name, "pins": len(want), "equal": True}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--image", help="registry/repository:tag (default: the last image scripts.containerize pushed)")
    ap.add_argument("--registry", default="127.0.0.1:5000")
    ap.add_argument("--models-prefix", default="triserve-models", help="repository prefix of the model artifacts")
    ap.add_argument("--models-from", default="models/store", help="local registry to publish the models from")
    ap.add_argument("--ready-timeout", type=float, default=900)
    ap.add_argument("--keep", action="store_true", help="leave the container running")
    ap.add_argument("--check-tools", action="store_true",
                    help="resolve every tool the steps run, print name, path and version, install nothing, exit 1 if "
                         "one is missing")
    args = ap.parse_args(argv)
    use_project_path()
    if args.check_tools:
        sys.exit(check_tools(TOOLS, python_tools=()))

    image = args.image
    if image is None:
        last = CACHE / "containerize" / "last-image.json"
        if not last.is_file():
            die("no --image and no .cache/containerize/last-image.json: run `make image` first")
        image = json.loads(last.read_text())["image"]
    models_uri = f"oci://{args.registry}/{args.models_prefix}"
    steps = Steps(f"smoke test {image} with models from {models_uri}", 9)
    env = container_env("smoke-storage")  # a separate, initially empty storage: run what the registry holds

    with steps.step("tools (podman, runc, skopeo, docker-registry)"):
        ensure_system_tools(TOOLS)
        run([tool("podman"), "--version"], tail=1)
        run([tool("runc"), "--version"], tail=1)

    with steps.step(f"registry {args.registry}"):
        ensure_registry(args.registry)

    with steps.step(f"publish the default models to {models_uri}"):
        src = PROJECT_ROOT / args.models_from
        if not src.is_dir():
            raise StepFailed(f"{src} missing: build the models first (make models)")
        run([sys.executable, "-m", "triserve.models.cli", "copy", "--all", "--aliases", "--from", args.models_from,
             "--to", models_uri], cwd=PROJECT_ROOT, tail=8, timeout=1800)
        run([sys.executable, "-m", "triserve.models.cli", "--registry", models_uri, "list"], cwd=PROJECT_ROOT, tail=10,
            timeout=300)

    with steps.step(f"podman pull {image} (separate storage)"):
        tls = "--tls-verify=false"
        remote = json.loads(run([tool("skopeo"), "inspect", tls, f"docker://{image}"], tail=0, quiet=True).stdout)
        run([tool("podman"), "pull", tls, f"docker://{image}"], env=env, tail=3, timeout=1800)
        local = json.loads(run([tool("podman"), "image", "inspect", image], env=env, tail=0, quiet=True).stdout)[0]
        say(f"registry digest {remote['Digest']}; pulled image digest {local.get('Digest')}; "
            f"size {human(local.get('Size', 0))}")
        if local.get("Digest") != remote["Digest"]:
            raise StepFailed("pulled digest differs from the registry's")

    # held until this process exits (the container binds them with SO_REUSEADDR meanwhile; --keep leaves them to it)
    port, grpc_port = held_port(), held_port()
    name = f"triserve-smoke-{int(time.time())}"
    with steps.step(f"podman run {name} (HTTP 127.0.0.1:{port}, gRPC 127.0.0.1:{grpc_port})"):
        envs = {
            "TRISERVE_REGISTRY_URI": models_uri,
            "BENTOML_HOST": "127.0.0.1", "BENTOML_PORT": str(port),
            "TRISERVE_GRPC__HOST": "127.0.0.1", "TRISERVE_GRPC__PORT": str(grpc_port),
        }
        cmd = [tool("podman"), "run", "-d", "--name", name, "--network", "host"]
        for k, v in envs.items():
            cmd += ["-e", f"{k}={v}"]
        cid = run(cmd + [image], env=env, tail=1).stdout.strip().splitlines()[-1]
        say(f"container {cid[:12]} (stop: podman stop {cid[:12]}; with "
            f"CONTAINERS_STORAGE_CONF={env['CONTAINERS_STORAGE_CONF']})")

    base = f"http://127.0.0.1:{port}"
    try:
        with steps.step("wait for /readyz (weights pulled from the registry, verified, loaded, warmed)"):
            t0 = time.monotonic()
            status = None
            while time.monotonic() - t0 < args.ready_timeout:
                state = json.loads(run([tool("podman"), "inspect", "--format", "{{json .State}}", cid], env=env,
                                       tail=0, quiet=True).stdout)
                if not state.get("Running"):
                    run([tool("podman"), "logs", "--tail", "60", cid], env=env, tail=60, check=False)
                    raise StepFailed(f"container exited: {state.get('ExitCode')} {state.get('Error')}")
                try:
                    status = httpx.get(f"{base}/readyz", timeout=2).status_code
                except httpx.HTTPError:
                    status = None
                if status == 200:
                    break
                time.sleep(2)
            else:
                run([tool("podman"), "logs", "--tail", "60", cid], env=env, tail=60, check=False)
                raise StepFailed(f"/readyz not 200 after {args.ready_timeout}s (last {status})")
            say(f"/readyz 200 after {time.monotonic() - t0:.1f}s")
            logs = run([tool("podman"), "logs", cid], env=env, tail=0, quiet=True, check=False).stdout
            shown = [ln for ln in logs.splitlines() if re.search(
                r"model cache|pull|verif|INTEGRITY|warm|Starting production|grpc", ln, re.I)]
            for line in shown[-15:]:
                say("  log| " + line.strip()[:220])
            # weights: none in the image, six in the cache the container filled from the registry
            run([tool("podman"), "exec", cid, "sh", "-c",
                 "echo \"*.onnx in the image's bento and venv (besides onnxruntime's own 3 tiny examples in "
                 "onnxruntime/datasets): $(find /home/bentoml/bento /app -name '*.onnx' "
                 "-not -path '*/site-packages/onnxruntime/datasets/*' | wc -l)\"; "
                 "du -sh $TRISERVE_MODEL_CACHE_DIR; find $TRISERVE_MODEL_CACHE_DIR -name '*.onnx' | sort; "
                 "tail -n1 $TRISERVE_MODEL_CACHE_DIR/minilm-intent/alias_log.jsonl"], env=env, tail=12, check=False)

        with steps.step("one request per task: /v1/detect, /v1/classify, /v1/forecast; gRPC health + Classify"):
            results = requests(base)
            grpc_result = grpc_checks(grpc_port)

        with steps.step("the image's packages == locks/serving-<variant>.txt"):
            freeze = run([tool("podman"), "exec", cid, "python", "-c", FREEZE], env=env, tail=0, quiet=True).stdout
            packages = compare_with_lock(json.loads(freeze))
            (CACHE / "containerize" / "last-smoke.json").write_text(json.dumps(
                {"image": image, "models": models_uri, "results": results, "grpc": grpc_result,
                 "packages": packages}, indent=2))
    finally:
        if args.keep:
            say(f"--keep: container {cid[:12]} left running on {base}")
        else:
            with steps.step(f"stop container {cid[:12]}"):
                run([tool("podman"), "stop", "-t", "20", cid], env=env, tail=1, check=False, timeout=120)
                run([tool("podman"), "rm", cid], env=env, tail=1, check=False, timeout=120)
                # the pulled image too (vfs keeps full copies): the next run pulls from the registry again
                run([tool("podman"), "rmi", image], env=env, tail=1, check=False, timeout=300)
    steps.summary()


if __name__ == "__main__":
    try:
        main()
    except StepFailed as exc:
        die(str(exc))
