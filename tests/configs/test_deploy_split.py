"""configs/deploy/k8s/split/: the tiers apart on Kubernetes, validated offline.

Kubernetes' OpenAPI schemas (kubernetes-validate, strict) for the oldest and newest version tested, and the wiring
(of the hardware-neutral base; the split-gpu / split-cpu overlays are rendered in test_k8s_operator.py):
each Deployment serves exactly one service of the Bento (`start-http-server --service-name`, the names the source
declares), the gateway finds the runner tier by BENTOML_SERVE_DEPENDS at the runner Service's cluster DNS name and
port (the key scripts/tiers.py sets), no BENTOML_RUNNER_MAP anywhere, the Services and policies select the right pods.
"""
from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SPLIT = ROOT / "configs" / "deploy" / "k8s" / "split"
OVERLAYS = ROOT / "configs" / "deploy" / "overlays"
kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (dev extra) not installed")
K8S_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
FILES = sorted(p for p in SPLIT.glob("*.yaml") if p.name != "kustomization.yaml")


def _docs() -> list[dict]:
    return [doc for p in FILES for doc in yaml.safe_load_all(p.read_text())]


def _one(kind: str, name: str) -> dict:
    (doc,) = [d for d in _docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _service_name(path: str) -> str:
    for node in ast.walk(ast.parse((ROOT / path).read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "service":
            for kw in node.keywords:
                if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                    return kw.value.value
    raise AssertionError(f"no @bentoml.service(name=...) in {path}")


RUNNER = _service_name("runners/service.py")
ENTRY = _service_name("services/gateway.py")


def _container(dep: dict) -> dict:
    (ctr,) = dep["spec"]["template"]["spec"]["containers"]
    return ctr


def _env(dep: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in _container(dep).get("env", [])}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_split_manifest_matches_the_api_schema(path, version):
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, version, strict=True)


def test_split_kustomization_lists_every_manifest():
    kust = yaml.safe_load((SPLIT / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == sorted(p.name for p in FILES)
    images = {_container(d)["image"] for d in _docs() if d["kind"] == "Deployment"}
    assert "images" not in kust  # the overlays set it (configs/deploy/overlays/split-*)
    for overlay in ("split-cpu", "split-gpu"):
        over = yaml.safe_load((OVERLAYS / overlay / "kustomization.yaml").read_text())
        assert over["resources"] == ["../../k8s/split"]
        assert [i["name"] for i in over["images"]] == sorted(images) == ["triserve"]
    assert {d["metadata"]["namespace"] for d in _docs() if d["kind"] != "Namespace"} == {
        _one("Namespace", "triserve")["metadata"]["name"]}


def test_each_deployment_serves_one_service_of_the_bento():
    runner, gateway = _one("Deployment", "triserve-runner"), _one("Deployment", "triserve-gateway")
    assert _container(runner)["args"] == ["start-http-server", "--service-name", RUNNER]
    assert _container(gateway)["args"] == ["start-http-server", "--service-name", ENTRY]
    for dep in (runner, gateway):
        assert "command" not in _container(dep)  # the image entrypoint stays in charge
        assert _env(dep)["BENTOML_PORT"] == "3000"
        ctr = _container(dep)
        assert ctr["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert ctr["livenessProbe"]["httpGet"]["path"] == "/livez"
    # hardware-neutral base; the GPU belongs to the runner tier only, from the split-gpu overlay
    # (rendered by test_k8s_operator.py)
    assert "nvidia" not in yaml.safe_dump([runner, gateway])
    patch = yaml.safe_load((OVERLAYS / "split-gpu" / "gpu.yaml").read_text())
    assert (patch["kind"], patch["metadata"]["name"]) == ("Deployment", runner["metadata"]["name"])
    (ctr,) = patch["spec"]["template"]["spec"]["containers"]
    assert ctr["name"] == _container(runner)["name"] and str(ctr["resources"]["limits"]["nvidia.com/gpu"]) == "1"


def test_gateway_finds_the_runner_service_by_bentoml_serve_depends():
    from scripts.tiers import DEPENDS_ENV

    gateway = _one("Deployment", "triserve-gateway")
    svc = _one("Service", "triserve-runner")
    value = _env(gateway)[DEPENDS_ENV]
    # parsed as BentoML's start-http-server does: whitespace-separated pairs, each split on "="
    pairs = dict(s.split("=", maxsplit=1) for s in value.split())
    (port,) = [p["port"] for p in svc["spec"]["ports"] if p["name"] == "http"]
    ns = svc["metadata"]["namespace"]
    assert pairs == {RUNNER: f"http://{svc['metadata']['name']}.{ns}.svc.cluster.local:{port}"}
    for doc in _docs():  # the map the serving process overwrites: never set by hand
        if doc["kind"] == "Deployment":
            assert not {"BENTOML_RUNNER_MAP", "BENTOML_SERVE_RUNNER_MAP"} & set(_env(doc)), doc["metadata"]["name"]


def test_services_select_their_own_tier(monkeypatch):
    runner, gateway = _one("Deployment", "triserve-runner"), _one("Deployment", "triserve-gateway")
    r_labels = runner["spec"]["template"]["metadata"]["labels"]
    g_labels = gateway["spec"]["template"]["metadata"]["labels"]
    for svc_name, own, other in (("triserve-runner", r_labels, g_labels), ("triserve", g_labels, r_labels)):
        sel = _one("Service", svc_name)["spec"]["selector"]
        assert sel.items() <= own.items() and not sel.items() <= other.items(), svc_name
    for dep, labels in ((runner, r_labels), (gateway, g_labels)):
        assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # the runner port is reachable from the gateway pods (and the monitoring namespace) only
    pol = _one("NetworkPolicy", "triserve-runner")
    assert pol["spec"]["podSelector"]["matchLabels"].items() <= r_labels.items()
    peers = pol["spec"]["ingress"][0]["from"]
    assert any("podSelector" in p and p["podSelector"]["matchLabels"].items() <= g_labels.items() for p in peers)
    for name, labels in (("triserve-gateway", g_labels), ("triserve-runner", r_labels)):
        assert _one("PodDisruptionBudget", name)["spec"]["selector"]["matchLabels"].items() <= labels.items()
        hpa = _one("HorizontalPodAutoscaler", name)
        assert hpa["spec"]["scaleTargetRef"]["name"] == name
    # every TRISERVE_* value is a real setting
    from triserve.configs.settings import Settings

    for dep in (runner, gateway):
        for key in [k for k in os.environ if k.startswith("TRISERVE_")]:
            monkeypatch.delenv(key)
        for key, value in _env(dep).items():
            if key.startswith("TRISERVE_"):
                monkeypatch.setenv(key, value)
        Settings()
