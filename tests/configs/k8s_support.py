"""Helpers for the Kubernetes tests: render the kustomizations with the real kustomize (kubectl's), and stand in for
the two cluster components whose behaviour the tests need without a cluster, each following its upstream source:

* the Prometheus Operator's PodMonitor -> Prometheus scrape config (pkg/prometheus/promcfg.go,
  generatePodMonitorConfig): the same relabel rules, applied by a real Prometheus to static targets that carry the
  `__meta_kubernetes_*` labels Kubernetes service discovery would give a pod;
* prometheus-adapter's query rendering (pkg/naming/metrics_query.go, Build / BuildExternal): seriesQuery as the
  discovery selector, metricsQuery with <<.Series>>, <<.LabelMatchers>> and <<.GroupBy>> substituted as it does
  (metric selector requirements sorted by key, then namespace, then the resource label; GroupBy = the resource
  label for custom metrics, empty for external ones).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "configs" / "deploy"
K8S = DEPLOY / "k8s"
OVERLAYS = DEPLOY / "overlays"
COMPONENTS = K8S / "components"
LAYOUTS = {"cpu": "single", "gpu": "single", "split-cpu": "split", "split-gpu": "split"}
KEDA_COMPONENT = {"single": "keda", "split": "keda-split"}

SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
KUBECTL = shutil.which("kubectl", path=os.pathsep.join(SYSTEM_DIRS))
KUSTOMIZE = shutil.which("kustomize", path=os.pathsep.join(SYSTEM_DIRS))


def kustomize_build(directory: Path) -> list[dict]:
    """`kustomize build` (or `kubectl kustomize`, the same library) of a directory: the objects it would apply."""
    cmd = [KUSTOMIZE, "build", str(directory)] if KUSTOMIZE else [KUBECTL, "kustomize", str(directory)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"{' '.join(cmd)}: {res.stderr}"
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def compose(workdir: Path, overlay: str, components: list[str]) -> Path:
    """A kustomization in `workdir` that applies `overlay` with `components` (what `kustomize edit add component`
    does to an overlay), referencing the repository's directories by relative path."""
    workdir.mkdir(parents=True, exist_ok=True)
    kust = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [os.path.relpath(OVERLAYS / overlay, workdir)],
            "components": [os.path.relpath(COMPONENTS / c, workdir) for c in components]}
    (workdir / "kustomization.yaml").write_text(yaml.safe_dump(kust))
    return workdir


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name or ''}: {len(found)} objects"
    return found[0]


# ------------------------------------------------------------------------------------- PodMonitor -> scrape config

def sanitize(name: str) -> str:
    """Kubernetes label name -> Prometheus label name, as Kubernetes SD and the Operator do."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _relabel(rc: dict) -> dict:
    out: dict = {}
    for src, dst in (("sourceLabels", "source_labels"), ("separator", "separator"), ("targetLabel", "target_label"),
                     ("regex", "regex"), ("modulus", "modulus"), ("replacement", "replacement"),
                     ("action", "action")):
        if src in rc:
            out[dst] = rc[src].lower() if src == "action" else rc[src]
    unknown = set(rc) - {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action"}
    assert not unknown, f"relabel fields not emulated: {unknown}"
    return out


SUPPORTED_SPEC = {"selector", "podMetricsEndpoints", "jobLabel", "podTargetLabels", "namespaceSelector"}
SUPPORTED_ENDPOINT = {"port", "path", "interval", "scrapeTimeout", "relabelings", "metricRelabelings", "honorLabels"}


def podmonitor_scrape_configs(pm: dict, interval: str | None = None) -> list[dict]:
    """The scrape configs the Prometheus Operator generates for a PodMonitor (one per endpoint), with kubernetes_sd
    left out: the caller supplies the discovered pods as static targets (pod_targets). `interval` overrides the
    endpoint's scrape interval and timeout (a test does not wait 15 s per sample)."""
    spec, ns, name = pm["spec"], pm["metadata"]["namespace"], pm["metadata"]["name"]
    assert set(spec) <= SUPPORTED_SPEC, f"PodMonitor fields not emulated: {set(spec) - SUPPORTED_SPEC}"
    assert not spec.get("namespaceSelector"), "namespaceSelector not emulated: pods in the PodMonitor's namespace"
    configs = []
    for i, ep in enumerate(spec["podMetricsEndpoints"]):
        assert set(ep) <= SUPPORTED_ENDPOINT, f"endpoint fields not emulated: {set(ep) - SUPPORTED_ENDPOINT}"
        relabel: list[dict] = [
            {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
            {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
        ]
        sel = spec["selector"]
        for key in sorted(sel.get("matchLabels", {})):
            relabel.append({"action": "keep", "regex": f"({sel['matchLabels'][key]});true",
                            "source_labels": [f"__meta_kubernetes_pod_label_{sanitize(key)}",
                                              f"__meta_kubernetes_pod_labelpresent_{sanitize(key)}"]})
        for exp in sel.get("matchExpressions", []):
            label = [f"__meta_kubernetes_pod_label_{sanitize(exp['key'])}",
                     f"__meta_kubernetes_pod_labelpresent_{sanitize(exp['key'])}"]
            present = [f"__meta_kubernetes_pod_labelpresent_{sanitize(exp['key'])}"]
            values = "|".join(exp.get("values", []))
            relabel.append({"In": {"action": "keep", "source_labels": label, "regex": f"({values});true"},
                            "NotIn": {"action": "drop", "source_labels": label, "regex": f"({values});true"},
                            "Exists": {"action": "keep", "source_labels": present, "regex": "true"},
                            "DoesNotExist": {"action": "drop", "source_labels": present, "regex": "true"},
                            }[exp["operator"]])
        assert ep.get("port"), "only named ports are emulated"
        relabel.append({"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                        "regex": ep["port"]})
        relabel += [{"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                    {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"}]
        for label in spec.get("podTargetLabels", []):
            relabel.append({"source_labels": [f"__meta_kubernetes_pod_label_{sanitize(label)}"],
                            "target_label": sanitize(label), "regex": "(.+)", "replacement": "${1}"})
        relabel.append({"target_label": "job", "replacement": f"{ns}/{name}"})
        if spec.get("jobLabel"):
            relabel.append({"source_labels": [f"__meta_kubernetes_pod_label_{sanitize(spec['jobLabel'])}"],
                            "target_label": "job", "regex": "(.+)", "replacement": "${1}"})
        relabel.append({"target_label": "endpoint", "replacement": ep["port"]})
        relabel += [_relabel(rc) for rc in ep.get("relabelings", [])]
        cfg: dict = {"job_name": f"podMonitor/{ns}/{name}/{i}", "honor_labels": bool(ep.get("honorLabels", False)),
                     "metrics_path": ep.get("path", "/metrics"), "relabel_configs": relabel}
        cfg["scrape_interval"] = interval or ep.get("interval", "30s")
        cfg["scrape_timeout"] = interval or ep.get("scrapeTimeout", "10s")
        if ep.get("metricRelabelings"):
            cfg["metric_relabel_configs"] = [_relabel(rc) for rc in ep["metricRelabelings"]]
        configs.append(cfg)
    return configs


def pod_targets(namespace: str, pod: str, labels: dict[str, str], containers: list[dict],
                addresses: dict[str, str]) -> list[dict]:
    """Static targets shaped like Kubernetes SD's pod role: one per declared container port, with the meta labels
    it sets (addresses: port name -> host:port where that port answers here)."""
    out = []
    for ctr in containers:
        for port in ctr.get("ports", []):
            meta = {"__meta_kubernetes_namespace": namespace, "__meta_kubernetes_pod_name": pod,
                    "__meta_kubernetes_pod_phase": "Running", "__meta_kubernetes_pod_ready": "true",
                    "__meta_kubernetes_pod_container_name": ctr["name"],
                    "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                    "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                    "__meta_kubernetes_pod_container_port_protocol": port.get("protocol", "TCP")}
            for key, value in labels.items():
                meta[f"__meta_kubernetes_pod_label_{sanitize(key)}"] = value
                meta[f"__meta_kubernetes_pod_labelpresent_{sanitize(key)}"] = "true"
            out.append({"targets": [addresses[port["name"]]], "labels": meta})
    return out


# ------------------------------------------------------------------------------------- prometheus-adapter queries

def _matcher(key: str, op: str, values: list[str]) -> str:
    """One requirement of a Kubernetes label selector as prometheus-adapter writes it (selectMatcher and
    selectTargetValue: values sorted and joined with |; In with one value is still a regex match)."""
    joined = "|".join(sorted(values))
    if op == "Equals":
        return f'{key}="{joined}"' if len(values) == 1 else f'{key}=~"{joined}"'
    if op == "NotEquals":
        return f'{key}!="{joined}"' if len(values) == 1 else f'{key}!~"{joined}"'
    if op == "In" and values:
        return f'{key}=~"{joined}"'
    if op == "NotIn" and values:
        return f'{key}!~"{joined}"'
    if op == "Exists" and not values:
        return f'{key}!=""'
    if op == "DoesNotExist" and not values:
        return f'{key}=""'
    raise AssertionError(f"{op} {values}: not a query prometheus-adapter builds")


def selector_matchers(selector: dict | None) -> list[str]:
    """An HPA metric selector (matchLabels / matchExpressions) -> the adapter's matchers, sorted by key (the order
    of labels.Selector.Requirements())."""
    reqs = []
    for key, value in (selector or {}).get("matchLabels", {}).items():
        reqs.append((key, "Equals", [value]))
    for exp in (selector or {}).get("matchExpressions", []):
        reqs.append((exp["key"], exp["operator"], exp.get("values", [])))
    return [_matcher(k, op, v) for k, op, v in sorted(reqs, key=lambda r: r[0])]


def render_custom(rule: dict, series: str, namespace: str, pods: list[str], selector: dict | None) -> str:
    """metricsQuery of a `rules:` entry for a pods request (custom.metrics.k8s.io: namespaces/NS/pods/...)."""
    pod_label = next(label for label, res in rule["resources"]["overrides"].items() if res["resource"] == "pod")
    ns_label = next(label for label, res in rule["resources"]["overrides"].items()
                    if res["resource"] == "namespace")
    exprs = selector_matchers(selector) + [f'{ns_label}="{namespace}"']
    exprs.append(f'{pod_label}="{pods[0]}"' if len(pods) == 1 else f'{pod_label}=~"{"|".join(pods)}"')
    return _template(rule["metricsQuery"], series, ",".join(exprs), pod_label)


def render_external(rule: dict, series: str, namespace: str, selector: dict | None) -> str:
    """metricsQuery of an `externalRules:` entry (external.metrics.k8s.io: namespaces/NS/NAME?labelSelector=...)."""
    ns_label = next(label for label, res in rule["resources"]["overrides"].items()
                    if res["resource"] == "namespace")
    exprs = selector_matchers(selector) + [f'{ns_label}="{namespace}"']
    return _template(rule["metricsQuery"], series, ",".join(exprs), "")


def _template(query: str, series: str, matchers: str, group_by: str) -> str:
    out = query.replace("<<.Series>>", series).replace("<<.LabelMatchers>>", matchers)
    out = out.replace("<<.GroupBy>>", group_by)
    assert "<<" not in out, f"template field not emulated in {query!r}"
    return out


def adapter_config() -> dict:
    cm = next(d for d in yaml.safe_load_all((K8S / "prometheus-adapter.yaml").read_text()) if d["kind"] == "ConfigMap")
    return yaml.safe_load(cm["data"]["config.yaml"])


def adapter_rule(section: str, metric: str) -> dict:
    """The rule of `rules` / `externalRules` whose name.as is `metric`."""
    (rule,) = [r for r in adapter_config()[section] if r["name"]["as"] == metric]
    return rule
