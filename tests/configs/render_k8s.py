"""The Prometheus Operator objects generated from the monitoring configs: one source of truth each.

* configs/deploy/k8s/components/prometheus-operator/prometheusrule.yaml: configs/prometheus/alerts.yml's `groups`
  as a monitoring.coreos.com/v1 PrometheusRule (alerts.yml stays the file promtool checks and unit-tests);
* configs/deploy/k8s/components/prometheus-operator/grafana-dashboard.yaml: configs/grafana/triserve-dashboard.json,
  byte for byte, in a ConfigMap labelled grafana_dashboard: "1" (what Grafana's dashboard sidecar, e.g.
  kube-prometheus-stack's, loads).

    python -m tests.configs.render_k8s            # rewrite both after editing alerts.yml or the dashboard
    python -m tests.configs.render_k8s --check    # exit 1 when either is stale (tests/configs/test_k8s_operator.py)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "configs" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "configs" / "grafana" / "triserve-dashboard.json"
COMPONENT = ROOT / "configs" / "deploy" / "k8s" / "components" / "prometheus-operator"
PROMETHEUS_RULE = COMPONENT / "prometheusrule.yaml"
DASHBOARD_CONFIGMAP = COMPONENT / "grafana-dashboard.yaml"
DASHBOARD_KEY = DASHBOARD.name  # the file name Grafana's sidecar writes the dashboard to

LABELS = {"app.kubernetes.io/name": "triserve", "app.kubernetes.io/part-of": "triserve"}


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (PromQL, the dashboard JSON), so the generated files stay readable."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(doc: dict, header: str) -> str:
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True, default_flow_style=False)
    return header + body


def prometheus_rule() -> dict:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "triserve", "namespace": "triserve", "labels": dict(LABELS)},
            "spec": {"groups": groups}}


def dashboard_configmap() -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "triserve-dashboard", "namespace": "monitoring",
                         "labels": {**LABELS, "grafana_dashboard": "1"},
                         "annotations": {"grafana_folder": "triserve"}},
            "data": {DASHBOARD_KEY: DASHBOARD.read_text()}}


RULE_HEADER = """\
# GENERATED from configs/prometheus/alerts.yml by `python -m tests.configs.render_k8s`: do not edit, edit alerts.yml
# (promtool checks and unit-tests it: configs/prometheus/alerts.test.yml) and regenerate.
# The Prometheus Operator loads it when the Prometheus' ruleSelector matches its labels (kube-prometheus-stack: add
# `release: <release name>` or set ruleSelectorNilUsesHelmValues=false). up{job="triserve"} names the job the
# PodMonitor sets (jobLabel: app.kubernetes.io/part-of).
"""
DASHBOARD_HEADER = """\
# GENERATED from configs/grafana/triserve-dashboard.json by `python -m tests.configs.render_k8s`: do not edit, edit
# the dashboard and regenerate. Grafana's dashboard sidecar (kube-prometheus-stack: grafana.sidecar.dashboards,
# label grafana_dashboard, folder from the grafana_folder annotation) loads it from the namespace it watches
# (monitoring here); ${DS_PROMETHEUS} is the dashboard's data source variable (the default Prometheus).
"""


def rendered() -> dict[Path, str]:
    return {PROMETHEUS_RULE: _dump(prometheus_rule(), RULE_HEADER),
            DASHBOARD_CONFIGMAP: _dump(dashboard_configmap(), DASHBOARD_HEADER)}


def stale() -> list[Path]:
    return [path for path, text in rendered().items() if not path.is_file() or path.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 when a generated file differs, write nothing")
    args = ap.parse_args(argv)
    if args.check:
        for path in stale():
            print(f"stale: {path.relative_to(ROOT)} (run python -m tests.configs.render_k8s)")
        return 1 if stale() else 0
    for path, text in rendered().items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
