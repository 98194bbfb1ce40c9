"""Monitoring configuration: Grafana dashboard, Prometheus alert rules and scrape config.

Static checks (JSON/YAML shape, promtool) plus one live check: a real Prometheus scrapes the session's
`bentoml serve` and evaluates every dashboard and alert expression through its HTTP API.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from scripts.drills.ports import ReservedPort

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "configs" / "grafana" / "triserve-dashboard.json"
ALERTS = ROOT / "configs" / "prometheus" / "alerts.yml"
ALERT_TESTS = ROOT / "configs" / "prometheus" / "alerts.test.yml"
PROM_CONFIG = ROOT / "configs" / "prometheus" / "prometheus.yml"

# Looked up by absolute path in the system directories only, as .ci/run does (never on whatever PATH the run has).
SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def system_tool(name: str) -> str | None:
    """Absolute path of an installed system tool (Debian's prometheus package), or None."""
    return shutil.which(name, path=os.pathsep.join(SYSTEM_DIRS))


PROMTOOL = system_tool("promtool")
PROMETHEUS = system_tool("prometheus")
INSTALL_HINT = "install it with `apt-get install prometheus` (Debian; .ci/run does this)"
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason=f"promtool is not installed; {INSTALL_HINT}")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason=f"prometheus is not installed; {INSTALL_HINT}")

WAIT_S = 30  # bound on every wait against Prometheus

# Metric families the service exposes (the contract; histograms also as _bucket/_sum/_count).
CONTRACT = {
    "triserve_requests_total", "triserve_stage_seconds", "triserve_runner_queue_depth", "triserve_runner_batch_size",
    "triserve_deployment_pending_items", "triserve_deployment_pending_requests",
    "triserve_runner_batch_seconds", "triserve_degraded_total", "triserve_rejected_total", "triserve_breaker_state",
    "triserve_drift_psi", "triserve_process_rss_bytes", "triserve_inflight_requests", "triserve_model_info",
    "bentoml_service_request_total", "bentoml_service_request_duration_seconds",
    "bentoml_service_adaptive_batch_size",
    # runner memory and residency (runners/service.py; issue 20)
    "triserve_model_memory_bytes", "triserve_runner_memory_budget_bytes", "triserve_runner_memory_splits_total",
    "triserve_model_resident", "triserve_model_loads_total", "triserve_model_evictions_total",
    "triserve_model_load_duration_seconds",
    # devices (observability/device.py): only where NVML sees a GPU
    "triserve_device_memory_bytes", "triserve_device_utilization_ratio", "triserve_device_info",
}
# Exported for Triton's statistics extension (services/protocols/statistics.py reads them back; not on the dashboard:
# tests/services/protocols/test_triton_statistics.py checks that /metrics has them).
STATISTICS = {"triserve_deployment_failed_seconds", "triserve_deployment_last_inference_timestamp_seconds",
              "triserve_version_call_seconds", "triserve_version_items_total",
              "triserve_version_last_inference_timestamp_seconds", "triserve_runner_execution_seconds"}
HISTOGRAMS = {"triserve_stage_seconds", "triserve_runner_batch_size", "triserve_runner_batch_seconds",
              "triserve_model_load_duration_seconds",
              "bentoml_service_request_duration_seconds", "bentoml_service_adaptive_batch_size"}
REQUIRED_ALERTS = {"TriserveLatencyP99High", "TriserveErrorRateHigh", "TriserveQueueSaturated", "TriserveMemoryGrowth",
                   "TriserveMemoryLeakTrend", "TriserveDeviceMemoryHigh", "TriserveModelThrashing",
                   "TriserveDriftHigh", "TriserveBreakerOpen", "TriserveDegradedShareHigh"}
# Grafana variables -> what a query for "All" becomes.
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "15s", "$deployment": ".*", "$slot": ".*",
                "$gpu_namespace": ".*"}


def metric_families(expr: str) -> set[str]:
    names = set(re.findall(r"\b(?:triserve|bentoml)_[a-z0-9_]+", expr))
    return {re.sub(r"_(bucket|sum|count)$", "", n) if re.sub(r"_(bucket|sum|count)$", "", n) in HISTOGRAMS else n
            for n in names}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def all_panels(dash: dict) -> list[dict]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # collapsed rows keep their panels inside
    return out


def dashboard_exprs() -> list[tuple[str, str]]:
    """(panel title, PromQL with Grafana variables substituted) for every panel target."""
    exprs = []
    for p in all_panels(dashboard()):
        for t in p.get("targets", []):
            expr = t["expr"]
            for var, value in GRAFANA_VARS.items():
                expr = expr.replace(var, value)
            exprs.append((p["title"], expr))
    return exprs


def alert_rules() -> list[dict]:
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


# --- static ---------------------------------------------------------------------------------------------------
def test_dashboard_is_well_formed():
    dash = dashboard()
    assert 36 <= dash["schemaVersion"] <= 41 and dash["uid"] and dash["title"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource" and variables["DS_PROMETHEUS"]["query"] == "prometheus"
    panels = all_panels(dash)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    used = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
        assert p["targets"], f"panel {p['title']!r} has no targets"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert isinstance(t.get("expr"), str) and t["expr"].strip(), f"panel {p['title']!r}: target without expr"
            assert t["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
            unknown = metric_families(t["expr"]) - CONTRACT
            assert not unknown, f"panel {p['title']!r} uses metrics outside the contract: {unknown}"
            used |= metric_families(t["expr"])
    assert used == CONTRACT, f"contract metrics without a panel: {CONTRACT - used}"
    for _, expr in dashboard_exprs():
        assert "$" not in expr, f"unsubstituted Grafana variable in {expr!r}"


def test_dashboard_covers_the_required_views():
    panels = {p["title"]: p for p in all_panels(dashboard())}
    exprs = " ".join(t["expr"] for p in panels.values() for t in p.get("targets", []))
    for q in ("0.5", "0.99", "0.999"):
        assert f"histogram_quantile({q}, sum by (deployment, stage, le) (rate(triserve_stage_seconds_bucket" in exprs
    assert 'status=~"5.."' in exprs and 'status=~"4.."' in exprs
    assert any(p["type"] == "heatmap" for p in panels.values())
    drift = next(p for t, p in panels.items() if "Drift" in t)
    assert {"color": "red", "value": 0.2} in drift["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert drift["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "line"
    breaker = next(p for t, p in panels.items() if "breaker" in t.lower())
    texts = {v["text"] for m in breaker["fieldConfig"]["defaults"]["mappings"] for v in m["options"].values()}
    assert texts == {"closed", "half-open", "open"}


def test_dashboard_shows_memory_residency_and_devices_with_the_alert_lines():
    """Runner memory, residency, loads and devices have panels, and the lines drawn on them are the alerts' own
    thresholds (one number, not two that drift apart)."""
    panels = {p["title"]: p for p in all_panels(dashboard())}
    exprs = " ".join(t["expr"] for p in panels.values() for t in p.get("targets", []))
    for q in ("0.5", "0.99"):
        assert f"histogram_quantile({q}, sum by (slot, le) (rate(triserve_model_load_duration_seconds_bucket" in exprs
    assert "sum by (slot, trigger, outcome) (rate(triserve_model_loads_total" in exprs
    residency = panels["Model residency per slot"]
    texts = {v["text"] for m in residency["fieldConfig"]["defaults"]["mappings"] for v in m["options"].values()}
    assert texts == {"loaded", "not loaded"}
    rules = {r["alert"]: r["expr"] for r in alert_rules()}

    def line(title_part: str) -> float:
        panel = next(p for t, p in panels.items() if title_part in t)
        steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "line"
        return next(s["value"] for s in steps if s["color"] == "red")

    assert f"> {line('Device memory used share')}" in rules["TriserveDeviceMemoryHigh"]
    assert f"* 3600 > {line('RSS growth per process')}" in rules["TriserveMemoryLeakTrend"]


def test_dashboard_has_dcgm_panels_next_to_the_nvml_ones_in_the_same_units():
    """NVIDIA's dcgm-exporter (what GPU clusters already run) beside the runner's own NVML series: memory in bytes
    (DCGM's MiB converted), used share and utilisation as 0-1 ratios (DCGM's percent converted), plus power."""
    panels = all_panels(dashboard())
    titles = [p["title"] for p in panels]
    nvml_row, dcgm_row = titles.index("Device (NVML, from the runner)"), titles.index("GPU (DCGM exporter)")
    assert dcgm_row == nvml_row + 5  # the row right after the NVML row's four panels
    dcgm = {p["title"]: p for p in panels[dcgm_row + 1:] if "DCGM" in json.dumps(p.get("targets", []))}

    by_title = {p["title"]: p for p in panels}

    def unit(part: str) -> str:
        return next(p for t, p in by_title.items() if part in t)["fieldConfig"]["defaults"]["unit"]

    def exprs(part: str) -> str:
        return " ".join(t["expr"] for title, p in dcgm.items() if part in title for t in p["targets"])

    assert unit("Device memory (used / total)") == unit("GPU framebuffer, DCGM") == "bytes"
    assert "DCGM_FI_DEV_FB_USED" in exprs("GPU framebuffer, DCGM") and "* 1048576" in exprs("GPU framebuffer, DCGM")
    assert unit("Device memory used share") == unit("GPU framebuffer used share") == "percentunit"
    assert unit("Device utilisation") == unit("GPU utilisation, DCGM") == "percentunit"
    assert "DCGM_FI_DEV_GPU_UTIL" in exprs("GPU utilisation") and ") / 100" in exprs("GPU utilisation")
    assert "DCGM_FI_DEV_POWER_USAGE" in exprs("power") and unit("power") == "watt"
    share = next(p for t, p in dcgm.items() if "used share" in t)
    steps = share["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert {"color": "red", "value": 0.9} in steps  # TriserveDeviceMemoryHigh's threshold, as on the NVML panel
    for p in dcgm.values():
        for t in p["targets"]:
            assert '{namespace=~"$gpu_namespace"}' in t["expr"], (p["title"], t["expr"])


def test_alert_rules_are_complete():
    rules = alert_rules()
    names = {r["alert"] for r in rules}
    assert REQUIRED_ALERTS <= names, REQUIRED_ALERTS - names
    runbooks = (ROOT / "docs" / "runbooks.md").read_text()
    for r in rules:
        assert r["labels"]["severity"] in {"page", "warning", "ticket"}, r["alert"]
        # the Prometheus convention: runbook_url, here to the alert's own section of docs/runbooks.md
        assert set(r["annotations"]) == {"summary", "description", "runbook_url"}, r["alert"]
        assert r["annotations"]["runbook_url"] == f"docs/runbooks.md#{r['alert'].lower()}"
        assert f"\n## {r['alert']}\n" in runbooks, r["alert"]
        assert "for" in r, r["alert"]
        unknown = metric_families(r["expr"]) - CONTRACT
        assert not unknown, f"{r['alert']} uses metrics outside the contract: {unknown}"


@needs_promtool
def test_promtool_check_rules():
    res = promtool("check", "rules", str(ALERTS))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in res.stdout


@needs_promtool
def test_promtool_rule_unit_tests():
    """Every alert fires on synthetic series that should fire it, with the expected labels and rendered text."""
    res = promtool("test", "rules", str(ALERT_TESTS))
    assert res.returncode == 0, res.stdout + res.stderr


@needs_promtool
def test_promtool_check_example_config():
    res = promtool("check", "config", str(PROM_CONFIG))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: 1 rule files found" in res.stdout


# --- live: a real Prometheus scraping the session server ----------------------------------------------------------
class Prometheus:
    """`prometheus` on 127.0.0.1:<free port> scraping one target every second (or the scrape configs given, e.g. the
    Prometheus Operator's for a PodMonitor: tests/configs/test_k8s_live.py); stopped by PID (process group)."""

    def __init__(self, target: str | None, workdir: Path, scrape_configs: list[dict] | None = None,
                 rule_files: list[Path] | None = None):
        self._port = ReservedPort()  # until stop(): Go's net.Listen sets SO_REUSEADDR, so prometheus binds it meanwhile
        self.port = self._port.number
        self.url = f"http://127.0.0.1:{self.port}"
        if scrape_configs is None:
            scrape_configs = [{"job_name": "triserve", "scrape_interval": "1s", "scrape_timeout": "1s",
                               "static_configs": [{"targets": [target]}]}]
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in (rule_files if rule_files is not None else [ALERTS])],
            "scrape_configs": scrape_configs,
        }
        config_path = workdir / "prometheus.yml"
        config_path.write_text(json.dumps(config, indent=2))  # JSON is YAML
        self.log_path = workdir / "prometheus.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config_path}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def wait_ready(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"prometheus not ready after {WAIT_S}s:\n{self.log_tail()}")

    def query(self, expr: str) -> dict:
        resp = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = resp.json()
        assert resp.status_code == 200 and body["status"] == "success", f"{expr!r}: {resp.status_code} {body}"
        return body["data"]

    def wait_for(self, what: str, check) -> object:
        deadline = time.monotonic() + WAIT_S
        last = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            time.sleep(0.5)
        raise TimeoutError(f"{what}: not seen within {WAIT_S}s (last: {last})\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._log.close()
        self._port.release()


@pytest.fixture(scope="module")
def prometheus(server, tmp_path_factory):
    if PROMETHEUS is None:
        pytest.skip(f"prometheus is not installed; {INSTALL_HINT}")
    prom = Prometheus(server.url.removeprefix("http://"), tmp_path_factory.mktemp("prometheus"))
    try:
        prom.wait_ready()
        yield prom
    finally:
        prom.stop()


@needs_prometheus
def test_prometheus_scrapes_service_and_evaluates_every_expression(server, prometheus):
    for i in range(5):
        # A generous deadline: a loaded CI machine must not turn this into a 504.
        resp = httpx.post(f"{server.url}/v1/classify", json={"texts": [f"hello {i}"]},
                          headers={"X-Request-Timeout-Ms": "30000"}, timeout=60)
        assert resp.status_code == 200, f"{resp.status_code} {resp.text} (server log: {server.log_path})"

    def target_up():
        targets = httpx.get(f"{prometheus.url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
        return [t for t in targets if t["health"] == "up"] or None

    prometheus.wait_for("scrape target up", target_up)

    def text_requests():
        result = prometheus.query('sum(triserve_requests_total{deployment="text",status="200"})')["result"]
        return result and float(result[0]["value"][1]) > 0 and result

    prometheus.wait_for("triserve_requests_total{deployment='text'} > 0 through Prometheus", text_requests)
    # rate() needs two samples of the counter: then the QPS panel shows the text deployment.
    qps = next(expr for title, expr in dashboard_exprs() if title == "QPS by deployment")
    prometheus.wait_for("QPS panel series for deployment=text",
                        lambda: [r for r in prometheus.query(qps)["result"] if r["metric"].get("deployment") == "text"])

    exprs = dashboard_exprs() + [(r["alert"], r["expr"]) for r in alert_rules()]
    failures = []
    for name, expr in exprs:
        resp = httpx.get(f"{prometheus.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = resp.json()
        if resp.status_code != 200 or body.get("status") != "success":
            failures.append(f"{name}: {expr!r} -> {resp.status_code} {body.get('errorType')}: {body.get('error')}")
    assert not failures, "\n".join(failures)

    # The rule file was loaded by Prometheus and every rule evaluates without error.
    def rules_evaluated():
        groups = httpx.get(f"{prometheus.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if rules and all(r["health"] != "unknown" for r in rules) else None

    rules = prometheus.wait_for("every alert rule evaluated", rules_evaluated)
    assert {r["name"] for r in rules} == {r["alert"] for r in alert_rules()}
    bad = [(r["name"], r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad
