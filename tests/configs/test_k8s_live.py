"""The Kubernetes scaling signal without a cluster (issue 31): a real Prometheus scrapes a live `bentoml serve` through
the PodMonitor's rules, and prometheus-adapter's and KEDA's queries are run against it.

* Scrape: the scrape config the Prometheus Operator generates for configs/deploy/k8s/components/prometheus-operator/
  podmonitor.yaml (tests/configs/k8s_support.py: its relabel rules, in order), applied by Prometheus to static
  targets shaped like Kubernetes service discovery's pod role: every container port of the pods the rendered
  overlays create (the single-pod layout's pod, the split layout's gateway and runner pods; one live server stands in
  for each) plus a pod the PodMonitor must not select. Checked: exactly those pods' http ports are scraped, with
  namespace, pod, container, job="triserve", endpoint and component labels; BentoML's own `endpoint` label survives;
  the generated PrometheusRule loads and every rule evaluates.
* Adapter: seriesQuery finds every deployment's series with namespace and pod; metricsQuery, rendered as the adapter
  renders it for a pods request (custom) and a namespace request (external), returns one value per pod / per
  deployment for every deployment the server has, including one added at run time (PUT /admin/deployments/NAME),
  and the HPA's catch-all selector (deployment NotIn the listed ones) returns exactly the added one. The HPAs' and
  KEDA's queries (rendered overlays and components) run too, with the production deployment names mapped to the test
  server's by family (intent -> text, coco -> detection, series -> forecast).
Needs Debian's prometheus (.ci/run installs it) and kubectl or kustomize (to render the overlays); skips otherwise.
"""
from __future__ import annotations

import hashlib
import json
import math
import re

import httpx
import pytest
import yaml

from tests.configs import render_k8s
from tests.configs.k8s_support import (
    DEPLOY,
    KUBECTL,
    KUSTOMIZE,
    adapter_rule,
    compose,
    kustomize_build,
    pod_targets,
    podmonitor_scrape_configs,
    render_custom,
    render_external,
)
from tests.configs.test_monitoring import INSTALL_HINT, PROMETHEUS, Prometheus
from tests.conftest import NO_CAPACITY_LIMITS, TINY_MODELS, Server

ITEMS = "triserve_deployment_pending_items"
NAMESPACE = "triserve"
ADDED = "reviews"  # the deployment added at run time
ADMIN = "k8s-live-admin"
TEMPLATE_HASH = "5d8f7c9b6"  # pod names as a ReplicaSet makes them: <deployment>-<template hash>-<suffix>

pytestmark = [
    pytest.mark.skipif(PROMETHEUS is None, reason=f"prometheus is not installed; {INSTALL_HINT}"),
    pytest.mark.skipif(KUBECTL is None and KUSTOMIZE is None,
                       reason="neither kubectl (`kubectl kustomize`) nor kustomize is installed"),
]


def _family_names() -> dict[str, str]:
    """Production deployment name (configs/models.yaml) -> the test server's deployment of the same family (families
    the tiny server does not serve, e.g. pose, have no counterpart: their names stay as they are)."""
    prod = yaml.safe_load((DEPLOY.parent / "models.yaml").read_text())["deployments"]
    tiny = {d["family"]: d["name"] for d in yaml.safe_load(TINY_MODELS.read_text())["deployments"]}
    return {d["name"]: tiny[d["family"]] for d in prod if d["family"] in tiny}


NAMES = _family_names()


def _map_selector(selector: dict) -> dict:
    out: dict = {}
    if "matchLabels" in selector:
        out["matchLabels"] = {k: NAMES.get(v, v) if k == "deployment" else v
                              for k, v in selector["matchLabels"].items()}
    if "matchExpressions" in selector:
        out["matchExpressions"] = [{**e, "values": sorted(NAMES.get(v, v) for v in e.get("values", []))}
                                   if e["key"] == "deployment" else e for e in selector["matchExpressions"]]
    return out


def _map_query(query: str) -> str:
    def sub(m: re.Match) -> str:
        names = sorted(NAMES.get(n, n) for n in m.group(2).split("|"))
        return f'deployment{m.group(1)}"{"|".join(names)}"'

    return re.sub(r'deployment(=|!~|=~|!=)"([^"]*)"', sub, query)


@pytest.fixture(scope="module")
def admin_server(tiny_registry, tmp_path_factory):
    d = tmp_path_factory.mktemp("k8s-live")
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_DEPLOYMENTS_STATE_FILE": str(d / "state" / "deployments.json"),
           "TRISERVE_ROLLOUT__REFRESH_S": "0.2",
           "TRISERVE_ACCESS__API_KEYS": json.dumps([{"name": "ops", "admin": True,
                                                     "sha256": hashlib.sha256(ADMIN.encode()).hexdigest()}])}
    with Server(tiny_registry.root, env=env, log_path=d / "serve.log") as srv:
        srv.wait_ready()
        yield srv


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, list[dict]]:
    out = {}
    for overlay, keda in (("gpu", "keda"), ("split-gpu", "keda-split")):
        out[overlay] = kustomize_build(compose(tmp_path_factory.mktemp(overlay), overlay, ["prometheus-operator"]))
        out[f"{overlay}+keda"] = kustomize_build(
            compose(tmp_path_factory.mktemp(f"{overlay}-keda"), overlay, ["prometheus-operator", keda]))
    return out


def _pods(rendered: dict[str, list[dict]]) -> dict[str, dict]:
    """pod name -> its Deployment's pod template, for one pod of each Deployment of both layouts."""
    pods = {}
    for overlay in ("gpu", "split-gpu"):
        for dep in rendered[overlay]:
            if dep["kind"] == "Deployment":
                pods[f"{dep['metadata']['name']}-{TEMPLATE_HASH}-x2k9p"] = dep["spec"]["template"]
    return pods


@pytest.fixture(scope="module")
def cluster_prometheus(admin_server, rendered, tmp_path_factory):
    """A real Prometheus with the PodMonitor's scrape config over the rendered pods (+ a decoy), loading the
    generated PrometheusRule's groups; the runtime deployment is added before the first scrape."""
    resp = httpx.put(f"{admin_server.url}/admin/deployments/{ADDED}", headers={"X-API-Key": ADMIN}, timeout=120,
                     json={"family": "text", "model": {"name": "minilm-intent"}})
    assert resp.status_code == 200 and resp.json()["action"] == "added", resp.text
    for deployment in (ADDED, NAMES["intent"]):  # served; every deployment's gauges are exported from then on
        r = httpx.post(f"{admin_server.url}/v1/classify", json={"texts": ["book a table"], "deployment": deployment},
                       headers={"X-Request-Timeout-Ms": "30000"}, timeout=60)
        assert r.status_code == 200 and r.json()["deployment"] == deployment, r.text

    work = tmp_path_factory.mktemp("cluster-prometheus")
    (pm,) = [d for d in rendered["gpu"] if d["kind"] == "PodMonitor"]
    addresses = {"http": admin_server.url.removeprefix("http://"), "grpc": admin_server.grpc_target}
    static = []
    for pod, template in _pods(rendered).items():
        static += pod_targets(NAMESPACE, pod, template["metadata"]["labels"], template["spec"]["containers"],
                              addresses)
    decoy = {"app.kubernetes.io/name": "other-app"}
    static += pod_targets(NAMESPACE, "other-app-6b7d9-abcde", decoy,
                          [{"name": "app", "ports": [{"name": "http", "containerPort": 3000}]}], addresses)
    configs = podmonitor_scrape_configs(pm, interval="1s")
    for cfg in configs:
        cfg["static_configs"] = static
    rules = work / "prometheusrule-groups.yml"
    (rule,) = [d for d in rendered["gpu"] if d["kind"] == "PrometheusRule"]
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    prom = Prometheus(None, work, scrape_configs=configs, rule_files=[rules])
    try:
        prom.wait_ready()
        yield prom
    finally:
        prom.stop()


def _samples(prom: Prometheus, expr: str) -> list[dict]:
    data = prom.query(expr)
    assert data["resultType"] == "vector", (expr, data)
    return data["result"]


def _wait_samples(prom: Prometheus, what: str, expr: str, count: int | None = None) -> list[dict]:
    def check():
        got = _samples(prom, expr)
        return got if got and (count is None or len(got) == count) else None

    return prom.wait_for(f"{what}: {expr}", check)


def test_podmonitor_scrapes_exactly_the_triserve_pods_with_kubernetes_labels(cluster_prometheus, rendered):
    prom = cluster_prometheus
    pods = _pods(rendered)

    def targets_up():
        data = httpx.get(f"{prom.url}/api/v1/targets", timeout=10).json()["data"]
        active = data["activeTargets"]
        return data if len(active) == len(pods) and all(t["health"] == "up" for t in active) else None

    data = prom.wait_for("every selected pod's http port up", targets_up)
    labels = [t["labels"] for t in data["activeTargets"]]
    assert {lb["pod"] for lb in labels} == set(pods)
    for lb in labels:
        template = pods[lb["pod"]]
        (ctr,) = template["spec"]["containers"]
        assert (lb["namespace"], lb["job"], lb["endpoint"], lb["container"]) == (NAMESPACE, "triserve", "http",
                                                                                 ctr["name"])
        assert lb["component"] == template["metadata"]["labels"]["app.kubernetes.io/component"]
    # dropped: the gRPC ports (single pod, gateway) and the pod the selector does not match
    dropped = [t["discoveredLabels"] for t in data["droppedTargets"]]
    assert sorted((d["__meta_kubernetes_pod_name"], d["__meta_kubernetes_pod_container_port_name"])
                  for d in dropped) == sorted(
        [(p, "grpc") for p, t in pods.items() if "grpc" in {x["name"] for c in t["spec"]["containers"]
                                                               for x in c["ports"]}]
        + [("other-app-6b7d9-abcde", "http")])
    # the alert rules' job is the PodMonitor's: TriserveScrapeDown watches these targets
    assert len(_samples(prom, 'up{job="triserve"}')) == len(pods)
    # BentoML's own `endpoint` label (the HTTP route) survives the Operator's endpoint target label
    routes = _wait_samples(prom, "BentoML requests", 'bentoml_service_request_total{endpoint="/v1/classify"}')
    assert {r["metric"]["pod"] for r in routes} == set(pods)
    assert _samples(prom, '{exported_endpoint!=""}') == []


def test_generated_prometheusrule_loads_and_every_rule_evaluates(cluster_prometheus):
    prom = cluster_prometheus

    def evaluated():
        groups = httpx.get(f"{prom.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if rules and all(r["health"] != "unknown" for r in rules) else None

    rules = prom.wait_for("every rule of the PrometheusRule evaluated", evaluated)
    expected = {r["alert"] for g in render_k8s.prometheus_rule()["spec"]["groups"] for r in g["rules"]}
    assert {r["name"] for r in rules} == expected
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []


def _deployments(server) -> set[str]:
    body = httpx.get(f"{server.url}/v1/models", timeout=30).json()
    return {d["name"] for d in body["deployments"]}


def test_adapter_rules_give_a_value_per_deployment_including_one_added_at_run_time(cluster_prometheus, admin_server,
                                                                                  rendered):
    prom = cluster_prometheus
    served = _deployments(admin_server)
    assert ADDED in served and set(NAMES.values()) < served
    single = next(p for p in _pods(rendered) if p.startswith("triserve-" + TEMPLATE_HASH))
    gateway = next(p for p in _pods(rendered) if p.startswith("triserve-gateway-"))

    # discovery: the rule's seriesQuery finds every deployment, each series with the resources' labels
    rule = adapter_rule("rules", ITEMS)

    def discovered():
        resp = httpx.get(f"{prom.url}/api/v1/series", params={"match[]": rule["seriesQuery"]}, timeout=10).json()
        found = {s["deployment"] for s in resp["data"]}
        return resp["data"] if served <= found else None

    series = prom.wait_for(f"seriesQuery finds {sorted(served)}", discovered)
    assert all(s["__name__"] == ITEMS and s["namespace"] == NAMESPACE and s["pod"] for s in series)
    assert re.fullmatch(rule["name"]["matches"], ITEMS) and rule["name"]["as"] == ITEMS

    # custom metrics (HPA Pods metric): one value per requested pod, for every deployment
    pods = [single, gateway]
    for dep in sorted(served):
        q = render_custom(rule, ITEMS, NAMESPACE, pods, {"matchLabels": {"deployment": dep}})
        got = _wait_samples(prom, f"custom metric for {dep}", q, count=len(pods))
        assert {s["metric"]["pod"] for s in got} == set(pods), (dep, got)
        assert all(math.isfinite(float(s["value"][1])) and float(s["value"][1]) >= 0 for s in got)
    listed = sorted(NAMES.values())
    catch_all = {"matchExpressions": [{"key": "deployment", "operator": "NotIn", "values": listed}]}
    q = render_custom(rule, ITEMS, NAMESPACE, [single], catch_all)
    assert f'deployment!~"{"|".join(listed)}"' in q
    assert [s["metric"]["pod"] for s in _wait_samples(prom, "custom catch-all", q, count=1)] == [single]

    # external metrics (HPA External metric, KEDA): one series per deployment, in the namespace
    ext = adapter_rule("externalRules", ITEMS)
    for dep in sorted(served):
        q = render_external(ext, ITEMS, NAMESPACE, {"matchLabels": {"deployment": dep}})
        got = _wait_samples(prom, f"external metric for {dep}", q, count=1)
        assert got[0]["metric"] == {"deployment": dep}
    q = render_external(ext, ITEMS, NAMESPACE, catch_all)
    got = _wait_samples(prom, "external catch-all", q)
    assert [s["metric"] for s in got] == [{"deployment": ADDED}]  # exactly the deployment added at run time


def test_the_hpa_and_keda_queries_of_the_rendered_overlays_return_values(cluster_prometheus, rendered):
    """Every HPA metric of both layouts, through the adapter rule it reaches, and every KEDA prometheus trigger
    (one value each: KEDA refuses a vector of several) answers against the scrape."""
    prom = cluster_prometheus
    pods = list(_pods(rendered))
    custom, ext = adapter_rule("rules", ITEMS), adapter_rule("externalRules", ITEMS)
    checked = 0
    for overlay in ("gpu", "split-gpu"):
        for hpa in (d for d in rendered[overlay] if d["kind"] == "HorizontalPodAutoscaler"):
            target = hpa["spec"]["scaleTargetRef"]["name"]
            own = [p for p in pods if re.fullmatch(rf"{re.escape(target)}-{TEMPLATE_HASH}-\w+", p)]
            for m in hpa["spec"]["metrics"]:
                if m["type"] == "Pods":
                    sel = _map_selector(m["pods"]["metric"]["selector"])
                    q = render_custom(custom, ITEMS, NAMESPACE, own, sel)
                    assert len(_wait_samples(prom, f"{target} Pods metric", q, count=len(own))) == len(own)
                    checked += 1
                elif m["type"] == "External":
                    sel = _map_selector(m["external"]["metric"]["selector"])
                    q = render_external(ext, ITEMS, NAMESPACE, sel)
                    assert _wait_samples(prom, f"{target} External metric", q), q
                    checked += 1
        for so in (d for d in rendered[f"{overlay}+keda"] if d["kind"] == "ScaledObject"):
            for trig in so["spec"]["triggers"]:
                if trig["type"] == "prometheus":
                    q = _map_query(trig["metadata"]["query"])
                    (sample,) = _wait_samples(prom, f"KEDA {so['metadata']['name']}/{trig['name']}", q, count=1)
                    assert float(sample["value"][1]) >= 0
                    checked += 1
    # 4 selectors x (1 HPA single + 2 HPAs split) + 4 triggers x (1 + 2 ScaledObjects)
    assert checked == 24

