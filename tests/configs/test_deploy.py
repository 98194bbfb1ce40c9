"""Packaging and deployment configs, validated offline.

* bentofile.yaml / bentofile.gpu.yaml: BentoML's own BentoBuildConfig (unknown keys are errors), python.packages
  == the serving set of pyproject.toml plus the variant's ONNX Runtime extra (names and versions), every TRISERVE_*
  env a valid Settings override, and a real `bentoml build` into a temp BENTOML_HOME that must give a versioned Bento
  without weights.
* pyproject.toml / Makefile: onnxruntime (`cpu` extra) and onnxruntime-gpu (`gpu` extra) never both; `make install`
  picks exactly one.
* configs/deploy/k8s/*.yaml (the hardware-neutral base): the Kubernetes OpenAPI schemas shipped by
  kubernetes-validate (strict: unknown fields are errors) for the oldest and newest Kubernetes version tested, plus
  the wiring between them (selectors, ports, probes, cache volume, HPA metric == the metric the service exports ==
  the prometheus-adapter rule). The overlays (GPU, CPU) and the operator components: test_k8s_operator.py.
* configs/deploy/yatai/bentodeployment.yaml, configs/deploy/bentocloud.yaml and the adapter's rule config: the JSON
  schemas in configs/deploy/schemas/ (each says which upstream source it was written from); embedded Kubernetes
  types resolve to kubernetes-validate's definitions. The BentoCloud file is also structured by BentoML's own
  CreateDeploymentSchema.
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "configs" / "deploy"
K8S_DIR = DEPLOY / "k8s"
SCHEMAS = DEPLOY / "schemas"

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (dev extra) not installed")
jsonschema = pytest.importorskip("jsonschema")
referencing = pytest.importorskip("referencing")

K8S_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
K8S_FILES = sorted(p for p in K8S_DIR.glob("*.yaml") if p.name != "kustomization.yaml")


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _docs() -> dict[str, dict]:
    out = {}
    for path in K8S_FILES:
        for doc in yaml.safe_load_all(path.read_text()):
            out[doc["kind"]] = doc
    return out


def _k8s_registry(version: str):
    """referencing registry serving kubernetes-validate's definitions at https://kubernetes.io/api/_definitions.json."""
    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{version}-local-strict"
    defs = json.loads((base / "_definitions.json").read_text())
    resource = referencing.Resource.from_contents(defs)
    return referencing.Registry().with_resource("https://kubernetes.io/api/_definitions.json", resource)


def _validator(schema_name: str, version: str = K8S_VERSIONS[0]):
    schema = json.loads((SCHEMAS / schema_name).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, registry=_k8s_registry(version))


def _errors(validator, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def _settings_env_ok(envs: dict[str, str], monkeypatch) -> None:
    """Every TRISERVE_* variable must be a real Settings field (extra='forbid') with a valid value."""
    from triserve.configs.settings import Settings

    for key in [k for k in os.environ if k.startswith("TRISERVE_")]:
        monkeypatch.delenv(key)
    for key, value in envs.items():
        if key.startswith("TRISERVE_"):
            monkeypatch.setenv(key, value)
    s = Settings()
    if "TRISERVE_REGISTRY_URI" in envs:
        assert s.registry_uri == envs["TRISERVE_REGISTRY_URI"]
    if "TRISERVE_MODEL_CACHE_DIR" in envs:
        assert str(s.model_cache_dir) == envs["TRISERVE_MODEL_CACHE_DIR"]


def _service_names() -> set[str]:
    """@bentoml.service(name=...) of the gateway and the runner, read from the source (no heavy imports)."""
    names = set()
    for path in (ROOT / "services" / "gateway.py", ROOT / "runners" / "service.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "service":
                for kw in node.keywords:
                    if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                        names.add(kw.value.value)
    return names


# ----------------------------------------------------------------------------------------------------- bentofiles

def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pyproject_deps() -> list[str]:
    return _pyproject()["dependencies"]


def _req_name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req.strip(), maxsplit=1)[0].lower()


def _req_key(req: str) -> tuple[str, str, str]:
    """(canonical name, version specifier, marker) of a requirement: what 'same package, same version' means."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    r = Requirement(req)
    return canonicalize_name(r.name), str(r.specifier), str(r.marker or "")


ORT = {"onnxruntime", "onnxruntime-gpu"}  # both install the `onnxruntime` import package


@pytest.mark.parametrize("bentofile", ["bentofile.yaml", "bentofile.gpu.yaml"])
def test_bentofile_is_valid_for_bentoml(bentofile, monkeypatch):
    from bentoml._internal.bento.build_config import BentoBuildConfig

    path = ROOT / bentofile
    with open(path) as fh:
        cfg = BentoBuildConfig.from_yaml(fh)  # BentoML's own parser: unknown keys and bad values raise
    assert cfg.service == "triserve.services.gateway:Gateway"
    assert cfg.name == "triserve"
    raw = _load(path)
    for pattern in ("services/**/*.py", "kernel/**/*.py", "runners/**/*.py", "models/*.py", "models/stores/*.py",
                    "models/manifest.schema.json", "configs/*.py", "configs/*.yaml",
                    "services/protocols/protos/*.proto"):
        assert pattern in raw["include"], pattern
    for pattern in ("models/store/", ".cache/", ".venv/", "tests/", "scripts/", "*.onnx", "*.pt"):
        assert pattern in raw["exclude"], pattern
    if bentofile == "bentofile.gpu.yaml":
        assert raw["labels"]["variant"] == "gpu" and raw["docker"]["cuda_version"].startswith("12")
    else:
        assert raw["labels"]["variant"] == "cpu"
    envs = {e["name"]: str(e["value"]) for e in raw["envs"]}
    assert {"TRISERVE_REGISTRY_URI", "TRISERVE_MODEL_CACHE_DIR", "TRISERVE_SLOTS__INTENT__REF"} <= set(envs)
    _settings_env_ok(envs, monkeypatch)


@pytest.mark.parametrize("bentofile", ["bentofile.yaml", "bentofile.gpu.yaml"])
def test_bentofile_installs_its_variants_lock(bentofile):
    """The Bento installs the lock the tests ran against: requirements_txt = locks/serving-<variant>.txt, BentoML's
    own resolution off, no package listed beside it; the lock pins every serving requirement of pyproject.toml
    (dependencies + the variant's extra) inside its range, and exactly one ONNX Runtime, the variant's."""
    from packaging.requirements import Requirement

    from scripts.containerize import bentofile_lock_problems
    from scripts.lock import read_pins

    assert bentofile_lock_problems(ROOT / bentofile) == []
    raw = _load(ROOT / bentofile)
    variant = raw["labels"]["variant"]
    pins = read_pins(ROOT / raw["python"]["requirements_txt"])
    for req in map(Requirement, _pyproject_deps() + _pyproject()["optional-dependencies"][variant]):
        name = _req_key(str(req))[0]
        assert name in pins, req
        assert req.specifier.contains(pins[name], prereleases=True), (req, pins[name])
    assert [name for name in pins if name in ORT] == (["onnxruntime-gpu"] if variant == "gpu" else ["onnxruntime"])
    for heavy in ("torch", "ultralytics", "transformers", "pytest"):  # the serving set stays light
        assert heavy not in pins, heavy


def test_bentofile_check_catches_a_drift(tmp_path):
    """A bentofile that lists packages, or re-enables BentoML's resolution, or a lock pinned outside pyproject.toml's
    range: each is reported (make bento / make image refuse to build)."""
    import shutil

    from scripts.containerize import bentofile_lock_problems

    shutil.copytree(ROOT / "locks", tmp_path / "locks")
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    text = (ROOT / "bentofile.yaml").read_text()
    (tmp_path / "bentofile.yaml").write_text(text)
    assert bentofile_lock_problems(tmp_path / "bentofile.yaml", root=tmp_path) == []
    (tmp_path / "bentofile.yaml").write_text(text.replace("lock_packages: false", "lock_packages: true"))
    assert any("lock_packages" in p for p in bentofile_lock_problems(tmp_path / "bentofile.yaml", root=tmp_path))
    (tmp_path / "bentofile.yaml").write_text(text)
    lock = tmp_path / "locks" / "serving-cpu.txt"
    lock.write_text(lock.read_text().replace("\nbentoml==1.4.40 ", "\nbentoml==1.4.39 "))
    found = bentofile_lock_problems(tmp_path / "bentofile.yaml", root=tmp_path)
    assert any(p.startswith("locks/serving-cpu.txt pins bentoml==1.4.39 outside bentoml") for p in found), found
    assert any("bentoml: locks/serving-cpu.txt pins 1.4.39, locks/dev-cpu.txt 1.4.40" in p for p in found), found


# ---------------------------------------------------------------------------------------- ONNX Runtime: one of two

def test_cpu_and_gpu_extras_are_mutually_exclusive_onnxruntime_choices():
    project = _pyproject()
    extras = project["optional-dependencies"]
    ort_in = {name: {_req_key(r)[0] for r in reqs} & ORT for name, reqs in extras.items()}
    assert ort_in["cpu"] == {"onnxruntime"} and ort_in["gpu"] == {"onnxruntime-gpu"}
    assert not {_req_key(r)[0] for r in project["dependencies"]} & ORT  # never in the base set
    assert all(not found for name, found in ort_in.items() if name not in ("cpu", "gpu")), ort_in
    # and nothing the other extras install pulls one in (requirements of what is installed here, transitively)
    for extra in ("cpu", "gpu"):
        assert _closure_ort(["triserve"], {extra, "export", "dev"}) == ({"onnxruntime"} if extra == "cpu"
                                                                      else {"onnxruntime-gpu"}), extra


def _closure_ort(roots: list[str], root_extras: set[str]) -> set[str]:
    """ONNX Runtime distributions required by `roots[extras]`, following the installed distributions' metadata."""
    import importlib.metadata as md

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: set[str] = set()
    seen: set[tuple[str, frozenset]] = set()
    todo = [(canonicalize_name(r), frozenset(root_extras)) for r in roots]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        if name in ORT:
            found.add(name)
            continue
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is not None and not any(req.marker.evaluate(env) for env in envs):
                continue
            todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return found


def _install_lines(*make_args: str) -> list[str]:
    make = next(p for p in ("/usr/bin/make", "/bin/make", "/usr/local/bin/make") if os.access(p, os.X_OK))
    res = subprocess.run([make, "-n", "-B", "install", *make_args], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env={"HOME": os.environ.get("HOME", "/root"), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    return [ln for ln in res.stdout.splitlines() if "pip install" in ln or "pip uninstall" in ln]


@pytest.mark.skipif(not any(os.access(p, os.X_OK) for p in ("/usr/bin/make", "/bin/make", "/usr/local/bin/make")),
                    reason="make is not installed")
def test_default_install_selects_exactly_one_onnxruntime():
    """`make install` (what make serve / make test / .ci/run use) installs the cpu extra and removes the GPU build;
    ORT=gpu the reverse; the installed environment holds exactly one of the two distributions."""
    import importlib.metadata as md

    from scripts.lock import read_pins

    for args, chosen, removed in (((), "cpu", "onnxruntime-gpu"), (("ORT=gpu",), "gpu", "onnxruntime")):
        lines = _install_lines(*args)
        # the third-party set: the variant's dev lock, installed by uv, pip installing the same lock when uv fails
        locked = [ln for ln in lines if " -r locks/" in ln]
        assert len(locked) == 1 and "uv pip install" in locked[0], lines
        uv, fallback = locked[0].split(" || ")
        assert uv.split()[-1] == fallback.split()[-1] == f"locks/dev-{chosen}.txt", lines
        ort = set(read_pins(ROOT / "locks" / f"dev-{chosen}.txt")) & ORT
        assert ort == {chosen.replace("cpu", "onnxruntime").replace("gpu", "onnxruntime-gpu")}, locked
        project = [ln for ln in lines if "--no-deps -e . -e ./client" in ln]  # then the project on top, no resolution
        assert len(project) == 1 and lines.index(locked[0]) < lines.index(project[0]), lines
        uninstall = [ln for ln in lines if "pip uninstall" in ln]
        assert uninstall and uninstall[0].split()[-1] == removed
        assert lines.index(uninstall[0]) < lines.index(locked[0])  # removed before the other is installed
    make = next(p for p in ("/usr/bin/make", "/bin/make", "/usr/local/bin/make") if os.access(p, os.X_OK))
    bad = subprocess.run([make, "-n", "install", "ORT=both"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "ORT must be cpu or gpu" in bad.stderr
    installed = set()
    for name in ORT:
        try:
            md.distribution(name)
            installed.add(name)
        except md.PackageNotFoundError:
            pass
    assert len(installed) == 1, f"this environment has {installed or 'no'} ONNX Runtime distribution(s)"
    ci = (ROOT / ".ci" / "run").read_text()
    # the README's command as written, the Makefile's default ORT=cpu, make from the system directories only
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^make test$", ci, re.M) and re.search(r"^ORT \?= cpu$", makefile, re.M)
    assert re.search(r'^export PATH="\$\(IFS=:; echo "\$\{SYSTEM_DIRS\[\*\]\}"\)"$', ci, re.M)


def test_bentoml_build_gives_a_versioned_bento_without_weights(tmp_path):
    env = {**os.environ, "BENTOML_HOME": str(tmp_path / "bentoml"), "BENTOML_DO_NOT_TRACK": "True"}
    bentoml = Path(sys.executable).parent / "bentoml"
    # bentofile.yaml as is, except package locking (a PyPI resolution, not what this test is about)
    raw = _load(ROOT / "bentofile.yaml")
    raw["python"]["lock_packages"] = False
    bentofile = tmp_path / "bentofile.yaml"
    bentofile.write_text(yaml.safe_dump(raw))
    res = subprocess.run([str(bentoml), "build", "-f", str(bentofile), "--label", "git_commit=test", "-o", "tag",
                          str(ROOT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    tag = re.search(r"__tag__:(\S+)", res.stdout).group(1)
    name, version = tag.split(":")
    assert name == "triserve" and re.fullmatch(r"[a-z0-9]{16}", version)
    bento = tmp_path / "bentoml" / "bentos" / name / version
    files = [p for p in bento.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix in (".onnx", ".pt", ".pth", ".npz", ".safetensors", ".bin")]
    rel = [p.relative_to(bento).as_posix() for p in files]
    assert not [r for r in rel if r.startswith(("src/models/store/", "src/tests/", "src/scripts/", "src/.cache/",
                                                "src/.venv/", "src/docs/"))]
    assert sum(p.stat().st_size for p in files) < 5 * 2**20
    assert (bento / "src/services/protocols/protos/triserve.proto").is_file()
    assert (bento / "src/services/protocols/generated/triserve_pb2.py").is_file()
    assert (bento / "src/models/stores/oci.py").is_file()
    # the Bento holds the folders, not the checkout's links to them: `triserve` finds them (triserve/__init__.py)
    assert (bento / "src/triserve/__init__.py").is_file() and not (bento / "src/triserve/services").exists()
    probe = subprocess.run([sys.executable, "-c", "import triserve.services.gateway as g, triserve.runners.service;"
                            "print(g.__file__)"], cwd=bento / "src", env=env, capture_output=True, text=True,
                           timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert probe.stdout.strip() == str(bento / "src/services/gateway.py"), probe.stdout
    info = _load(bento / "bento.yaml")
    assert info["models"] == [] and info["labels"]["git_commit"] == "test"
    assert {s["name"] for s in info["services"]} == _service_names()


# ----------------------------------------------------------------------------------------------------- Kubernetes

@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("path", K8S_FILES, ids=lambda p: p.name)
def test_k8s_manifest_matches_the_api_schema(path, version):
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, version, strict=True)


def test_k8s_schema_check_is_not_vacuous():
    dep = _docs()["Deployment"]
    dep["spec"]["template"]["spec"]["containers"][0]["startupProbes"] = {}  # typo: unknown field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, K8S_VERSIONS[0], strict=True)
    hpa = _docs()["HorizontalPodAutoscaler"]
    hpa["spec"]["minReplicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(hpa, K8S_VERSIONS[0], strict=True)


def test_kustomization_lists_every_manifest():
    kust = _load(K8S_DIR / "kustomization.yaml")
    assert sorted(kust["resources"]) == sorted(p.name for p in K8S_FILES)
    # the base sets no image: each overlay (configs/deploy/overlays/, rendered in test_k8s_operator.py) sets its own
    image = _docs()["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert "images" not in kust
    for overlay in ("cpu", "gpu"):
        over = _load(DEPLOY / "overlays" / overlay / "kustomization.yaml")
        assert over["resources"] == ["../../k8s"] and [i["name"] for i in over["images"]] == [image]


def test_k8s_wiring(monkeypatch):
    docs = _docs()
    dep, svc = docs["Deployment"], docs["Service"]
    pdb, hpa = docs["PodDisruptionBudget"], docs["HorizontalPodAutoscaler"]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    for sel in (dep["spec"]["selector"]["matchLabels"], pdb["spec"]["selector"]["matchLabels"],
                svc["spec"]["selector"]):
        assert sel.items() <= labels.items()
    assert {d["metadata"]["namespace"] for d in (dep, svc, pdb, hpa)} == {docs["Namespace"]["metadata"]["name"]}
    (ctr,) = pod["spec"]["containers"]
    # hardware-neutral base: the GPU (limits, node selector, toleration) comes from overlays/gpu
    # (test_k8s_operator.py renders it); the pods carry the label the PodMonitor selects
    assert "nvidia" not in json.dumps(dep)
    assert labels["app.kubernetes.io/part-of"] == "triserve"
    gpu = _load(DEPLOY / "overlays" / "gpu" / "gpu.yaml")
    assert (gpu["kind"], gpu["metadata"]["name"]) == ("Deployment", dep["metadata"]["name"])
    (gpu_ctr,) = gpu["spec"]["template"]["spec"]["containers"]
    assert gpu_ctr["name"] == ctr["name"] and str(gpu_ctr["resources"]["limits"]["nvidia.com/gpu"]) == "1"
    # probes: startup and readiness on /readyz, liveness on /livez, all on the HTTP port
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    assert ports == {"http": 3000, "grpc": 3001}
    assert ctr["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert ctr["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert ctr["livenessProbe"]["httpGet"]["path"] == "/livez"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert ctr[probe]["httpGet"]["port"] == "http"
    assert ctr["startupProbe"]["periodSeconds"] * ctr["startupProbe"]["failureThreshold"] >= 300  # weights pull
    # env: registry URI + cache dir on an emptyDir volume; all TRISERVE_* are real settings
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    cache = env["TRISERVE_MODEL_CACHE_DIR"]
    mounts = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert "emptyDir" in volumes[mounts[cache]]
    assert env["TRISERVE_REGISTRY_URI"].startswith(("oci://", "s3://", "http://", "https://"))
    assert env["TRISERVE_GRPC__HOST"] == "0.0.0.0" and int(env["TRISERVE_GRPC__PORT"]) == ports["grpc"]
    _settings_env_ok({k: v for k, v in env.items() if v is not None}, monkeypatch)
    # service: HTTP 3000 + gRPC 3001 to the named container ports
    assert {(p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]} == {
        ("http", 3000, "http"), ("grpc", 3001, "grpc")}
    # HPA on the Deployment, on the pending-work gauge as exported by the service, one metric per deployment
    # (targets and their derivation: tests/services/test_scaling_signal.py)
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": dep["metadata"]["name"]}
    assert hpa["spec"]["minReplicas"] > pdb["spec"]["minAvailable"]
    from triserve.observability.metrics import PENDING_ITEMS

    pods_metrics = [m["pods"]["metric"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    assert {m["name"] for m in pods_metrics} == {PENDING_ITEMS._name} == {"triserve_deployment_pending_items"}
    assert sorted(m["selector"]["matchLabels"]["deployment"] for m in pods_metrics) == ["coco", "intent", "series"]
    # and every other deployment (added at run time too): one External metric over the deployments not listed
    (other,) = [m["external"]["metric"] for m in hpa["spec"]["metrics"] if m["type"] == "External"]
    assert other["name"] == PENDING_ITEMS._name
    assert other["selector"] == {"matchExpressions": [{"key": "deployment", "operator": "NotIn",
                                                      "values": ["coco", "intent", "series"]}]}


def test_prometheus_adapter_rule_serves_the_hpa_metric():
    cm = _docs()["ConfigMap"]
    config = yaml.safe_load(cm["data"]["config.yaml"])
    validator = _validator("prometheus-adapter-config.schema.json")
    assert _errors(validator, config) == []
    hpa_metric = next(m["pods"]["metric"]["name"] for m in _docs()["HorizontalPodAutoscaler"]["spec"]["metrics"]
                      if m["type"] == "Pods")
    (rule,) = [r for r in config["rules"] if r["name"]["as"] == hpa_metric]
    assert re.search(rule["name"]["matches"], hpa_metric)
    assert rule["seriesQuery"].startswith(hpa_metric + "{")
    assert rule["resources"]["overrides"]["pod"]["resource"] == "pod"
    assert "<<.Series>>" in rule["metricsQuery"] and "<<.GroupBy>>" in rule["metricsQuery"]
    assert "{<<.LabelMatchers>>}" in rule["metricsQuery"]  # the HPA's metric selector (deployment) reaches the query
    (external,) = [r for r in config["externalRules"] if r["name"]["as"] == hpa_metric]  # Yatai's runner pods
    assert external["seriesQuery"].startswith(hpa_metric + "{") and "{<<.LabelMatchers>>}" in external["metricsQuery"]
    assert _errors(validator, {"rules": [{"seriesQuery": "x", "nmae": {}}]})  # typo caught


# ----------------------------------------------------------------------------------------------------- Yatai

@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_yatai_bentodeployment_matches_the_crd_schema(version, monkeypatch):
    doc = _load(DEPLOY / "yatai" / "bentodeployment.yaml")
    validator = _validator("yatai-bentodeployment-v2alpha1.schema.json", version)
    assert _errors(validator, doc) == []
    spec = doc["spec"]
    assert spec["autoscaling"]["minReplicas"] <= spec["autoscaling"]["maxReplicas"]
    assert {r["name"] for r in spec["runners"]} <= _service_names()
    envs = {e["name"]: e["value"] for e in spec["envs"] + [e for r in spec["runners"] for e in r.get("envs", [])]}
    assert "TRISERVE_REGISTRY_URI" in envs
    _settings_env_ok(envs, monkeypatch)


def test_yatai_schema_check_is_not_vacuous():
    doc = _load(DEPLOY / "yatai" / "bentodeployment.yaml")
    validator = _validator("yatai-bentodeployment-v2alpha1.schema.json")
    doc["spec"]["autoscaling"]["metrics"][0]["pods"]["target"]["averageValue"] = {"bad": 1}  # k8s type, embedded
    doc["spec"]["runners"][0]["resource"] = {}  # typo of 'resources'
    del doc["spec"]["bento"]
    errors = _errors(validator, doc)
    assert len(errors) >= 3, errors


# ----------------------------------------------------------------------------------------------------- BentoCloud

def test_bentocloud_config_matches_schema_and_bentoml(monkeypatch):
    from bentoml._internal.cloud.schemas.schemasv2 import CreateDeploymentSchema
    from bentoml._internal.utils.cattr import bentoml_cattr

    doc = _load(DEPLOY / "bentocloud.yaml")
    assert _errors(_validator("bentocloud-deployment.schema.json"), doc) == []
    # BentoML's own structuring of the same file (what `bentoml deploy -f` sends), minus client-side keys
    structured = bentoml_cattr.structure({k: v for k, v in doc.items() if k != "cluster"}, CreateDeploymentSchema)
    assert set(structured.services) == set(doc["services"]) == _service_names()
    assert structured.canary is not None and structured.canary.route_type == "random"
    assert sum(v["weight"] for v in doc["canary"]["versions"].values()) <= 100
    for svc in doc["services"].values():
        assert svc["scaling"]["min_replicas"] <= svc["scaling"]["max_replicas"]
    assert doc["services"]["triserve-runner"]["instance_type"].startswith("gpu.")
    envs = {e["name"]: e["value"] for e in doc["envs"]}
    for svc in doc["services"].values():
        envs.update({e["name"]: e["value"] for e in svc.get("envs", [])})
    for version in doc["canary"]["versions"].values():
        _settings_env_ok({**envs, **{e["name"]: e["value"] for e in version.get("envs", [])}}, monkeypatch)
    _settings_env_ok(envs, monkeypatch)


def test_bentocloud_schema_check_is_not_vacuous():
    doc = _load(DEPLOY / "bentocloud.yaml")
    validator = _validator("bentocloud-deployment.schema.json")
    doc["services"]["triserve"]["scailng"] = doc["services"]["triserve"].pop("scaling")
    doc["services"]["triserve-runner"]["deployment_strategy"] = "BlueGreen"
    doc["canary"]["route_type"] = "header"  # needs route_by
    assert len(_errors(validator, doc)) >= 3
