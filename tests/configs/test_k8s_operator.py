"""The overlays and the operator objects, validated offline (issue 31).

* configs/deploy/overlays/{cpu,gpu,split-cpu,split-gpu} rendered by the real kustomize (kubectl's, or a `kustomize`
  binary), alone and with the optional components (k8s/components/prometheus-operator, keda / keda-split): every
  built-in object against the Kubernetes OpenAPI schemas of kubernetes-validate (strict) for the oldest and newest
  version tested; PodMonitor, PrometheusRule and ScaledObject against the JSON schemas in configs/deploy/schemas/
  (written by hand from the upstream APIs, each says which) with their embedded Kubernetes types resolved for the
  same two versions. The GPU overlays give the GPU image, nvidia.com/gpu, the node selector and the toleration; the
  CPU ones none of that.
* One source of truth: the PrometheusRule and the dashboard ConfigMap are generated from configs/prometheus/alerts.yml
  and configs/grafana/triserve-dashboard.json (tests/configs/render_k8s.py) and fail here when stale; promtool
  checks the PrometheusRule's own groups.
* The scaling signal: the PodMonitor selects the pods of both layouts on their http port with job="triserve"; the
  prometheus-adapter rules name no deployment; each KEDA trigger is the adapter's external query for the HPA metric
  it replaces, with the HPA's target, replicas and behaviour.
The live half (a real Prometheus scraping a live server through these rules): tests/configs/test_k8s_live.py.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.configs import render_k8s
from tests.configs.k8s_support import (
    COMPONENTS,
    DEPLOY,
    K8S,
    KEDA_COMPONENT,
    KUBECTL,
    KUSTOMIZE,
    LAYOUTS,
    adapter_config,
    adapter_rule,
    compose,
    kustomize_build,
    one,
    render_external,
)
from tests.configs.test_monitoring import PROMTOOL, alert_rules

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (dev extra) not installed")
jsonschema = pytest.importorskip("jsonschema")
referencing = pytest.importorskip("referencing")

K8S_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
SCHEMAS = DEPLOY / "schemas"
CRD_SCHEMAS = {("monitoring.coreos.com/v1", "PodMonitor"): "prometheus-operator-podmonitor-v1.schema.json",
               ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheus-operator-prometheusrule-v1.schema.json",
               ("keda.sh/v1alpha1", "ScaledObject"): "keda-scaledobject-v1alpha1.schema.json"}
ITEMS = "triserve_deployment_pending_items"
needs_kustomize = pytest.mark.skipif(
    KUBECTL is None and KUSTOMIZE is None,
    reason="neither kubectl (`kubectl kustomize`) nor kustomize is installed in the system directories")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[tuple[str, str], list[dict]]:
    """(overlay, variant) -> objects; variant "plain" (the overlay alone), "operator" (+ prometheus-operator) and
    "keda" (+ prometheus-operator + the layout's KEDA component)."""
    if KUBECTL is None and KUSTOMIZE is None:
        pytest.skip("neither kubectl nor kustomize is installed in the system directories")
    out = {}
    for overlay, layout in LAYOUTS.items():
        out[overlay, "plain"] = kustomize_build(DEPLOY / "overlays" / overlay)
        for variant, comps in (("operator", ["prometheus-operator"]),
                               ("keda", ["prometheus-operator", KEDA_COMPONENT[layout]])):
            work = compose(tmp_path_factory.mktemp(f"{overlay}-{variant}"), overlay, comps)
            out[overlay, variant] = kustomize_build(work)
    return out


def _registry(version: str):
    """referencing registry serving kubernetes-validate's definitions at https://kubernetes.io/api/_definitions.json."""
    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{version}-local-strict"
    resource = referencing.Resource.from_contents(json.loads((base / "_definitions.json").read_text()))
    return referencing.Registry().with_resource("https://kubernetes.io/api/_definitions.json", resource)


def crd_validator(api_version: str, kind: str, version: str = K8S_VERSIONS[0]):
    schema = json.loads((SCHEMAS / CRD_SCHEMAS[api_version, kind]).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, registry=_registry(version))


def crd_errors(doc: dict, version: str = K8S_VERSIONS[0]) -> list[str]:
    validator = crd_validator(doc["apiVersion"], doc["kind"], version)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def _deployments(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}


def _container(dep: dict) -> dict:
    (ctr,) = dep["spec"]["template"]["spec"]["containers"]
    return ctr


def _env(dep: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in _container(dep).get("env", [])}


# ----------------------------------------------------------------------------------------------------- schemas

@needs_kustomize
@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("overlay", sorted(LAYOUTS))
def test_rendered_overlays_match_the_api_schemas(rendered, overlay, version):
    seen = set()
    for variant in ("plain", "operator", "keda"):
        for doc in rendered[overlay, variant]:
            key = (doc["apiVersion"], doc["kind"])
            if key in CRD_SCHEMAS:
                assert crd_errors(doc, version) == [], (variant, doc["kind"], doc["metadata"]["name"])
            else:
                kubernetes_validate.validate(doc, version, strict=True)
            seen.add(doc["kind"])
    assert {"PodMonitor", "PrometheusRule", "ScaledObject", "Deployment", "HorizontalPodAutoscaler"} <= seen


def test_crd_schema_checks_are_not_vacuous():
    pm = yaml.safe_load((COMPONENTS / "prometheus-operator" / "podmonitor.yaml").read_text())
    pm["spec"]["podMetricsEndpoints"][0]["relabellings"] = []  # typo
    pm["spec"]["podMetricsEndpoints"][0]["interval"] = "15 seconds"
    pm["spec"]["selector"]["matchLabels"]["x"] = 1  # not a string (Kubernetes LabelSelector, embedded)
    assert len(crd_errors(pm)) >= 3, crd_errors(pm)
    rule = render_k8s.prometheus_rule()
    rule["spec"]["groups"][0]["rules"][0]["fro"] = "5m"
    rule["spec"]["groups"][0]["rules"][1].pop("expr")
    assert len(crd_errors(rule)) >= 2
    so = yaml.safe_load((COMPONENTS / "keda" / "scaledobject.yaml").read_text())
    so["spec"]["triggers"][0]["metadata"]["threshold"] = 0.65  # KEDA wants strings
    so["spec"]["triggers"][0]["metricType"] = "Average"
    so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]["policies"][0]["value"] = "2"
    del so["spec"]["scaleTargetRef"]["name"]
    assert len(crd_errors(so)) >= 4, crd_errors(so)


def test_every_object_under_k8s_is_in_a_kustomization():
    """No manifest is left out of what `kubectl apply -k` applies (base, split base, components)."""
    for directory in (K8S, K8S / "split", *sorted(p for p in COMPONENTS.iterdir() if p.is_dir())):
        kust = yaml.safe_load((directory / "kustomization.yaml").read_text())
        listed = set(kust.get("resources", []))
        files = {p.name for p in directory.glob("*.yaml") if p.name != "kustomization.yaml"}
        assert listed == files, (directory, listed ^ files)
        if directory.parent == COMPONENTS:
            assert kust["kind"] == "Component", directory


# ----------------------------------------------------------------------------------------------------- overlays

@needs_kustomize
def test_gpu_overlays_ask_for_a_gpu_on_gpu_nodes_with_the_gpu_image(rendered):
    for overlay, gpu_deployment in (("gpu", "triserve"), ("split-gpu", "triserve-runner")):
        deps = _deployments(rendered[overlay, "plain"])
        for name, dep in deps.items():
            ctr, pod = _container(dep), dep["spec"]["template"]["spec"]
            assert re.fullmatch(r".+/triserve-gpu:.+", ctr["image"]), (overlay, ctr["image"])
            if name == gpu_deployment:
                assert str(ctr["resources"]["limits"]["nvidia.com/gpu"]) == "1"
                assert str(ctr["resources"]["requests"]["nvidia.com/gpu"]) == "1"
                assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
                assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
                # the rest of the base is intact (the patch merged, it did not replace)
                assert ctr["resources"]["limits"]["memory"] and ctr["readinessProbe"]["httpGet"]["path"] == "/readyz"
            else:  # the gateway tier uses no GPU and runs anywhere
                assert "nvidia.com/gpu" not in json.dumps(ctr["resources"]) and "nodeSelector" not in pod


@needs_kustomize
def test_cpu_overlays_use_no_gpu_and_the_cpu_provider(rendered, monkeypatch):
    from triserve.configs.settings import Settings

    for overlay, runner in (("cpu", "triserve"), ("split-cpu", "triserve-runner")):
        docs = rendered[overlay, "plain"]
        assert "nvidia" not in yaml.safe_dump(docs), overlay
        for dep in _deployments(docs).values():
            image = _container(dep)["image"]
            assert re.fullmatch(r".+/triserve:.+", image) and "gpu" not in image, image
        env = _env(one(docs, "Deployment", runner))
        assert json.loads(env["TRISERVE_RUNNER__PROVIDERS"]) == ["CPUExecutionProvider"]
        for key in [k for k in os.environ if k.startswith("TRISERVE_")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            if key.startswith("TRISERVE_"):
                monkeypatch.setenv(key, value)
        assert Settings().runner.providers == ["CPUExecutionProvider"]


@needs_kustomize
def test_bases_set_no_image_and_no_hardware(rendered):
    """The bases are hardware-neutral; everything hardware-specific comes from an overlay."""
    for base in (K8S, K8S / "split"):
        docs = kustomize_build(base)
        assert "nvidia" not in yaml.safe_dump(docs), base
        assert {_container(d)["image"] for d in _deployments(docs).values()} == {"triserve"}
        assert "images" not in yaml.safe_load((base / "kustomization.yaml").read_text())


# ----------------------------------------------------------------------------------- generated: one source of truth

def test_generated_operator_objects_are_current():
    assert render_k8s.stale() == [], "run: python -m tests.configs.render_k8s"
    rule = yaml.safe_load(render_k8s.PROMETHEUS_RULE.read_text())
    assert rule["spec"]["groups"] == yaml.safe_load(render_k8s.ALERTS.read_text())["groups"]
    cm = yaml.safe_load(render_k8s.DASHBOARD_CONFIGMAP.read_text())
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = cm["data"].values()
    assert text == render_k8s.DASHBOARD.read_text() and json.loads(text)["uid"]
    assert len(render_k8s.DASHBOARD_CONFIGMAP.read_text()) < 262144  # fits kubectl's last-applied annotation


def test_staleness_check_is_not_vacuous(tmp_path, monkeypatch):
    alerts = tmp_path / "alerts.yml"
    alerts.write_text(render_k8s.ALERTS.read_text().replace("for: 5m", "for: 6m", 1))
    monkeypatch.setattr(render_k8s, "ALERTS", alerts)
    assert render_k8s.stale() == [render_k8s.PROMETHEUS_RULE]
    assert render_k8s.main(["--check"]) == 1


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed; apt-get install prometheus")
def test_promtool_checks_the_prometheusrule_groups(tmp_path):
    rule = yaml.safe_load(render_k8s.PROMETHEUS_RULE.read_text())
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    res = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in res.stdout


# ----------------------------------------------------------------------------------------------- scaling signal

@needs_kustomize
def test_podmonitor_selects_every_triserve_pod_of_both_layouts(rendered):
    pm = yaml.safe_load((COMPONENTS / "prometheus-operator" / "podmonitor.yaml").read_text())
    spec = pm["spec"]
    (endpoint,) = spec["podMetricsEndpoints"]
    for overlay in LAYOUTS:
        deps = _deployments(rendered[overlay, "operator"])
        assert one(rendered[overlay, "operator"], "PodMonitor")["metadata"]["namespace"] == "triserve"
        for dep in deps.values():
            labels = dep["spec"]["template"]["metadata"]["labels"]
            assert spec["selector"]["matchLabels"].items() <= labels.items(), (overlay, dep["metadata"]["name"])
            assert labels[spec["jobLabel"]] == "triserve"  # job="triserve", as alerts.yml's up{job="triserve"}
            assert endpoint["port"] in {p["name"] for p in _container(dep)["ports"]}
            assert dep["metadata"]["namespace"] == pm["metadata"]["namespace"]
    assert any('up{job="triserve"}' in r["expr"] for r in alert_rules())


def test_adapter_rules_name_no_deployment():
    """Label-based: any deployment, including one added at run time, is a value of the same rule."""
    config = adapter_config()
    text = json.dumps(config)
    names = {d["name"] for d in yaml.safe_load((DEPLOY.parent / "models.yaml").read_text())["deployments"]}
    assert names and not [n for n in names if re.search(rf"\b{re.escape(n)}\b", text)], names
    for section in ("rules", "externalRules"):
        rule = adapter_rule(section, ITEMS)
        assert rule["seriesQuery"].startswith(ITEMS + "{") and 'deployment!=""' in rule["seriesQuery"]
        assert "{<<.LabelMatchers>>}" in rule["metricsQuery"]
    assert "<<.GroupBy>>" in adapter_rule("rules", ITEMS)["metricsQuery"]
    # external queries get no GroupBy from the adapter: the rule groups by deployment itself
    assert "<<.GroupBy>>" not in adapter_rule("externalRules", ITEMS)["metricsQuery"]


def _metric_selectors(hpa: dict) -> list[tuple[dict, str]]:
    out = []
    for m in hpa["spec"]["metrics"]:
        if m["type"] in ("Pods", "External"):
            spec = m[m["type"].lower()]
            assert spec["metric"]["name"] == ITEMS
            out.append((spec["metric"]["selector"], spec["target"]["averageValue"]))
    return out


def _quantity(value: str) -> float:
    return float(value[:-1]) / 1000 if str(value).endswith("m") else float(value)


def _listed(hpa: dict) -> set[str]:
    return {s["matchLabels"]["deployment"] for s, _ in _metric_selectors(hpa) if "matchLabels" in s}


@needs_kustomize
@pytest.mark.parametrize("overlay", sorted(LAYOUTS))
def test_hpas_cover_every_deployment_and_keda_replaces_them_one_for_one(rendered, overlay):
    plain, keda = rendered[overlay, "plain"], rendered[overlay, "keda"]
    assert not [d for d in keda if d["kind"] == "HorizontalPodAutoscaler"], "the KEDA component removes the HPAs"
    hpas = [d for d in plain if d["kind"] == "HorizontalPodAutoscaler"]
    scaled = {d["spec"]["scaleTargetRef"]["name"]: d for d in keda if d["kind"] == "ScaledObject"}
    assert {h["spec"]["scaleTargetRef"]["name"] for h in hpas} == set(scaled)
    rule = adapter_rule("externalRules", ITEMS)
    for hpa in hpas:
        ns = hpa["metadata"]["namespace"]
        listed = _listed(hpa)
        assert listed == {"intent", "coco", "series"}
        # the catch-all: every deployment not listed, including those added at run time
        catch = [(s, t) for s, t in _metric_selectors(hpa) if "matchExpressions" in s]
        assert [s["matchExpressions"] for s, _ in catch] == [[{"key": "deployment", "operator": "NotIn",
                                                                "values": sorted(listed)}]]
        so = scaled[hpa["spec"]["scaleTargetRef"]["name"]]
        assert so["spec"]["scaleTargetRef"] == hpa["spec"]["scaleTargetRef"]
        assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (hpa["spec"]["minReplicas"],
                                                                                  hpa["spec"]["maxReplicas"])
        assert so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == hpa["spec"]["behavior"]
        prom = {t["metadata"]["query"]: t for t in so["spec"]["triggers"] if t["type"] == "prometheus"}
        assert len(prom) == len(_metric_selectors(hpa))
        for selector, target in _metric_selectors(hpa):
            # KEDA needs one value: the adapter's external query for this selector, summed over deployments
            query = render_external(rule, ITEMS, ns, selector).removesuffix(" by (deployment)")
            assert query.startswith("sum(") and query in prom, (query, sorted(prom))
            trig = prom[query]
            assert trig["metricType"] == "AverageValue"
            assert float(trig["metadata"]["threshold"]) == pytest.approx(_quantity(target))
            assert trig["metadata"]["serverAddress"].startswith("http")
        cpu = [m["resource"]["target"]["averageUtilization"] for m in hpa["spec"]["metrics"] if m["type"] == "Resource"]
        keda_cpu = [int(t["metadata"]["value"]) for t in so["spec"]["triggers"] if t["type"] == "cpu"]
        assert keda_cpu == cpu


def test_keda_catch_all_reads_an_empty_result_as_zero():
    for path in (COMPONENTS / "keda" / "scaledobject.yaml", COMPONENTS / "keda-split" / "scaledobjects.yaml"):
        for so in yaml.safe_load_all(path.read_text()):
            for trig in so["spec"]["triggers"]:
                if "!~" in trig.get("metadata", {}).get("query", ""):
                    assert trig["metadata"].get("ignoreNullValues", "true") == "true"
